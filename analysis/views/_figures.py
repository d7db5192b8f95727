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


def k_label(keep_versions: int) -> str:
    """How a keep_versions value reads in legends and ticks: K=0 is the control off."""
    return "off" if keep_versions == 0 else str(keep_versions)


def m_label(max_preempts: int | None) -> str:
    """How a max_preempts value reads in legends and ticks."""
    return "none" if max_preempts is None else str(max_preempts)


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
