"""Version labels (docs/semantics.md §2): realness, run-length spans, derived end versions.

Labels are opaque strings: never ordered by value. An integer ``3`` and ``"3"`` are
the same label, ``"03"`` is another one.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from typing import Any

NOT_REAL = frozenset({"", "-1", "unknown", "none"})


def label_text(value: Any) -> str | None:
    """Return a label as the string it stands for, unstripped; None for null.

    Raises ValueError for values that cannot be labels (lists, dicts, booleans).
    """
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"a label must be a string or an integer (found {repr(value)[:60]})")
    if isinstance(value, float):
        # Integer labels that went through a numeric column with nulls come back as floats;
        # any other float (2.5, inf, NaN) is no version or id a run writes.
        if not value.is_integer():
            found = json.dumps(value)  # as the log writes it: 2.5, NaN, Infinity
            raise ValueError(f"a label must be a string or an integer (found {found})")
        return str(int(value))
    return str(value)


def real_label(value: Any) -> str | None:
    """Return the stripped label if it is real, else None.

    Examples
    --------
    >>> real_label(" weight-current ")
    'weight-current'
    >>> real_label(3), real_label("-1"), real_label("Unknown"), real_label(None)
    ('3', None, None, None)
    """
    text = label_text(value)
    if text is None:
        return None
    stripped = text.strip()
    return None if stripped.lower() in NOT_REAL else stripped


Span = tuple[int, int, str]
"""A run of equal labels: (start inclusive, end exclusive, label as written)."""


def run_length_spans(labels: Sequence[Any]) -> list[Span]:
    """Encode per-token labels as consecutive runs, the form of ``version_spans``.

    Examples
    --------
    >>> run_length_spans(["-1", "v0", "v0", -1, "v0"])
    [(0, 1, '-1'), (1, 3, 'v0'), (3, 4, '-1'), (4, 5, 'v0')]
    """
    builder = SpanBuilder()
    builder.feed(labels)
    return builder.spans


_NO_RUN = object()


class SpanBuilder:
    """:func:`run_length_spans` of a list given in pieces, one after the other: the spans
    are those of the whole list (a run that goes on into the next piece is one run, named
    by its first value), without the list being held."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.end = 0
        self.key: Any = _NO_RUN  # the first raw value of the last run

    def feed(self, labels: Sequence[Any]) -> None:
        """Take the next piece of the labels."""
        spans, start, key = self.spans, self.end, self.key
        # Group equal raw values in C, then name each run once: 3 and "3" are one label, so
        # adjacent runs whose names agree are merged. A piece's first run may go on with
        # the last one (compared as itertools.groupby compares: identity, then ==).
        for value, run in itertools.groupby(labels):
            end = start + len(list(run))
            if key is value or key == value:
                spans[-1] = (spans[-1][0], end, spans[-1][2])
            else:
                text = label_text(value)
                text = "" if text is None else text
                if spans and spans[-1][2] == text:
                    spans[-1] = (spans[-1][0], end, text)
                else:
                    spans.append((start, end, text))
                key = value
            start = end
        self.end, self.key = start, key

    def feed_run(self, value: Any, count: int) -> None:
        """Take ``count`` (>= 1) values equal to ``value``: ``feed([value] * count)``."""
        self.feed((value,))
        start, end, label = self.spans[-1]
        self.spans[-1] = (start, end + count - 1, label)
        self.end += count - 1


def distinct_real_labels(spans: Sequence[Span]) -> list[str]:
    """Real labels of a token sequence, each once, in order of first appearance."""
    seen: dict[str, None] = {}
    for _, _, label in spans:
        real = real_label(label)
        if real is not None and real not in seen:
            seen[real] = None
    return list(seen)


def derive_end_version(
    spans: Sequence[Span],
    *,
    response_length: int | None,
    loss_mask: Sequence[Any] | None,
) -> str | None:
    """Derive an end version as Dressage does: the last real label among trainable tokens.

    The response is the last ``response_length`` tokens (else the last ``len(loss_mask)``,
    else the whole sequence); trainable tokens are response tokens whose loss mask is 1.
    Without a loss mask every response token counts.

    Examples
    --------
    >>> spans = run_length_spans(["-1", "v0", "v1", "-1", "v1"])
    >>> derive_end_version(spans, response_length=5, loss_mask=[0, 1, 1, 0, 1])
    'v1'
    >>> derive_end_version(spans, response_length=5, loss_mask=[0, 1, 0, 0, 0])
    'v0'
    """
    if not spans:
        return None
    total = spans[-1][1]
    if response_length is None:
        response_length = len(loss_mask) if loss_mask is not None else total
    response_start = max(0, total - response_length)
    for start, end, label in reversed(spans):
        if end <= response_start:
            break
        real = real_label(label)
        if real is None:
            continue
        if loss_mask is None:
            return real
        # The mask is aligned with the response; find a trainable token inside this run.
        first = max(start, response_start) - response_start
        last = end - response_start
        if _any_on(loss_mask, first, last):
            return real
    return None


def _any_on(loss_mask: Sequence[Any], first: int, last: int) -> bool:
    """Whether any of the mask's values ``first`` to ``last`` (exclusive) is on; a mask
    kept as runs (:class:`analysis.io.lean.LeanList`) answers from its runs."""
    any_on = getattr(loss_mask, "any_on", None)
    if any_on is not None:
        return bool(any_on(first, last))
    return any(_mask_on(loss_mask, i) for i in range(last - 1, first - 1, -1))


def _mask_on(loss_mask: Sequence[Any], i: int) -> bool:
    return 0 <= i < len(loss_mask) and bool(loss_mask[i])


def late_older_labels(versions: Sequence[str]) -> list[tuple[str, str]]:
    """Numbered labels first observed after a higher-numbered one: (label, the higher one
    seen before it). Observation order decides which version is newer (§2), so each such
    label counts as newer than the one before it, whatever its number.

    Examples
    --------
    >>> late_older_labels(["1", "2", "4", "3", "5"])
    [('3', '4')]
    >>> late_older_labels(["alpha", "beta"])
    []
    """
    fast = _late_older_numbers(versions)
    if fast is not None:
        return fast
    found = []
    highest: tuple[tuple[int, str], str] | None = None
    for label in versions:
        if not (label.isascii() and label.isdigit()):
            continue
        digits = label.lstrip("0")  # compared by value, never converted (int() of a
        number = (len(digits), digits)  # label of 5,000 digits raises)
        if highest is not None and number < highest[0]:
            found.append((label, highest[1]))
        elif highest is None or number > highest[0]:
            highest = (number, label)
    return found


def _late_older_numbers(versions: Sequence[str]) -> list[tuple[str, str]] | None:
    """:func:`late_older_labels` on arrays when every label is a number of at most 18
    ASCII digits (a log of a version per group has hundreds of thousands); None otherwise."""
    import numpy as np

    if not versions or not "".join(versions).isascii():
        return None
    if not all(map(str.isdigit, versions)) or max(map(len, versions)) > 18:
        return None
    values = np.fromiter(map(int, versions), dtype=np.int64, count=len(versions))
    before = np.concatenate([[-1], np.maximum.accumulate(values)[:-1]])
    # The first label at each new highest number: a later equal number does not replace it.
    positions = np.arange(len(values))
    holder = np.maximum.accumulate(np.where(values > before, positions, 0))
    late = np.flatnonzero(values < before).tolist()
    return [(versions[i], versions[int(holder[i - 1])]) for i in late]


def late_older_note(
    versions: Sequence[str], keep_versions: int, *, late: list[tuple[str, str]] | None = None
) -> str | None:
    """What a version observed after a newer one does to the batch-level control: with
    K = 1 every later group at the higher number is stale, and Dressage's loop, which
    waits for a full batch, can starve the trainer for ever (a livelock). ``late``:
    ``late_older_labels(versions)`` when already found."""
    if keep_versions < 1:
        return None
    late = late_older_labels(versions) if late is None else late
    if not late:
        return None
    label, higher = late[0]
    more = f" ({len(late) - 1} more such labels)" if len(late) > 1 else ""
    effect = (
        f"at keep_versions=1 every later group ending on {higher} is stale, and Dressage's "
        "loop, which waits for a full batch, can starve the trainer for ever (a livelock)"
        if keep_versions == 1
        else f"groups ending on {higher} count as older than their number says"
    )
    return (
        f"version {label} was first observed after {higher}, so it counts as the newer"
        f"{more}: {effect}"
    )
