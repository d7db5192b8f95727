"""Two runs (or two settings) side by side: staleness figures, gap and span shares, drift by gap.

``analysis.compare_logs`` replays each log under its own setting and lines the results up
(a :class:`CompareResult`); :func:`plot_compare` draws them. Example::

    import analysis
    from analysis.views.comparison import plot_compare

    fast, slow = (analysis.load_logs([path]) for path in ("runs/fast/", "runs/slow/"))
    result = analysis.compare_logs(fast, slow, config_a=analysis.ReplayConfig(keep_versions=2),
                          config_b=analysis.ReplayConfig(keep_versions=2), names=("fast", "slow"))
    result.table  # one row per metric, one column per run
    plot_compare(result).savefig("compare.png")
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import polars as pl

from analysis.engine import (
    ReplayConfig,
    ReplayResult,
    ReplaySummary,
)
from analysis.engine.grid import SIMPLE_LOOP_ENGINE
from analysis.engine.run_loop.sweep import RUN_LOOP_ENGINE, LoopSetting
from analysis.views._figures import note_setting

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

GAP_SCHEMA: dict[str, pl.DataType] = {
    "run": pl.String(),
    "version_gap": pl.Int64(),
    "trajectories": pl.Int64(),
    "share": pl.Float64(),
}
SPAN_SCHEMA: dict[str, pl.DataType] = {
    "run": pl.String(),
    "span": pl.Int64(),
    "trajectories": pl.Int64(),
    "share": pl.Float64(),
}
DRIFT_SCHEMA: dict[str, pl.DataType] = {
    "run": pl.String(),
    "version_gap": pl.Int64(),
    "records": pl.Int64(),
    "mean_abs_log_prob_diff": pl.Float64(),
}

METRICS = (
    "versions observed",
    "groups total",
    "groups kept (%)",
    "samples kept (%)",
    "tokens kept (%)",
    "groups lost (%)",
    "samples lost (%)",
    "tokens lost (%)",
    "version gap min (versions)",
    "version gap mean (versions)",
    "version gap max (versions)",
    "version span mean (versions)",
    "version span max (versions)",
)
"""Rows of :attr:`CompareResult.table`; lost = dropped stale + rejected span + failed."""


@dataclass(frozen=True)
class CompareResult:
    """Two replays lined up: a metric table, gap and span shares, and log-prob drift by gap.

    ``table`` has columns ``metric`` and one per run name; percentages are 0-100, gaps
    and spans are over kept trajectories (as in the replay summary). ``drift_by_gap``
    is measured over all data (see ``analysis.compare_logs``) and is empty when no record
    of either run carries log-probs.
    """

    names: tuple[str, str]
    results: tuple[ReplayResult | LoopSetting, ReplayResult | LoopSetting]
    """Each run's replay: on the simple loop, or a run folder's on Dressage's own loop."""
    table: pl.DataFrame
    gap_distribution: pl.DataFrame
    span_distribution: pl.DataFrame
    drift_by_gap: pl.DataFrame
    notes: tuple[str, ...] = ()

    @property
    def configs(self) -> tuple[ReplayConfig, ReplayConfig]:
        """The settings replayed, with ``batch_groups`` filled in where it was inferred."""
        return self.results[0].config, self.results[1].config

    @property
    def summaries(self) -> tuple[ReplaySummary, ReplaySummary]:
        """The two replays' summaries, whose figures the table repeats (both on the simple
        loop; a run folder's replay on its own loop has none: :attr:`results`)."""
        first, second = self.results
        if isinstance(first, LoopSetting) or isinstance(second, LoopSetting):
            raise TypeError("a run folder replayed on Dressage's loop has no ReplaySummary")
        return first.summary, second.summary

    @property
    def engines(self) -> tuple[str, str]:
        """Which replay each run had: ``simple-loop`` or ``dressage-loop``."""
        first, second = (
            RUN_LOOP_ENGINE if isinstance(r, LoopSetting) else SIMPLE_LOOP_ENGINE
            for r in self.results
        )
        return first, second

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able form: runs with their settings, the table rows and the three frames."""
        return {
            "runs": [
                {"name": name, "config": result.config.to_dict(), "engine": engine}
                for name, result, engine in zip(self.names, self.results, self.engines, strict=True)
            ],
            "table": [
                {key: _whole(row["metric"], value) for key, value in row.items()}
                for row in self.table.to_dicts()
            ],
            "gap_distribution": self.gap_distribution.to_dicts(),
            "span_distribution": self.span_distribution.to_dicts(),
            "drift_by_gap": self.drift_by_gap.to_dicts(),
            "summaries": {
                name: result.replay.to_dict()
                if isinstance(result, LoopSetting)
                else result.summary.to_dict()
                for name, result in zip(self.names, self.results, strict=True)
            },
            "notes": list(self.notes),
        }


_COUNTS = frozenset(
    ("versions observed", "groups total", "version gap min (versions)",
     "version gap max (versions)", "version span max (versions)")
)  # fmt: skip
"""Metrics that are whole numbers (the table holds every metric as a float)."""


def _whole(metric: str, value: Any) -> Any:
    """A count as an integer in JSON ("groups total": 300, not 300.0)."""
    counted = metric in _COUNTS and isinstance(value, float) and value.is_integer()
    return int(value) if counted else value


THIN_RECORDS = 10
"""A gap's drift from fewer records than this (or than a twentieth of the run's fullest
gap) is drawn hollow, with its count: a mean of one record is not a mean of 900."""


def thin_gaps(records: list[int]) -> list[bool]:
    """Which of a run's gaps rest on few records (:data:`THIN_RECORDS`).

    Examples
    --------
    >>> thin_gaps([919, 60, 1])
    [False, False, True]
    """
    floor = max(THIN_RECORDS, max(records, default=0) / 20)
    return [count < floor for count in records]


def _draw_drift(ax: Axes, run: pl.DataFrame, name: str, color: str) -> bool:
    """One run's drift by gap: a line through every gap, filled markers where a gap has
    records enough, hollow ones with their count where it has few; whether any is thin."""
    gaps, drift = run["version_gap"].to_list(), run["mean_abs_log_prob_diff"].to_list()
    records = run["records"].to_list()
    thin = thin_gaps(records)
    # measured with both controls off, whatever the setting
    ax.plot(gaps, drift, color=color, label=name)
    solid = [(g, d) for g, d, t in zip(gaps, drift, thin, strict=True) if not t]
    if solid:
        ax.scatter(*zip(*solid, strict=True), color=color, marker="o", zorder=3)
    for gap, value, count, few in zip(gaps, drift, records, thin, strict=True):
        if few:
            ax.scatter([gap], [value], facecolors="white", edgecolors=color, marker="o",
                       zorder=3)  # fmt: skip
            ax.annotate(f"n={count}", (gap, value), textcoords="offset points", xytext=(4, 4),
                        fontsize=7, color=color)  # fmt: skip
    return any(thin)


def plot_compare(result: CompareResult) -> Figure:
    """Gap shares, span shares and (when any record has log-probs) drift by gap, per run."""
    from matplotlib.figure import Figure

    has_drift = result.drift_by_gap.height > 0
    panels = 3 if has_drift else 2
    figure = Figure(figsize=(5.2 * panels, 4.2), layout="constrained")
    axes = figure.subplots(1, panels, squeeze=False)[0]
    labels = {
        name: f"{name} ({config.describe()}, {engine})"
        for name, config, engine in zip(result.names, result.configs, result.engines, strict=True)
    }
    _share_bars(
        axes[0],
        result.gap_distribution,
        "version_gap",
        labels,
        title="Version gap of kept trajectories",
        xlabel="version gap (versions behind current)",
    )
    _share_bars(
        axes[1],
        result.span_distribution,
        "span",
        labels,
        title="Version span of kept trajectories",
        xlabel="version span (distinct versions per trajectory)",
    )
    if has_drift:
        ax = axes[2]
        thin_any = False
        for number, name in enumerate(result.names):
            run = result.drift_by_gap.filter(pl.col("run") == name)
            if run.height:
                thin_any |= _draw_drift(ax, run, name, f"C{number}")
        ax.set_title(
            "Log-prob drift by version gap (all data, controls off)"
            + ("\nhollow: a gap of few records, n = its records" if thin_any else "")
        )
        ax.margins(x=0.08, y=0.12)  # room for the counts of the gaps at the edges
        ax.set_xlabel("version gap (versions behind current)")
        ax.set_ylabel("mean |rollout - trainer log-prob| (nats/token)")
        _integer_ticks(ax)
        ax.legend()
    figure.suptitle(f"{result.names[0]} vs {result.names[1]}")
    note_setting(figure, "; ".join(dict.fromkeys(config.describe() for config in result.configs)))
    return figure


def _share_bars(
    ax: Axes,
    distribution: pl.DataFrame,
    column: str,
    labels: dict[str, str],
    *,
    title: str,
    xlabel: str,
) -> None:
    """Side-by-side bars of each run's share (%) per value of ``column``."""
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("share of kept trajectories (%)")
    if distribution.height == 0:
        ax.text(0.5, 0.5, "no kept trajectories", transform=ax.transAxes, ha="center")
        return
    width = 0.8 / len(labels)
    for position, name in enumerate(labels):
        run = distribution.filter(pl.col("run") == name)
        offset = (position - (len(labels) - 1) / 2) * width
        ax.bar(
            [value + offset for value in run[column].to_list()],
            [100 * share for share in run["share"].to_list()],
            width=width,
            label=labels[name],
        )
    _integer_ticks(ax)
    ax.legend()


def _integer_ticks(ax: Axes) -> None:
    """Gaps and spans are whole numbers of versions; keep the ticks so."""
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
