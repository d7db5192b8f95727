"""Small helpers shared by the figures of :mod:`analysis.views.plots` and
:mod:`analysis.views.timeline` (matplotlib is imported inside them)."""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from analysis.engine.config import k_label
from analysis.errors import Message, setting

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


FIGURE_FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf"}

PNG_DPI = 150
"""Resolution of PNG output; vector formats ignore it."""


def save_figure(
    figure: Figure,
    path: str | Path,
    *,
    inputs: Sequence[str | Path] = (),
    version: str | None = None,
) -> None:
    """Write a figure as PNG, SVG or PDF, chosen by the extension, via a temporary file,
    with its provenance line (:func:`provenance`)."""
    from analysis.output.atomic import atomic_path
    from analysis.output.checks import check_output

    path = Path(path)
    check_output(path, FIGURE_FORMATS, what="figure")
    stamp(figure, inputs, version)
    with atomic_path(path) as temp:
        # The temporary name ends in .tmp, so the format must be given, not guessed.
        figure.savefig(temp, format=FIGURE_FORMATS[path.suffix.lower()], dpi=PNG_DPI)


def new_figure(width: float, height: float) -> Figure:
    """A figure with constrained layout, independent of pyplot."""
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


_SETTING = "_dressage_replay_setting"
"""The attribute of a figure holding the setting it draws, for its provenance line."""


def note_setting(figure: Figure, setting: str) -> None:
    """Remember the setting (or grid of settings) a figure draws, with its B, for the
    provenance line :func:`stamp` draws."""
    setattr(figure, _SETTING, setting)


def tool_version() -> str:
    """The installed dressage-replay version, or "unknown" (run from a source tree that
    was never installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dressage-replay")
    except PackageNotFoundError:
        return "unknown"


def provenance(
    figure: Figure, inputs: Sequence[str | Path] = (), version: str | None = None
) -> str:
    """The provenance line of a figure: its inputs' names, the setting it draws and the
    tool's version (a figure pasted into a document keeps where it came from)."""
    names = [Path(path).name or str(path) for path in inputs]
    shown = ", ".join(names[:2]) + (f" and {len(names) - 2} more" if len(names) > 2 else "")
    parts = [shown, getattr(figure, _SETTING, ""), f"dressage-replay {version or tool_version()}"]
    return "   ".join(part for part in parts if part)


def grid_setting(
    keep_versions: Sequence[int], max_preempts: Sequence[int | None], batches: Sequence[int | None]
) -> str:
    """The settings of a sweep in a few words: ``K=0,1,2 M=none,1 B=4``."""
    ks = ",".join(str(k) for k in keep_versions)
    ms = ",".join("none" if m is None else str(m) for m in max_preempts)
    shown = sorted({str(b) for b in batches})
    return f"K={ks} M={ms} B={'/'.join(shown) or 'n/a'}"


def sweep_setting(rows: pl.DataFrame) -> str:
    """A sweep's settings (its rows) in a few words, for its provenance line."""
    if not rows.height:
        return ""
    return grid_setting(
        rows["keep_versions"].unique(maintain_order=True).to_list(),
        rows["max_preempts"].unique(maintain_order=True).to_list(),
        rows["batch_groups"].unique().to_list(),
    )


PROVENANCE_INCHES = 0.22
"""The strip below a figure's panels that holds its provenance line."""


def stamp(figure: Figure, inputs: Sequence[str | Path] = (), version: str | None = None) -> None:
    """Draw the provenance line (:func:`provenance`) small in the figure's lower right, in
    a strip kept free of the panels."""
    if getattr(figure, "_dressage_replay_stamped", False):
        return
    height = figure.get_figheight()
    from matplotlib.layout_engine import ConstrainedLayoutEngine

    engine = figure.get_layout_engine()
    strip = min(0.2, PROVENANCE_INCHES / height)
    if isinstance(engine, ConstrainedLayoutEngine):  # the panels leave the strip free
        engine.set(rect=(0, strip, 1, 1 - strip))
    figure.text(
        0.995, 0.2 * strip, provenance(figure, inputs, version),
        ha="right", va="bottom", fontsize=7, color="0.4",
    )  # fmt: skip
    figure._dressage_replay_stamped = True  # type: ignore[attr-defined]


def show_empty(ax: Axes, message: str) -> None:
    """Leave an axis blank except for a centred message saying why."""
    ax.text(
        0.5,
        0.5,
        message,
        transform=ax.transAxes,
        ha="center",
        va="center",
        fontsize=11,
        color="0.35",
    )
    ax.set_yticks([])
    # A shared x axis still carries the other panels' data; leave its ticks alone.
    if len(ax.get_shared_x_axes().get_siblings(ax)) == 1:
        ax.set_xticks([])


def floats(values: Sequence[float | int | None]) -> list[float]:
    """Nulls become NaN so matplotlib leaves a gap instead of failing."""
    return [math.nan if value is None else float(value) for value in values]


def legend_outside(ax: Axes) -> None:
    """A legend right of the panel, so it never covers the data."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0)


MAX_BARS = 40
"""Most bars one series of a histogram of whole numbers (version gaps, spans) draws; the
values from the last bar's on are summed into it, labelled ">= N" (a log of a version
per group can have gaps of hundreds of thousands: a bar each was a figure matplotlib
could not draw)."""


def capped_bars(values: Sequence[int], most: int = MAX_BARS) -> tuple[list[int], int | None]:
    """The whole numbers from the smallest of ``values`` to the largest, one bar each,
    or the first ``most`` of them when there are more, and then the value from which the
    last bar sums everything (None when nothing is summed).

    Examples
    --------
    >>> capped_bars([0, 3])
    ([0, 1, 2, 3], None)
    >>> capped_bars([2, 500], most=4)
    ([2, 3, 4, 5], 5)
    """
    low, high = min(values), max(values)
    if high - low < most:
        return list(range(low, high + 1)), None
    return list(range(low, low + most)), low + most - 1


def bar_heights(counts: dict[int, int], bars: Sequence[int], tail_from: int | None) -> list[int]:
    """How many values fall on each bar, the last summing those from ``tail_from`` on."""
    if tail_from is None:
        return [counts.get(bar, 0) for bar in bars]
    heights = [counts.get(bar, 0) for bar in bars[:-1]]
    return [*heights, sum(count for value, count in counts.items() if value >= tail_from)]


def bar_ticks(bars: Sequence[int], tail_from: int | None) -> list[str]:
    """Tick labels of :func:`capped_bars`' bars: the last reads ">= N" when it sums a tail."""
    labels = [str(bar) for bar in bars]
    if tail_from is not None:
        labels[-1] = f">={tail_from}"
    return labels


def settings_note(
    kind: str,
    keep_versions: Sequence[int],
    max_preempts: Sequence[int | None],
    given: Collection[str] | None = None,
) -> str | None:
    """What a figure leaves out of the settings it was given, for a note: a figure of one
    setting draws the first K and M, a gaps figure the first M; with ``given`` (the
    settings the caller named), which setting it drew when a control it draws was not
    named, so left off (None when the figure draws what was asked)."""
    limit = "none" if max_preempts[0] is None else max_preempts[0]
    if kind in ("spans", "timeline") and (len(keep_versions) > 1 or len(max_preempts) > 1):
        return (
            f"a {kind} figure draws one setting: K={keep_versions[0]}, M={limit}, the first of "
            "those given (pass one "
            + setting("keep_versions")
            + " and one "
            + setting("max_preempts")
            + " to choose)"
        )
    if kind == "gaps" and len(max_preempts) > 1:
        return f"a gaps figure draws one M: M={limit}, the first of those given"
    drawn = {"spans": ("keep_versions", "max_preempts"), "timeline": ("keep_versions", "max_preempts"),
             "gaps": ("max_preempts",)}.get(kind, ())  # fmt: skip
    left = [name for name in drawn if given is not None and name not in given]
    if not left:
        return None
    m = "off" if max_preempts[0] is None else str(max_preempts[0])
    k = ", ".join(k_label(k) for k in (keep_versions if kind == "gaps" else keep_versions[:1]))
    note = Message(f"drew K={k} at M={m}" if kind == "gaps" else f"drew K={k}, M={m}")
    for i, name in enumerate(left):
        note += (" (" if i == 0 else ", ") + setting(name)
    return note + " not given, so off)"


def box_replayed(
    ax: Axes, rows: pl.DataFrame, keep_values: list[int], preempt_values: list[int | None]
) -> None:
    """Box the heatmap cells of rows that are replays (a run folder's own setting) among
    rows simulated on the run's model (docs/semantics.md §12.8)."""
    from matplotlib.patches import Rectangle

    for row in rows.filter(pl.col("figures_from") == "replay").iter_rows(named=True):
        column = keep_values.index(row["keep_versions"])
        line = preempt_values.index(row["max_preempts"])
        ax.add_patch(
            Rectangle((column - 0.48, line - 0.48), 0.96, 0.96, fill=False, edgecolor="red",
                      linewidth=2.5)
        )  # fmt: skip
