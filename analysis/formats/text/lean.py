"""Large JSONL lines read without holding their token lists (docs: Limits and bad input; issue 18).

A line of a 10^7-token trajectory holds lists of 10^7 values (``tokens``, ``loss_mask``,
``metadata.full_versions``, log-probs) that the canonical row reduces to a length, spans,
a mask and a drift. Parsed whole, such a line takes about 20 times its size in Python
objects. Here each flat list is cut out of the line's bytes and left as a placeholder
string, the rest is parsed, and each list is parsed a bounded piece at a time and folded
into a :class:`LeanList` that answers what the canonical row asks of it (its length, its
spans, its mask runs, its log-probs as doubles), with the same results.

Whatever is not as expected (a list that is not flat, a key's text inside a string, a
placeholder not found as the value of its key, JSON that a parser refuses) sends the line
to the whole parse, which then gives the same record, or the same error, as always.

Imports only the standard library, orjson and :mod:`analysis.table.labels` (the two-process
reader's helper imports this module; no polars, and NumPy only once a piece of a
list has many runs, in :mod:`analysis.table.labels`).
"""

from __future__ import annotations

import bisect
import functools
import itertools
import json
import operator
import os
import re
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload

import orjson

from analysis.table.fieldmap import FieldMap
from analysis.table.labels import SpanBuilder, SpanRuns, on_ranges, true_runs

LEAN_MIN_BYTES = 1 << 20
"""Lines of at least this many bytes are read the lean way (when the field map allows);
shorter ones are parsed whole. Tests lower it."""

PIECE_BYTES = 1 << 18
"""Bytes of a token list parsed at a time."""

LEAN_MEANINGS = ("tokens", "loss_mask", "token_versions", "rollout_log_probs", "log_probs")
"""The meanings of the field map whose values are token lists."""

_LOG_PROBS = ("rollout_log_probs", "log_probs")

NOT_LEAN = object()
"""What :func:`lean_record` returns for a line it leaves to the whole parse."""


class _NotLean(Exception):
    """The line is not as the lean path expects: parse it whole."""


class _Refused(Exception):
    """orjson refused some of the line: read it again with the standard parser (as the
    whole parse does when orjson refuses a line)."""


@dataclass(frozen=True)
class LeanPlan:
    """What to look for in a line: the keys of the token lists (as JSON text) and the
    dotted paths of each token-list meaning, from one field map."""

    keys: frozenset[bytes]
    paths: tuple[tuple[str, tuple[str, ...]], ...]
    fields: FieldMap
    max_spans: int | None = None
    """Spans past which a token-version list stops being folded (the row is then refused
    by its limit, ``max_spans``; the rest of the list is parsed, not kept)."""
    fold: bool = True
    """Whether the lists are folded at all: not when only the record's keys are asked
    (which system's log a file is), then they keep only their lengths."""


@functools.lru_cache(maxsize=32)
def lean_plan(
    fields: FieldMap, extra: tuple[str, ...] = (), max_spans: int | None = None, *,
    fold: bool = True,
) -> LeanPlan | None:  # fmt: skip
    """The plan for a field map and extra columns, or None when the lean path cannot be
    used: a path of a token list that is also (a part of) another meaning's path or an
    extra column, a path in two token-list meanings, or a key that JSON escapes."""
    paths = [(m, parts) for m in LEAN_MEANINGS for parts in fields.compiled[m]]
    others = [parts for m, ps in fields.compiled.items() if m not in LEAN_MEANINGS for parts in ps]
    others += [tuple(path.split(".")) for path in extra]
    lean = [parts for _, parts in paths]
    if len(set(lean)) != len(lean):
        return None
    for parts in lean:
        key = parts[-1]
        if json.dumps(key) != f'"{key}"' or not 0 < len(key) <= 64:
            return None
        for other in others:
            short = min(len(parts), len(other))
            if parts[:short] == other[:short]:  # one is (a part of) the other
                return None
    keys = frozenset(parts[-1].encode() for parts in lean)
    return LeanPlan(keys, tuple(paths), fields, max_spans, fold)


class LeanList(Sequence[Any]):
    """What the canonical row needs of one token list, folded from its pieces: its length,
    and as asked, its spans (:func:`analysis.table.labels.run_length_spans`, or the error naming
    its first bad label), its runs of true values (a loss mask) or its values as doubles
    (log-probs)."""

    def __init__(
        self, *, spans: bool = False, mask: bool = False, values: bool = False,
        max_spans: int | None = None,
    ) -> None:  # fmt: skip
        self.length = 0
        self.builder = SpanBuilder(max_spans) if spans else None
        self.error: ValueError | None = None
        self.mask = mask
        # Runs of true values as two arrays (16 bytes a run; a tuple of two ints takes ~100)
        self.on_starts: array[int] = array("q")
        self.on_ends: array[int] = array("q")
        self.values: array[float] | None = array("d") if values else None

    def feed(self, items: list[Any]) -> None:
        """Take the next piece of the list."""
        if items and (self.builder is not None or self.mask):
            # A piece inside one run (the common case) is seen as one by list.count, in C
            # (== as groupby compares, and equal values are equally true).
            if items.count(items[0]) == len(items):
                self._feed_run(items[0], len(items))
            else:
                self._feed_runs(items)
        if self.values is not None:
            try:
                self.values.extend(items)
            except (TypeError, OverflowError):  # not all numbers: the whole parse says
                raise _NotLean from None
        self.length += len(items)

    def _feed_runs(self, items: list[Any]) -> None:
        if self.builder is not None and self.error is None:
            try:
                self.builder.feed(items)
            except ValueError as exc:  # a bad label: raised where the row asks for spans
                self.error = exc
        if self.mask:
            starts, ends = true_runs(items, self.length)
            if starts and self.on_ends and self.on_ends[-1] == starts[0]:
                self.on_ends[-1] = ends[0]  # a run that goes on from the last piece
                starts, ends = starts[1:], ends[1:]
            self.on_starts.extend(starts)
            self.on_ends.extend(ends)

    def _feed_run(self, value: Any, count: int) -> None:
        if self.builder is not None and self.error is None:
            try:
                self.builder.feed_run(value, count)
            except ValueError as exc:
                self.error = exc
        if self.mask and value:
            self._on(self.length, self.length + count)

    def _on(self, start: int, end: int) -> None:
        if self.on_ends and self.on_ends[-1] == start:
            self.on_ends[-1] = end
        else:
            self.on_starts.append(start)
            self.on_ends.append(end)

    def __len__(self) -> int:
        return self.length

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Any]: ...
    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            raise TypeError("a LeanList is not sliced")
        if index < 0:
            index += self.length
        if not 0 <= index < self.length:
            raise IndexError(index)
        if self.values is not None:
            return self.values[index]
        if self.mask:
            at = bisect.bisect_right(self.on_starts, index) - 1
            return int(at >= 0 and index < self.on_ends[at])
        raise TypeError("this LeanList keeps only its length")

    def spans(self) -> SpanRuns:
        """The list's spans, as :func:`analysis.table.labels.run_length_spans` gives them."""
        if self.error is not None:
            raise self.error
        assert self.builder is not None
        return self.builder.spans

    def any_on(self, first: int, last: int) -> bool:
        """Whether a value from ``first`` to ``last`` (exclusive) of the mask is true."""
        assert self.mask
        first, last = max(first, 0), min(last, self.length)
        if first >= last:
            return False
        at = max(bisect.bisect_right(self.on_starts, first) - 1, 0)
        for start, end in zip(self.on_starts[at:], self.on_ends[at:], strict=True):
            if start >= last:
                return False
            if end > first:
                return True
        return False


def lean_drift(
    rollout: Sequence[Any], trainer: Sequence[Any], mask: Sequence[Any] | None
) -> tuple[float | None, int]:
    """:func:`analysis.formats.fields.log_prob_drift` where a list is a :class:`LeanList`: the
    same differences summed by one ``sum`` in the same order, so the same float. Raises
    what ``float`` raises for a value that is not a number."""
    ours = rollout.values if isinstance(rollout, LeanList) else rollout
    theirs = trainer.values if isinstance(trainer, LeanList) else trainer
    if ours is None or theirs is None:
        raise TypeError("a LeanList of log-probs without its values")
    starts, ends = on_ranges(mask, len(ours))
    count = sum(ends) - sum(starts)
    diffs = itertools.chain.from_iterable(
        map(abs, map(operator.sub, map(float, ours[s:e]), map(float, theirs[s:e])))
        for s, e in zip(starts, ends, strict=True)
    )
    total = sum(diffs)
    return (total / count if count else None), count


_KEY_BEFORE = re.compile(rb'"([^"\\]{1,64})"[ \t\r\n]*:[ \t\r\n]*\Z')
"""A key and its colon, at the end of the bytes before a ``[``."""

Array = tuple[int, int, str, bool]
"""A flat list in a line: index of its ``[``, of its ``]``, its key, whether it holds text."""


def _flat_arrays(line: bytes, keys: frozenset[bytes]) -> list[Array]:
    """Each flat list that is the value of one of the keys: numbers, literals and strings
    without a backslash, no list or object inside. Found from the line's ``[`` (memchr
    speed; a long line has few), the bytes before each read for a key."""
    found = []
    at, close = line.find(b"["), -1
    while at >= 0:
        before = _KEY_BEFORE.search(line, max(at - 96, 0), at)
        if before is not None and before.group(1) in keys:
            if close < at:  # the next ']', looked for again only once passed
                close = line.find(b"]", at)
                if close < 0:
                    break  # no list after this one is closed: none is flat
            stop = close
            quotes = _flat(line, at + 1, stop)
            if quotes >= 0:
                found.append((at, stop, before.group(1).decode(), quotes > 0))
                at = stop
        at = line.find(b"[", at + 1)
    return found


def _flat(line: bytes, start: int, stop: int) -> int:
    """The number of quotes between ``start`` and ``stop`` if the text there is flat (no
    list, object or backslash; a ``]`` inside a string would leave an odd number of quotes
    before it), else -1."""
    if line.find(b"[", start, stop) >= 0 or line.find(b"{", start, stop) >= 0:
        return -1
    if line.find(b"\\", start, stop) >= 0:
        return -1
    quotes = line.count(b'"', start, stop)
    return -1 if quotes % 2 else quotes


def _pieces(line: bytes, start: int, stop: int, quoted: bool) -> Iterator[bytes]:
    """The text between ``start`` and ``stop`` in pieces of about :data:`PIECE_BYTES`,
    cut at commas (outside strings, when it holds ``quoted`` text)."""
    size = PIECE_BYTES
    while stop - start > size:
        cut = line.find(b",", start + size, stop)
        # Inside a string while an odd number of quotes comes before the comma: each
        # stretch of the line is counted once (counted from start each time, a string
        # of commas made the cutting quadratic).
        odd = quoted and cut >= 0 and line.count(b'"', start, cut) % 2 == 1
        while odd and cut >= 0:
            after = line.find(b",", cut + 1, stop)
            odd ^= after >= 0 and line.count(b'"', cut, after) % 2 == 1
            cut = after
        if cut < 0:
            break
        yield line[start:cut]
        start = cut + 1
    yield line[start:stop]


def _parse(text: bytes, strict: bool) -> Any:
    """orjson (``strict``), else the standard parser, as :func:`analysis.formats.text.jsonl.parse_json`
    reads a line: the same values as the whole line's parse, which uses one or the other."""
    if strict:
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            raise _Refused from None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        raise _NotLean from None


def lean_record(line: bytes, plan: LeanPlan) -> Any:
    """The record of a JSONL line, its flat token lists as :class:`LeanList`, or
    :data:`NOT_LEAN` when it is to be parsed whole."""
    arrays = _flat_arrays(line, plan.keys)
    if not arrays:
        return NOT_LEAN
    for strict in (True, False):
        try:
            return _lean(line, arrays, plan, strict)
        except _Refused:
            continue
        except _NotLean:
            break
    return NOT_LEAN


def _lean(line: bytes, arrays: list[Array], plan: LeanPlan, strict: bool) -> Any:
    marker = f"lean-{os.urandom(8).hex()}-"
    if line.find(marker.encode()) >= 0:
        raise _NotLean
    parts, previous = [], 0
    for index, (start, stop, _, _) in enumerate(arrays):
        parts += [line[previous:start], f'"{marker}{index}"'.encode()]
        previous = stop + 1
    parts.append(line[previous:])
    record = _parse(b"".join(parts), strict)
    del parts
    if not strict and lone_surrogate(record):
        raise _NotLean
    if not isinstance(record, dict) or record.get("success") is False:
        raise _NotLean  # (an error document reads its sample's fields: parse it whole)
    located = _locate(record, marker, arrays, plan)
    found = plan.fields.find(record)
    values = found.rollout_log_probs is not None and found.log_probs is not None
    for index, (start, stop, _, quoted) in enumerate(arrays):
        meaning, parent, key = located[index]
        lean = LeanList(
            spans=plan.fold and meaning == "token_versions",
            mask=plan.fold and meaning == "loss_mask",
            values=plan.fold and values and meaning in _LOG_PROBS,
            max_spans=plan.max_spans,
        )
        pieces, empty = 0, False
        for piece in _pieces(line, start + 1, stop, quoted):
            items = _parse(b"[" + piece + b"]", strict)
            if not strict and quoted and lone_surrogate(items):
                raise _NotLean  # (the whole parse refuses it, saying so)
            pieces, empty = pieces + 1, empty or not items
            lean.feed(items)
        if empty and pieces > 1:
            raise _NotLean  # an empty piece: a comma too many ([1,] cut after the 1)
        parent[key] = lean
    return record


def lone_surrogate(value: Any) -> bool:
    """Whether a parsed value holds text with a lone surrogate (walked without recursion;
    only what orjson refused, and the standard parser read, is walked)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(item, dict):
            stack += item.keys()
            stack += item.values()
        elif isinstance(item, list):
            stack += item
    return False


def _locate(
    record: dict[str, Any], marker: str, arrays: list[Array], plan: LeanPlan
) -> dict[int, tuple[str, dict[str, Any], str]]:
    """Where each placeholder is: (meaning, the object holding it, its key). Each must be
    the value of its own key at a path of a token-list meaning."""
    located: dict[int, tuple[str, dict[str, Any], str]] = {}
    for meaning, parts in plan.paths:
        parent: Any = record
        for part in parts[:-1]:
            parent = parent.get(part) if isinstance(parent, dict) else None
        if not isinstance(parent, dict):
            continue
        value = parent.get(parts[-1])
        if not isinstance(value, str) or not value.startswith(marker):
            continue
        index = int(value[len(marker) :])
        if arrays[index][2] != parts[-1] or index in located:
            raise _NotLean
        located[index] = (meaning, parent, parts[-1])
    if len(located) != len(arrays):
        raise _NotLean  # (one in a list, under another key, or lost to a duplicate key)
    return located
