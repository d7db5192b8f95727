"""Version labels (docs/semantics.md §2): realness, run-length spans, derived end versions.

Labels are opaque strings: never ordered by value. An integer ``3`` and ``"3"`` are
the same label, ``"03"`` is another one.
"""

from __future__ import annotations

import itertools
import json
from array import array
from collections.abc import Iterator, Sequence
from typing import Any, overload

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


def run_length_spans(labels: Sequence[Any], most: int | None = None) -> SpanRuns:
    """Encode per-token labels as consecutive runs, the form of ``version_spans``; past
    ``most`` spans, :class:`TooManySpans` is raised (the list is read a slice at a time,
    so that no more than a slice's spans are built past it).

    Examples
    --------
    >>> run_length_spans(["-1", "v0", "v0", -1, "v0"])
    [(0, 1, '-1'), (1, 3, 'v0'), (3, 4, '-1'), (4, 5, 'v0')]
    """
    builder = SpanBuilder(most)
    if most is None:
        builder.feed(labels)
    else:
        for start in range(0, len(labels), _SLICE):
            builder.feed(labels[start : start + _SLICE])
    return builder.spans


_SLICE = 1 << 16


class SpanRuns(Sequence[Span]):
    """Spans as two arrays of positions and a list of labels, read as a sequence of
    :data:`Span` tuples: 24 bytes a span, where a tuple each takes ~120 (a token list of
    alternating versions has a span per token)."""

    __slots__ = ("ends", "labels", "starts")

    def __init__(self) -> None:
        self.starts = array("q")
        self.ends = array("q")
        self.labels: list[str] = []

    def __len__(self) -> int:
        return len(self.labels)

    @overload
    def __getitem__(self, index: int) -> Span: ...
    @overload
    def __getitem__(self, index: slice) -> list[Span]: ...
    def __getitem__(self, index: int | slice) -> Span | list[Span]:
        if isinstance(index, slice):
            return list(zip(self.starts[index], self.ends[index], self.labels[index], strict=True))
        return self.starts[index], self.ends[index], self.labels[index]

    def __iter__(self) -> Iterator[Span]:
        return zip(self.starts, self.ends, self.labels, strict=True)

    def __reversed__(self) -> Iterator[Span]:
        return zip(reversed(self.starts), reversed(self.ends), reversed(self.labels), strict=True)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SpanRuns):
            return (self.starts, self.ends, self.labels) == (other.starts, other.ends, other.labels)
        return isinstance(other, list) and list(self) == other

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(list(self))


_NO_RUN = object()

BULK_RUNS = 64
"""Runs of one piece after which the rest of the piece, if it is all text or whole
numbers, is read in bulk (NumPy: a token list of alternating versions has a run a token).
Fewer runs, as real token lists have, are cheaper one by one."""

_PLAIN = frozenset({str, int})


class TooManySpans(ValueError):
    """A token-version list of more spans than a :class:`SpanBuilder` takes."""

    def __init__(self, most: int) -> None:
        super().__init__(f"more than {most:,} runs of token versions (spans)")
        self.most = most


class SpanBuilder:
    """:func:`run_length_spans` of a list given in pieces, one after the other: the spans
    are those of the whole list (a run that goes on into the next piece is one run, named
    by its first value), without the list being held."""

    def __init__(self, most: int | None = None) -> None:
        self.spans = SpanRuns()
        self.end = 0
        self.key: Any = _NO_RUN  # the first raw value of the last run
        self.most = most
        """Spans past which :class:`TooManySpans` is raised, after the piece that made them."""

    def feed(self, labels: Sequence[Any]) -> None:
        """Take the next piece of the labels."""
        self._feed(labels)
        if self.most is not None and len(self.spans) > self.most:
            raise TooManySpans(self.most)

    def _feed(self, labels: Sequence[Any]) -> None:
        spans, start, key, base, runs = self.spans, self.end, self.key, self.end, 0
        # Group equal raw values in C, then name each run once: 3 and "3" are one label, so
        # adjacent runs whose names agree are merged. A piece's first run may go on with
        # the last one (compared as itertools.groupby compares: identity, then ==).
        for value, run in itertools.groupby(labels):
            end = start + len(list(run))
            if key is value or key == value:
                spans.ends[-1] = end
            else:
                text = label_text(value)
                text = "" if text is None else text
                if spans.labels and spans.labels[-1] == text:
                    spans.ends[-1] = end
                else:
                    spans.starts.append(start)
                    spans.ends.append(end)
                    spans.labels.append(text)
                key = value
            start, runs = end, runs + 1
            if runs == BULK_RUNS:
                rest = labels[start - base :]
                if len(rest) >= BULK_RUNS and set(map(type, rest)) <= _PLAIN:
                    self.end, self.key = start, key
                    self._feed_bulk(rest)
                    return
        self.end, self.key = start, key

    def _feed_bulk(self, labels: Sequence[Any]) -> None:
        """:meth:`feed` of texts and whole numbers (whose == is their type's own), with
        the work per run in NumPy: the same spans, key and errors."""
        import numpy as np  # (here: the reading helper process imports this module)

        spans, base, size = self.spans, self.end, len(labels)
        distinct = dict.fromkeys(labels)
        code_of = dict(zip(distinct, itertools.count(), strict=False))
        raw = np.fromiter(map(code_of.__getitem__, labels), np.intp, size)
        raw_starts = np.flatnonzero(raw[1:] != raw[:-1]) + 1
        names = [value if type(value) is str else label_text(value) or "" for value in distinct]
        name_of = dict(zip(names, itertools.count(), strict=False))
        by_raw = np.arange(len(names))
        if len(name_of) < len(names):  # equal names (3 and "3") are one code
            name_of = {}
            by_raw = np.array([name_of.setdefault(name, len(name_of)) for name in names], np.intp)
        name = by_raw[raw]
        first = labels[0]
        continued = self.key is first or self.key == first
        if continued:  # the first run goes on with the last span, named as it is
            name[: raw_starts[0] if len(raw_starts) else size] = name_of.setdefault(
                spans.labels[-1], len(name_of)
            )
        texts = list(name_of)
        merged = continued or (bool(spans.labels) and spans.labels[-1] == texts[name[0]])
        starts = np.flatnonzero(name[1:] != name[:-1]) + 1
        if merged:
            spans.ends[-1] = base + (int(starts[0]) if len(starts) else size)
        else:
            starts = np.concatenate([[0], starts])
        if len(starts):
            spans.starts.frombytes((starts + base).astype(np.int64).tobytes())
            ends = np.append(starts[1:], size) + base
            spans.ends.frombytes(ends.astype(np.int64).tobytes())
            spans.labels.extend(map(texts.__getitem__, name[starts].tolist()))
        last = int(raw_starts[-1]) if len(raw_starts) else 0  # the last run of raw values
        if not (continued and last == 0):
            self.key = labels[last]
        self.end = base + size

    def feed_run(self, value: Any, count: int) -> None:
        """Take ``count`` (>= 1) values equal to ``value``: ``feed([value] * count)``."""
        self.feed((value,))
        self.spans.ends[-1] += count - 1
        self.end += count - 1


def true_runs(values: Sequence[Any], base: int = 0) -> tuple[list[int], list[int]]:
    """The runs of true values (``bool``) as their starts and ends, counted from
    ``base``, found by NumPy (an alternating mask has a run a value)."""
    import numpy as np

    flags = np.fromiter(map(bool, values), bool, len(values))
    edges = np.flatnonzero(flags[1:] != flags[:-1]) + 1
    starts = np.concatenate([[0], edges]) if len(flags) else edges
    ends = np.append(edges, len(flags))
    on = flags[starts]
    return (starts[on] + base).tolist(), (ends[on] + base).tolist()


def on_ranges(mask: Sequence[Any] | None, length: int) -> tuple[Sequence[int], Sequence[int]]:
    """The index ranges where a loss mask is true (all of them without one), as their
    starts and their ends; a mask kept as runs (:class:`analysis.formats.text.lean.LeanList`) gives
    its own."""
    if mask is None:
        return [0], [length]
    if getattr(mask, "mask", False):
        return mask.on_starts, mask.on_ends  # type: ignore[attr-defined]
    return true_runs(mask)


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
    if len(spans) > BULK_RUNS:
        return _last_trainable_real(spans, response_start, loss_mask)
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


def _last_trainable_real(
    spans: Sequence[Span], response_start: int, loss_mask: Sequence[Any] | None
) -> str | None:
    """:func:`derive_end_version`'s answer for many spans: realness decided once per
    label met, and the spans walked back beside the mask's runs of true values, so each
    span and each run is passed once (a span of one token in two is as fast)."""
    width = spans[-1][1] - response_start
    on_starts, on_ends = on_ranges(loss_mask, width if loss_mask is None else len(loss_mask))
    at = len(on_starts) - 1  # the last run of the mask not yet passed
    real_of: dict[str, str | None] = {}
    for start, end, label in reversed(spans):
        if end <= response_start:
            return None
        if label not in real_of:
            real_of[label] = real_label(label)
        if real_of[label] is None:
            continue
        # The mask is aligned with the response: runs of trainable tokens inside this span?
        first, last = max(start, response_start) - response_start, end - response_start
        while at >= 0 and on_starts[at] >= last:
            at -= 1
        if at < 0:
            return None
        if on_ends[at] > first:
            return real_of[label]
    return None


def _any_on(loss_mask: Sequence[Any], first: int, last: int) -> bool:
    """Whether any of the mask's values ``first`` to ``last`` (exclusive) is on; a mask
    kept as runs (:class:`analysis.formats.text.lean.LeanList`) answers from its runs."""
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
