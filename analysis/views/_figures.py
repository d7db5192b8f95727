"""Small helpers shared by the figures of :mod:`analysis.views.plots` and
:mod:`analysis.views.timeline` (matplotlib is imported inside them)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


def new_figure(width: float, height: float) -> Figure:
    """A figure with constrained layout, independent of pyplot."""
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


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
