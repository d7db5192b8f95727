"""The figure of a sweep over policies (docs/semantics.md §13): every policy on the same
axes, tokens kept against mean version gap, and what each loses."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import polars as pl

from analysis.views._figures import floats, new_figure, note_setting, show_empty

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from analysis.rules.policies import PolicySweep

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
    figure = new_figure(13, 5.2 + 0.16 * math.ceil(rows.height / 2))  # the legend below
    scatter_ax, loss_ax = figure.subplots(1, 2, width_ratios=(1.2, 1))
    batch = rows["batch_groups"].unique().to_list() if rows.height else []
    note_setting(
        figure,
        f"{rows.height} policies B={'/'.join(sorted(str(b) for b in batch)) or 'n/a'}",
    )
    on_loop = "loop" in rows.columns and rows.height and rows["loop"].n_unique() == 1
    figure.suptitle(
        (
            f"Staleness policies on one run's Dressage {rows['loop'][0]} loop (own setting "
            "replayed, the rest simulated on the run's model)"
            if on_loop
            else "Staleness policies on one log"
        )
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
    kept = floats(rows[kept_column].to_list())
    if all(math.isnan(value) for value in kept):  # as the heatmap says it
        show_empty(scatter_ax, "no records: no kept share to show")
        show_empty(loss_ax, "no records: no groups to lose")
        return figure
    if all(math.isnan(value) for value in floats(rows["version_gap_mean"].to_list())):
        show_empty(scatter_ax, "no weight versions in the log: no version gap to show")
    else:
        _draw_points(scatter_ax, rows, kept_column)
    _draw_losses(loss_ax, rows)
    return figure


_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")
_LOSS_COLORS = ("0.15", "0.4", "0.62", "0.82")
"""Greys: the losses' colours are not any policy's (the left panel's colours are)."""


def coinciding(rows: pl.DataFrame, kept_column: str) -> list[list[int]]:
    """The rows (by position) that share a point (kept share, both gaps, to 1e-9): each
    set of two or more, in row order."""
    keys: dict[tuple[float, ...], list[int]] = {}
    columns = (kept_column, "version_gap_mean", "version_gap_mean_tokens")
    values = [floats(rows[column].to_list()) for column in columns]
    for number in range(rows.height):
        point = tuple(round(column[number], 9) for column in values)
        if not any(math.isnan(v) for v in point[:2]):
            keys.setdefault(point, []).append(number)
    return [members for members in keys.values() if len(members) > 1]


def alike_groups(rows: pl.DataFrame, kept_column: str) -> list[list[int]]:
    """Every row (by position) in a group of the rows at its point: the policies that
    decide alike (:func:`coinciding`) together, in the order the first of each was given."""
    shared = {members[0]: members for members in coinciding(rows, kept_column)}
    inside = {number for members in shared.values() for number in members}
    return [
        shared.get(number, [number])
        for number in range(rows.height)
        if number in shared or number not in inside
    ]


def _draw_points(ax: Axes, rows: pl.DataFrame, kept_column: str) -> None:
    """One marker per point: policies that decide alike share it, and its label names
    them all (drawn apart, they read as a difference that is not there)."""
    kept = floats(rows[kept_column].to_list())
    gaps = floats(rows["version_gap_mean"].to_list())
    weighted = floats(rows["version_gap_mean_tokens"].to_list())
    policies = rows["policy"].to_list()
    groups = alike_groups(rows, kept_column)
    for place, members in enumerate(groups):
        number = members[0]
        color, marker = f"C{place % 10}", _MARKERS[place % len(_MARKERS)]
        said = "\n= ".join(policies[member] for member in members)
        ax.plot([gaps[number], weighted[number]], [kept[number]] * 2, color=color, linewidth=0.8)
        ax.scatter([gaps[number]], [kept[number]], color=color, marker=marker, s=50, zorder=3,
                   label=said)  # fmt: skip
        ax.scatter([weighted[number]], [kept[number]], facecolors="none", edgecolors=color,
                   marker=marker, s=50, zorder=3)  # fmt: skip
    ax.margins(x=0.06, y=0.12)
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
    alike = len(groups) < rows.height
    title = "A = B: policies that decide alike, one point" if alike else None
    # Outside the axes, under them: ten policies would cover the points and the y label.
    # From the axes' left edge: centred, a legend wider than the axes left the figure.
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(0, -0.14), ncol=2,
              title=title, title_fontsize=8, alignment="left")  # fmt: skip


def _draw_losses(ax: Axes, rows: pl.DataFrame) -> None:
    labels = rows["policy"].to_list()
    positions = list(range(len(labels)))
    bottom = [0.0] * len(labels)
    for number, (column, name) in enumerate(_LOSSES):
        values = [0.0 if math.isnan(v) else v for v in floats(rows[column].to_list())]
        ax.barh(positions, values, left=bottom, color=_LOSS_COLORS[number], label=name)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.set_yticks(positions, labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("share of groups (%)")
    if not any(bottom):
        ax.set_xlim(0, 100)
        ax.text(0.5, 0.5, "no policy lost a group", transform=ax.transAxes, ha="center",
                va="center", fontsize=11, color="0.35")  # fmt: skip
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)
