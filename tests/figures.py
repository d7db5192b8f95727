"""What the plot tests read off matplotlib's artists, typed as the tests use them.

matplotlib types a line's data as ``ArrayLike`` (a union that is neither sized nor
indexable) and an axes' patches as ``Patch`` (which has no height): a figure this tool
draws holds lines of numbers and bars, and these helpers say so in one place."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, cast

from matplotlib.collections import Collection
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle


def xdata(line: Line2D) -> Sequence[float]:
    """The line's x values, as drawn (the list or array it was given)."""
    return cast("Sequence[float]", line.get_xdata())


def ydata(line: Line2D) -> Sequence[float]:
    """The line's y values, as drawn (the list or array it was given)."""
    return cast("Sequence[float]", line.get_ydata())


def bars(patches: Iterable[Patch]) -> list[Rectangle]:
    """The patches of a bar chart, each checked to be a bar."""
    drawn = list(patches)
    assert all(isinstance(patch, Rectangle) for patch in drawn), drawn
    return [patch for patch in drawn if isinstance(patch, Rectangle)]


def offsets(collection: Collection) -> Sequence[Any]:
    """The positions of a collection's markers (an array of x, y pairs)."""
    return cast("Sequence[Any]", collection.get_offsets())
