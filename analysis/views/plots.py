"""Figures of replays and sweeps, as matplotlib ``Figure`` objects that need no display.

matplotlib is imported inside each function, so ``import analysis`` and ``--help`` stay
fast; figures are built on ``matplotlib.figure.Figure`` directly (no pyplot, no global
state), so they work headless and in threads. They draw results computed beforehand
(``analysis.make_plot`` runs the replays a kind needs). Save them with :func:`save_figure`::

    import analysis
    from analysis.views import plots

    prepared = analysis.prepare(analysis.load_logs(["runs/alfworld/"]))
    figure = analysis.make_plot("sweep", prepared, keep_versions=[0, 1, 2, 4], max_preempts=[None, 1])
    plots.save_figure(figure, "sweep.png")
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from analysis.engine import (
    PreparedLog,
    ReplayConfig,
    ReplayResult,
    SweepResult,
)
from analysis.engine.config import k_label, m_label
from analysis.engine.run_loop.sweep import RUN_LOOP_ENGINE, LoopSetting
from analysis.views._figures import (
    FIGURE_FORMATS as FIGURE_FORMATS,
    PNG_DPI as PNG_DPI,
    bar_heights,
    bar_ticks,
    box_replayed,
    capped_bars,
    floats,
    grid_setting,
    new_figure,
    note_setting,
    save_figure as save_figure,
    settings_note as settings_note,
    show_empty,
    sweep_setting,
)

# Re-exported: plots is where callers find every figure.
from analysis.views.timeline import (
    TIMELINE_BINS as TIMELINE_BINS,
    TIMELINE_MAX_BATCHES as TIMELINE_MAX_BATCHES,
    plot_timeline as plot_timeline,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

PLOT_KINDS = ("sweep", "spans", "gaps", "timeline", "heatmap")
"""What ``analysis.make_plot`` draws."""

# A histogram whose smallest bar is below this share of its tallest gets a log count axis.
LOG_COUNTS_RATIO = 0.05


def _kept_column(rows: pl.DataFrame) -> tuple[str, str]:
    """The kept-share column of a sweep and its unit: tokens, or samples when tokens are unknown."""
    if rows.height and rows["tokens_kept_pct"].null_count() == 0:
        return "tokens_kept_pct", "% of response tokens"
    return "samples_kept_pct", "% of samples"


def _max_preempts_values(rows: pl.DataFrame) -> list[int | None]:
    """The M values of a sweep in the order they were given."""
    return list(rows["max_preempts"].unique(maintain_order=True).to_list())


# K=0 (the control off) is a lone marker of its own shape, never joined to K=1.
_K_OFF_MARKER = "X"


class _SweepStyle:
    """How one M's series is drawn; M=none (off) is hollow, dotted and on top.

    M=none often coincides with the largest M swept; drawn like the others it would
    hide under (or over) that line. Hollow, larger markers on top let both show.
    """

    def __init__(self, *, off: bool) -> None:
        self.off = off
        self.marker = "D" if off else "o"
        self.linestyle = ":" if off else "-"
        self.markersize = 9.0 if off else 6.0
        self.zorder = 4.0 if off else 2.0

    @classmethod
    def of(cls, max_preempts: int | None) -> _SweepStyle:
        return cls(off=max_preempts is None)

    def facecolor(self, color: str) -> str:
        return "none" if self.off else color


def _plot_against_k(
    ax: Axes,
    series: pl.DataFrame,
    column: str,
    color: str,
    style: _SweepStyle,
    *,
    label: str,
    kind: str = "kept",
) -> None:
    """One M's values against K: a line over K >= 1 and, apart from it, a K=0 marker.

    K=0 turns the control off: a different regime, not the first point of the K trend,
    so joining it to K=1 would draw a V that is not a trend. ``kind`` "kept" is styled by
    M alone; on the gap panel the line style tells "mean" (solid) from "max" (dashed,
    squares), and M off keeps only its hollow markers drawn on top.
    """
    is_max = kind == "max"
    shared = {
        "color": color,
        "markersize": style.markersize,
        "markerfacecolor": style.facecolor(color),
        "zorder": style.zorder,
    }
    trend = series.filter(pl.col("keep_versions") > 0)
    if trend.height:
        ax.plot(
            trend["keep_versions"].to_list(),
            floats(trend[column].to_list()),
            marker="s" if is_max else style.marker,
            linestyle={"kept": style.linestyle, "mean": "-", "max": "--"}[kind],
            label=label,
            **shared,  # type: ignore[arg-type]
        )
    control_off = series.filter(pl.col("keep_versions") == 0)
    if control_off.height:
        ax.plot(
            [0],
            floats(control_off[column].to_list()),
            marker="s" if is_max else _K_OFF_MARKER,
            linestyle="None",
            label=f"_K off, {label}",
            **shared,  # type: ignore[arg-type]
        )


def plot_sweep(sweep: SweepResult) -> Figure:
    """Kept share and version gap against K, one line per M, Pareto-efficient settings ringed."""
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    rows = sweep.rows
    kept_column, kept_unit = _kept_column(rows)
    figure = new_figure(12, 4.8)
    kept_ax, gap_ax = figure.subplots(1, 2, sharex=True)
    batch = rows["batch_groups"].unique().to_list()
    note_setting(figure, sweep_setting(rows))
    figure.suptitle(
        "Sweep of keep_versions (K) and max_preempts (M)"
        + (f", B={batch[0]} groups per batch" if len(batch) == 1 else "")
        + f", on {_engine_words(sweep)}"
        + (f"\n{_modelled_words(sweep)}" if _modelled_words(sweep) else "")
    )
    kept_ax.set_title(f"Kept data ({kept_unit})")
    kept_ax.set_xlabel("keep_versions K (versions; 0 = off)")
    kept_ax.set_ylabel(f"kept ({kept_unit})")
    gap_ax.set_title("Version gap of kept trajectories")
    gap_ax.set_xlabel("keep_versions K (versions; 0 = off)")
    gap_ax.set_ylabel("version gap (versions)")
    for ax in (kept_ax, gap_ax):
        ax.grid(True, alpha=0.3)

    if rows.height == 0:
        show_empty(kept_ax, "no settings swept")
        show_empty(gap_ax, "no settings swept")
        return figure

    keep_values = sorted(rows["keep_versions"].unique().to_list())
    has_gaps = rows["version_gap_mean"].null_count() < rows.height
    pareto = rows.filter(pl.col("pareto"))
    for position, max_preempts in enumerate(_max_preempts_values(rows)):
        color = f"C{position % 10}"
        style = _SweepStyle.of(max_preempts)
        series = rows.filter(pl.col("max_preempts").eq_missing(max_preempts)).sort("keep_versions")
        label = "M off (none)" if max_preempts is None else f"M={max_preempts}"
        _plot_against_k(kept_ax, series, kept_column, color, style, label=label)
        if has_gaps:
            _plot_against_k(
                gap_ax, series, "version_gap_mean", color, style, label=label, kind="mean"
            )
            _plot_against_k(
                gap_ax, series, "version_gap_max", color, style, label=label, kind="max"
            )
    if 0 in keep_values and len(keep_values) > 1:
        for ax in (kept_ax, gap_ax) if has_gaps else (kept_ax,):
            ax.axvline(0.5, color="0.6", linewidth=0.8, linestyle=":", label="_divider")
    if pareto.height:
        ring = {"s": 160, "facecolors": "none", "edgecolors": "black", "linewidths": 1.5}
        kept_ax.scatter(
            pareto["keep_versions"].to_list(),
            floats(pareto[kept_column].to_list()),
            zorder=3,
            label="Pareto-efficient",
            **ring,
        )
        if has_gaps:
            gap_ax.scatter(
                pareto["keep_versions"].to_list(),
                floats(pareto["version_gap_mean"].to_list()),
                zorder=3,
                **ring,
            )
    kept_ax.set_xticks(keep_values, [k_label(k) for k in keep_values])
    kept_ax.set_ylim(0, 105)
    if not (rows[kept_column].fill_null(0) > 0).any():
        kept_ax.text(
            0.5,
            0.5,
            "nothing kept under any setting",
            transform=kept_ax.transAxes,
            ha="center",
            va="center",
            color="0.35",
        )
    handles, _ = kept_ax.get_legend_handles_labels()
    if 0 in keep_values:
        handles.append(
            Line2D([], [], color="0.3", marker=_K_OFF_MARKER, linestyle="None", label="K off (K=0)")
        )
    # Outside the data: the lines of a sweep often run along the top of the panel.
    kept_ax.legend(
        handles=handles, title="max_preempts", loc="upper left", bbox_to_anchor=(1.01, 1)
    )
    if has_gaps:
        gap_ax.set_ylim(bottom=0)
        gap_ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        gap_ax.legend(
            handles=[
                Line2D([], [], color="0.3", marker="o", label="mean"),
                Line2D([], [], color="0.3", marker="s", linestyle="--", label="max"),
            ],
            title="colour = M",
            loc="upper left",
            bbox_to_anchor=(1.01, 1),
        )
    else:
        show_empty(gap_ax, "no versioned trajectory kept:\nno version gap to show")
    return figure


def wants_log_counts(counts: Sequence[int]) -> bool:
    """Whether a histogram needs a log count axis: its smallest non-empty bar is < 5% of the tallest.

    Below that the smallest bars are a pixel or two high on a linear axis.

    Examples:
        >>> wants_log_counts([100, 40, 10])
        False
        >>> wants_log_counts([15000, 4000, 90])
        True
    """
    shown = [count for count in counts if count > 0]
    return bool(shown) and min(shown) < LOG_COUNTS_RATIO * max(shown)


def _engine_words(of: SweepResult | ReplayResult | LoopSetting) -> str:
    """The replay that gave a figure's numbers, in words (its title names it)."""
    if isinstance(of, LoopSetting):
        return f"Dressage's {of.replay.loop} loop"
    if isinstance(of, SweepResult) and of.engine == RUN_LOOP_ENGINE:
        loops = of.rows["loop"].unique().to_list() if "loop" in of.rows.columns else []
        return f"Dressage's {loops[0]} loop" if len(loops) == 1 else "Dressage's loop"
    return "the simple loop"


def _modelled_words(sweep: SweepResult) -> str:
    """What a run folder's sweep figure says of its rows drawn from the run's model
    (docs/semantics.md §12.8); empty when every row is a replay."""
    modelled = "figures_from" in sweep.rows.columns and "model" in sweep.rows["figures_from"]
    return "the run's own setting replayed; the rest simulated on the run's model" * modelled


def plot_spans(prepared: PreparedLog | LoopSetting, result: ReplayResult | LoopSetting) -> Figure:
    """Histogram of version spans per trajectory, all vs kept, with the M+1 limit marked.

    The count axis is logarithmic when the tail is small next to the head (see
    :func:`wants_log_counts`), as it is in real runs: thousands of one-version
    trajectories and a few dozen long ones, which a linear axis draws as nothing.
    """
    from matplotlib.ticker import MaxNLocator

    # Counted on the per-group arrays: a frame of every trajectory was 150 MB of a
    # report over 300,000 groups.
    all_counts, kept_counts = result.span_histograms()
    all_spans = Counter({span: int(n) for span, n in enumerate(all_counts.tolist()) if n})
    kept_spans = Counter({span: int(n) for span, n in enumerate(kept_counts.tolist()) if n})
    checked = int(all_counts.sum())
    unchecked = prepared.n_trajectories - checked

    figure = new_figure(8, 4.8)
    ax = figure.subplots()
    note_setting(figure, result.config.describe())
    ax.set_title(
        f"Version span per trajectory ({result.config.describe()}, {_engine_words(result)})"
    )
    ax.set_xlabel("version span (distinct versions in one trajectory)")
    ax.set_ylabel("trajectories")
    ax.grid(True, axis="y", alpha=0.3)
    if not all_spans:
        show_empty(ax, "no token versions in the log:\nspans are unknown")
        return figure

    spans, tail_from = capped_bars(list(all_spans))
    heights = bar_heights(all_spans, spans, tail_from)
    width = 0.4
    ax.bar(
        [s - width / 2 for s in spans],
        heights,
        width=width,
        color="0.65",
        label=f"all trajectories (n={checked})",
    )
    ax.bar(
        [s + width / 2 for s in spans],
        bar_heights(kept_spans, spans, tail_from),
        width=width,
        color="C0",
        label=f"kept (n={sum(kept_spans.values())})",
    )
    max_preempts = result.config.max_preempts
    if max_preempts is not None:
        # Between bins: everything left of the line is within the limit of M+1 versions.
        ax.axvline(
            max_preempts + 1.5,
            color="C3",
            linestyle="--",
            label=f"limit M+1 = {max_preempts + 1} versions",
        )
    ax.set_xticks(spans, bar_ticks(spans, tail_from))
    if wants_log_counts(heights):
        ax.set_yscale("log")
        # Room below a count of 1 so the smallest bar shows; above for the legend.
        ax.set_ylim(0.5, max(heights) * 3)
        ax.set_ylabel("trajectories (log scale)")
    else:
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    for bars in ax.containers:
        # Counts over the bars: a log axis is hard to read off exactly.
        tops = [bar.get_height() for bar in bars]
        ax.bar_label(
            bars,  # type: ignore[arg-type]
            labels=[f"{h:.0f}" if h else "" for h in tops],
            fontsize=7,
            color="0.3",
            padding=1,
        )
    legend_title = (
        f"{unchecked} trajectories without token versions not shown" if unchecked else None
    )
    ax.legend(title=legend_title, loc="best")
    return figure


def plot_gaps(
    prepared: PreparedLog | LoopSetting | None,
    results: Sequence[ReplayResult] | Sequence[LoopSetting],
) -> Figure:
    """Share of kept trajectories at each version gap, one bar series per setting."""
    series: list[tuple[ReplayConfig, Counter[int], int]] = []
    engine = "the simple loop"
    for result in results:  # one at a time: a sweep's results are replayed when read
        engine = _engine_words(result)
        values, sizes = np.unique(result.kept_gaps(), return_counts=True)
        tally = Counter(dict(zip(values.tolist(), sizes.tolist(), strict=True)))
        series.append((result.config, tally, int(sizes.sum())))
        del result
    configs = [config for config, _, _ in series]
    shared_m = len({c.max_preempts for c in configs}) <= 1

    figure = new_figure(8, 4.8)
    ax = figure.subplots()
    note_setting(
        figure,
        grid_setting(
            list(dict.fromkeys(c.keep_versions for c in configs)),
            list(dict.fromkeys(c.max_preempts for c in configs)),
            [c.batch_groups for c in configs],
        ),
    )
    title = "Version gap of kept trajectories"
    if configs and shared_m:
        config = configs[0]
        title += f" (M={m_label(config.max_preempts)}, B={config.batch_groups})"
    ax.set_title(f"{title}, on {engine}")
    ax.set_xlabel("version gap (versions behind the current one)")
    ax.set_ylabel("% of kept trajectories")
    ax.grid(True, axis="y", alpha=0.3)
    all_gaps = [gap for _, counts, _ in series for gap in counts]
    if not all_gaps:
        show_empty(ax, "nothing kept with a version:\nno version gap to show")
        return figure

    gap_values, tail_from = capped_bars(all_gaps)
    width = 0.8 / len(series)
    for position, (config, counts, total) in enumerate(series):
        label = f"K={k_label(config.keep_versions)}"
        if not shared_m:
            label += f", M={m_label(config.max_preempts)}"
        label += f" (n={total})"
        offset = (position - (len(series) - 1) / 2) * width
        ax.bar(
            [gap + offset for gap in gap_values],
            [
                100.0 * h / total if total else 0.0
                for h in bar_heights(counts, gap_values, tail_from)
            ],
            width=width,
            color=f"C{position % 10}",
            label=label,
        )
    ax.set_xticks(gap_values, bar_ticks(gap_values, tail_from))
    ax.set_ylim(0, 105)
    ax.legend(title="keep_versions", loc="best")
    return figure


def plot_heatmap(sweep: SweepResult) -> Figure:
    """K x M grid of the kept share, each cell annotated; bold cells are Pareto-efficient."""
    rows = sweep.rows
    kept_column, kept_unit = _kept_column(rows)
    keep_values = sorted(rows["keep_versions"].unique().to_list()) if rows.height else []
    preempt_values = _max_preempts_values(rows) if rows.height else []
    figure = new_figure(
        max(6.0, 1.0 * len(keep_values) + 3.5), max(3.5, 0.7 * len(preempt_values) + 2.2)
    )
    ax = figure.subplots()
    note_setting(figure, sweep_setting(rows))
    batch = rows["batch_groups"].unique().to_list() if rows.height else []
    per_batch = f", B={batch[0]}" if len(batch) == 1 else ""
    ax.set_title(
        f"Kept data ({kept_unit}) on {_engine_words(sweep)}{per_batch}\nbold = Pareto-efficient"
        + (
            "; n/a = M not applied"
            if "max_preempts_applied" in rows.columns and not rows["max_preempts_applied"].all()
            else ""
        )
        + (
            "\nboxed = own setting, replayed; the rest from the run's model"
            if _modelled_words(sweep)
            else ""
        )
    )
    ax.set_xlabel("keep_versions K (versions; 0 = off)")
    ax.set_ylabel("max_preempts M (preemptions)")
    if rows.height == 0:
        show_empty(ax, "no settings swept")
        return figure

    cells = {
        (row["max_preempts"], row["keep_versions"]): (row[kept_column], row["pareto"])
        for row in rows.iter_rows(named=True)
    }
    if all(value is None for value, _ in cells.values()):
        show_empty(ax, "no records: no kept share to show")
        return figure
    grid = [
        [floats([cells.get((m, k), (None, False))[0]])[0] for k in keep_values]
        for m in preempt_values
    ]
    image = ax.imshow(grid, cmap="viridis", vmin=0, vmax=100, aspect="auto")
    for row_index, m in enumerate(preempt_values):
        for column_index, k in enumerate(keep_values):
            value, efficient = cells.get((m, k), (None, False))
            ax.text(
                column_index,
                row_index,
                "n/a" if value is None else f"{value:.1f}",
                ha="center",
                va="center",
                # viridis is dark at the low end and bright at the high end; a cell
                # without a value is left white.
                color="black" if value is None or value >= 55 else "white",
                fontweight="bold" if efficient else "normal",
            )
    if _modelled_words(sweep):
        box_replayed(ax, rows, keep_values, preempt_values)
    ax.set_xticks(range(len(keep_values)), [k_label(k) for k in keep_values])
    ax.set_yticks(range(len(preempt_values)), [m_label(m) for m in preempt_values])
    colorbar = figure.colorbar(image, ax=ax)
    colorbar.set_label(f"kept ({kept_unit})")
    return figure
