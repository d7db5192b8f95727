"""The figure of a sweep over policies (docs/semantics.md §13): every policy on the same
axes, tokens kept against mean version gap, and what each loses."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import polars as pl

from analysis.views._figures import floats, new_figure, show_empty

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from analysis.policies import PolicySweep

_LOSSES = (
    ("dropped_arrival_pct", "stale, arrival"),
    ("dropped_pending_pct", "stale, pending"),
    ("rejected_span_pct", "span rejected"),
    ("failed_pct", "failed"),
)


def plot_policies(sweep: PolicySweep) -> Figure:
    """Left: kept share against mean version gap, one point per policy (filled: each
    trajectory counts once; hollow: weighted by its tokens, §10.6), the Pareto-efficient
    ones ringed. Right: the groups each policy loses, by outcome."""
    rows = sweep.rows
    kept_column = (
        "tokens_kept_pct" if rows["tokens_kept_pct"].null_count() == 0 else "samples_kept_pct"
    )
    unit = "tokens" if kept_column == "tokens_kept_pct" else "samples"
    figure = new_figure(13, 5.2)
    scatter_ax, loss_ax = figure.subplots(1, 2, width_ratios=(1.2, 1))
    batch = rows["batch_groups"].unique().to_list() if rows.height else []
    figure.suptitle(
        "Staleness policies on one log"
        + (f", B={batch[0]} groups per batch" if len(batch) == 1 else "")
    )
    scatter_ax.set_title(f"Kept data ({unit}) against version gap of kept trajectories")
    scatter_ax.set_xlabel("mean version gap (versions)")
    scatter_ax.set_ylabel(f"kept ({unit}, %)")
    loss_ax.set_title("Groups lost, by outcome (%)")
    for ax in (scatter_ax, loss_ax):
        ax.grid(True, alpha=0.3)
    if rows.height == 0:
        show_empty(scatter_ax, "no policies replayed")
        show_empty(loss_ax, "no policies replayed")
        return figure
    _draw_points(scatter_ax, rows, kept_column)
    _draw_losses(loss_ax, rows)
    return figure


def _draw_points(ax: Axes, rows: pl.DataFrame, kept_column: str) -> None:
    kept = floats(rows[kept_column].to_list())
    gaps = floats(rows["version_gap_mean"].to_list())
    weighted = floats(rows["version_gap_mean_tokens"].to_list())
    for number, label in enumerate(rows["policy"].to_list()):
        color = f"C{number % 10}"
        ax.plot([gaps[number], weighted[number]], [kept[number]] * 2, color=color, linewidth=0.8)
        ax.scatter([gaps[number]], [kept[number]], color=color, s=50, zorder=3, label=label)
        ax.scatter(
            [weighted[number]], [kept[number]], facecolors="none", edgecolors=color, s=50, zorder=3
        )
    pareto = rows.filter(pl.col("pareto"))
    if pareto.height:
        ax.scatter(
            floats(pareto["version_gap_mean"].to_list()),
            floats(pareto[kept_column].to_list()),
            s=170,
            facecolors="none",
            edgecolors="black",
            linewidths=1.3,
            zorder=2,
            label="Pareto-efficient",
        )
    ax.scatter([], [], facecolors="none", edgecolors="0.3", label="hollow: token-weighted gap")
    ax.legend(fontsize=8, loc="best")


def _draw_losses(ax: Axes, rows: pl.DataFrame) -> None:
    labels = rows["policy"].to_list()
    positions = list(range(len(labels)))
    bottom = [0.0] * len(labels)
    for number, (column, name) in enumerate(_LOSSES):
        values = [0.0 if math.isnan(v) else v for v in floats(rows[column].to_list())]
        ax.barh(positions, values, left=bottom, color=f"C{number + 5}", label=name)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.set_yticks(positions, labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("share of groups (%)")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=len(_LOSSES))
