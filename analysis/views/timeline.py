"""The replay timeline: per emitted batch, the version gap, the groups dropped while
collecting it and the observed versions; binned when a run has many batches."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import polars as pl

from analysis.engine import ReplayResult
from analysis.engine.run_loop.sweep import LoopSetting
from analysis.views._figures import floats, legend_outside, new_figure, note_setting, show_empty

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# A timeline of more batches than this is binned into TIMELINE_BINS runs of batches.
TIMELINE_MAX_BATCHES = 60


TIMELINE_BINS = 50


def _bin_batches(batches: pl.DataFrame, bins: int) -> pl.DataFrame:
    """Consecutive batches in ``bins`` equal runs: means and spread of the gap, summed drops.

    ``batch`` becomes the run's middle batch; the version indexes are those at its end.
    """
    return (
        batches.with_row_index("position")
        .with_columns((pl.col("position") * bins // batches.height).alias("bin"))
        .group_by("bin", maintain_order=True)
        .agg(
            pl.col("batch").mean(),
            pl.col("batch").min().alias("first_batch"),
            pl.col("batch").max().alias("last_batch"),
            pl.col("version_gap_mean").mean(),
            pl.col("version_gap_mean").min().alias("version_gap_mean_low"),
            pl.col("version_gap_mean").max().alias("version_gap_mean_high"),
            pl.col("version_gap_max").max(),
            pl.col("dropped_arrival").sum(),
            pl.col("dropped_pending").sum(),
            pl.col("current_version_index").last(),
            pl.col("cutoff_version_index").last(),
        )
    )


def plot_timeline(result: ReplayResult | LoopSetting) -> Figure:
    """Per emitted batch: version gap, groups dropped while collecting it, version index.

    Beyond :data:`TIMELINE_MAX_BATCHES` batches a per-batch line is a zigzag that hides the
    trend, so consecutive batches are binned into :data:`TIMELINE_BINS` runs: the mean gap
    with its min-max band, the largest gap, the drops summed per run.
    """
    from matplotlib.ticker import MaxNLocator

    batches = result.batches
    binned = batches.height > TIMELINE_MAX_BATCHES
    figure = new_figure(11, 8)
    note_setting(figure, result.config.describe())
    gap_ax, drop_ax, index_ax = figure.subplots(3, 1, sharex=True)
    per, size = "per emitted batch", 1
    if binned:
        shown = _bin_batches(batches, TIMELINE_BINS)
        size = math.ceil(batches.height / TIMELINE_BINS)
        per = f"{batches.height} batches in {shown.height} runs of ~{size}"
    else:
        shown = batches
    on = (
        f"Dressage's {result.replay.loop} loop, per rollout call"
        if isinstance(result, LoopSetting)
        else "the simple loop"
    )
    figure.suptitle(f"Replay timeline, {per} ({result.config.describe()}, on {on})")
    gap_ax.set_title(
        "Version gap of the batches' trajectories (line = mean, band = min-max of batch means)"
        if binned
        else "Version gap of the batch's trajectories"
    )
    gap_ax.set_ylabel("version gap (versions)")
    drop_ax.set_title(
        "Groups dropped as stale while collecting the batch" + ("es" if binned else "")
    )
    drop_ax.set_ylabel(f"dropped (groups per ~{size} batches)" if binned else "dropped (groups)")
    index_ax.set_title("Observed weight versions" + (" (at the end of each run)" if binned else ""))
    index_ax.set_ylabel("version index (versions)")
    index_ax.set_xlabel("emitted batch (trainer step)")
    for ax in (gap_ax, drop_ax, index_ax):
        ax.grid(True, alpha=0.3)
    if batches.height == 0:
        for ax in (gap_ax, drop_ax, index_ax):
            show_empty(ax, "no batch emitted: nothing kept")
        return figure

    batch = shown["batch"].to_list()
    marker = "" if binned else "."
    if batches["version_gap_max"].null_count() < batches.height:
        gap_ax.plot(batch, floats(shown["version_gap_mean"].to_list()), marker=marker, label="mean")
        if binned:
            gap_ax.fill_between(
                batch,
                floats(shown["version_gap_mean_low"].to_list()),
                floats(shown["version_gap_mean_high"].to_list()),
                color="C0",
                alpha=0.15,
                linewidth=0,
                label="min-max of batch means",
            )
        gap_ax.plot(
            batch,
            floats(shown["version_gap_max"].to_list()),
            marker=marker,
            linestyle="--",
            label="max",
        )
        gap_ax.set_ylim(bottom=0)
        gap_ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        legend_outside(gap_ax)
    else:
        show_empty(gap_ax, "no versioned group kept: no version gap")

    arrival = shown["dropped_arrival"].to_list()
    pending = shown["dropped_pending"].to_list()
    if binned:
        # Each bar spans its run of batches.
        width: float | list[float] = [
            0.9 * (last - first + 1)
            for first, last in zip(shown["first_batch"], shown["last_batch"], strict=True)
        ]
    else:
        width = 0.8
    drop_ax.bar(batch, arrival, width=width, color="C1", label="on arrival")
    drop_ax.bar(
        batch, pending, width=width, bottom=arrival, color="C3", label="pending in the batch"
    )
    totals = [a + b for a, b in zip(arrival, pending, strict=True)]
    drop_ax.set_ylim(0, max(1, *totals) * 1.15)
    drop_ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    legend_outside(drop_ax)
    if not any(totals):
        off = " (K=0: the control is off)" if not result.config.keep_versions else ""
        drop_ax.text(
            0.5,
            0.5,
            f"no group dropped{off}",
            transform=drop_ax.transAxes,
            ha="center",
            va="center",
            color="0.35",
        )

    if batches["current_version_index"].null_count() < batches.height:
        # Binned, each run is drawn at its last batch, where its indexes were read.
        index_batch = shown["last_batch"].to_list() if binned else batch
        index_ax.plot(
            index_batch,
            floats(shown["current_version_index"].to_list()),
            drawstyle="steps-mid",
            label="current",
        )
        if result.config.keep_versions:
            index_ax.plot(
                index_batch,
                floats(shown["cutoff_version_index"].to_list()),
                drawstyle="steps-mid",
                linestyle="--",
                label=f"cutoff (K={result.config.keep_versions})",
            )
        index_ax.set_ylim(bottom=0)
        index_ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        legend_outside(index_ax)
    else:
        show_empty(index_ax, "no version observed")
    index_ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    return figure
