"""The canonical table's ids and version labels read straight from Arrow memory (string
views), without building a Python string per row: the fast paths of
:mod:`analysis.engine.prepare`."""

from __future__ import annotations

import itertools
import re
import sys
from collections.abc import Sequence

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from analysis.table.labels import NOT_REAL, real_label


def first_appearance_codes(ids: pl.Series) -> tuple[np.ndarray, pl.Series]:
    """Code of each row's id (0 for the first id seen, 1 for the next new one...) and the ids.

    A null id is an id of its own, like a null key in a group-by. Short ids are encoded
    as the integers their Arrow views are; otherwise, since logs keep a group's records,
    and records of one version, mostly together, only the first id of each run is
    hashed when runs are few.
    """
    if len(ids) > 1 and ids.null_count() == 0:
        try:
            codes = _codes_from_views(ids) or _codes_by_runs(ids)
        except (pa.ArrowNotImplementedError, pa.ArrowTypeError):  # an older pyarrow
            codes = None
        if codes is not None:
            return codes
    encoded = pc.dictionary_encode(ids.to_arrow(), null_encoding="encode")
    distinct = pl.Series(ids.name, encoded.dictionary, dtype=ids.dtype)
    return encoded.indices.to_numpy().astype(np.int64), distinct


def _codes_from_views(ids: pl.Series) -> tuple[np.ndarray, pl.Series] | None:
    """:func:`first_appearance_codes` of ids of at most 12 bytes without nulls, from
    their Arrow string views (which hold such ids whole), or None."""
    compat = getattr(pl, "CompatLevel", None)
    if compat is None or sys.byteorder != "little":
        return None
    chunks = []
    for chunk in ids.get_chunks():
        words = _inline_views(chunk.to_arrow(compat_level=compat.newest()))
        if words is None:
            return None
        chunks.append(words)
    # One array of keys: both words of each view, or only the first when that is enough.
    width = 2 if any(words[:, 1].any() for words in chunks) else 1
    keys = np.empty((len(ids), width), dtype=np.uint64)
    done = 0
    for words in chunks:
        keys[done : done + len(words)] = words[:, :width]
        done += len(words)
    indices, distinct = _encode_views(keys)
    texts = pa.Array.from_buffers(pa.string_view(), len(distinct), [None, pa.py_buffer(distinct)])
    names = pl.Series(ids.name, texts, dtype=ids.dtype)
    if names.n_unique() < len(names):
        return None  # padding that is not zero: views are not keys after all
    return indices.astype(np.int64), names


def _inline_views(strings: pa.Array, begin: int = 0, end: int | None = None) -> np.ndarray | None:
    """The 16-byte views of ``strings[begin:end]`` as (n, 2) words, when they are string
    views without nulls and every string fits whole in its view (at most 12 bytes)."""
    if strings.type != pa.string_view() or strings.null_count:
        return None
    end = len(strings) if end is None else end
    words = np.frombuffer(strings.buffers()[1], dtype=np.uint64).reshape(-1, 2)
    words = words[strings.offset + begin : strings.offset + end]
    if len(words) and int(words.view(np.uint32)[:, 0].max()) > _INLINE_BYTES:
        return None
    return words


def _encode_views(
    views: np.ndarray, low: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Codes of (n, 2) views in order of first appearance, and the distinct views.

    Views of strings of at most 4 bytes are whole in their first word, which is then
    encoded alone (copied into ``low``, a buffer to reuse, when given); (n, 1) views
    are first words already.
    """
    if views.shape[1] == 2 and views[:, 1].any():
        keys = pa.Array.from_buffers(pa.binary(16), len(views), [None, pa.py_buffer(views)])
        encoded = pc.dictionary_encode(keys)
        dictionary = encoded.dictionary
        distinct = np.frombuffer(dictionary.buffers()[1], dtype=np.uint64).reshape(-1, 2)
        distinct = distinct[dictionary.offset : dictionary.offset + len(dictionary)]
    else:
        first = views[:, 0]
        if views.shape[1] == 2:  # strided: copy the first words together
            first = np.empty(len(views), dtype=np.uint64) if low is None else low[: len(views)]
            np.copyto(first, views[:, 0])
        encoded = pc.dictionary_encode(pa.array(first))
        distinct = np.zeros((len(encoded.dictionary), 2), dtype=np.uint64)
        distinct[:, 0] = encoded.dictionary.to_numpy()
    return encoded.indices.to_numpy(), np.ascontiguousarray(distinct)


def _codes_by_runs(ids: pl.Series) -> tuple[np.ndarray, pl.Series] | None:
    """:func:`first_appearance_codes` from the first id of each run, or None when runs
    are not much fewer than rows. Reads polars' chunks as they are (no copy)."""
    values = arrow_chunks(ids)
    new_run = np.ones(len(values), dtype=bool)
    new_run[1:] = pc.not_equal(values[1:], values[:-1]).to_numpy()
    starts = np.flatnonzero(new_run)
    if 2 * len(starts) > len(values):
        return None
    # The first ids of runs through polars: Arrow has no filter for string views yet.
    encoded = pc.dictionary_encode(ids.filter(pl.Series(new_run)).to_arrow())
    run_code = encoded.indices.to_numpy().astype(np.int64)
    codes = np.repeat(run_code, np.diff(starts, append=len(values)))
    return codes, pl.Series(ids.name, encoded.dictionary, dtype=ids.dtype)


def arrow_chunks(values: pl.Series) -> pa.ChunkedArray:
    """A polars column as Arrow chunks without copying (strings as string views)."""
    compat = getattr(pl, "CompatLevel", None)
    if compat is None:
        return pa.chunked_array([values.to_arrow()])
    return pa.chunked_array(
        [chunk.to_arrow(compat_level=compat.newest()) for chunk in values.get_chunks()]
    )


_VERSION = pl.element().struct.field("version")


def written_labels(spans: pl.Series) -> list[str]:
    """The distinct labels written in a ``version_spans`` column, as written."""
    written = (
        spans.to_frame("spans")
        .lazy()
        .select(pl.col("spans").explode().struct.field("version").unique())
        .collect()
        .to_series()
    )
    return written.drop_nulls().to_list()


MANY_LABELS = 1 << 14
"""Distinct labels past which realness is decided by polars for every span, not once per
label in Python (a log of a million distinct labels took 30 s)."""

PY_WHITESPACE = "".join(c for c in map(chr, range(0x3001)) if c.isspace())
"""The characters ``str.strip`` removes (real_label strips with it): Unicode's
whitespace and four ASCII separators, which polars' own strip would leave."""


def real_labels_expr(written: Sequence[str]) -> pl.Expr:
    """An expression for ``list.eval`` giving the real labels of a record's spans, normalised.

    ``written`` are the distinct labels of the spans (:func:`written_labels`). Realness
    (docs/semantics.md §2) is decided once per distinct label; labels that need stripping (rare) are
    mapped to their normal form, the others filtered.
    """
    if len(written) > MANY_LABELS:  # decided by polars, span by span
        stripped = _VERSION.str.strip_chars(PY_WHITESPACE)
        real = stripped.is_not_null() & ~stripped.str.to_lowercase().is_in(sorted(NOT_REAL))
        return stripped.filter(real)
    normal = {text: real_label(text) for text in written}
    if all(label is None or label == text for text, label in normal.items()):
        not_real = [text for text, label in normal.items() if label is None]
        return _VERSION.filter(~_VERSION.is_in(not_real))
    return _VERSION.replace_strict(normal, default=None, return_dtype=pl.String).drop_nulls()


def record_spans(spans: pl.Series) -> tuple[pl.Expr, np.ndarray]:
    """The real-labels expression for these spans, and each record's own span (-1: no spans)."""
    from_views = _spans_from_views(spans)
    if from_views is not None:
        written, span = from_views
        return real_labels_expr(written), span
    real_labels = real_labels_expr(written_labels(spans))
    count = pl.col("spans").list.eval(real_labels).list.n_unique().cast(pl.Int64)
    return real_labels, spans.to_frame("spans").select(count).to_series().fill_null(-1).to_numpy()


_INLINE_BYTES = 12
"""An Arrow string view holds a string of at most this many bytes whole (zero-padded)."""


def _spans_from_views(spans: pl.Series) -> tuple[list[str], np.ndarray] | None:
    """Each record's span and the distinct written labels, from the labels' Arrow views.

    A label of at most 12 bytes lives whole in its 16-byte view, so the views are keys
    that can be encoded as integers, without hashing strings: one single-threaded pass
    that leaves polars' threads to the rest of :func:`prepare`. None (and the caller
    uses polars) when the column does not have this form: labels that are null or
    longer than 12 bytes, nulls inside a list, or a polars without string views.
    """
    compat = getattr(pl, "CompatLevel", None)
    if compat is None or sys.byteorder != "little":
        return None
    written: dict[str, None] = {}
    scratch = Scratch()
    parts = []
    # Chunk by chunk as polars holds them: one Arrow array of the whole column would
    # be a copy of every span.
    for chunk in spans.get_chunks():
        part = _chunk_spans(chunk.to_arrow(compat_level=compat.newest()), written, scratch)
        if part is None:
            return None
        parts.append(part)
    return list(written), np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def _chunk_spans(lists: pa.Array, written: dict[str, None], scratch: Scratch) -> np.ndarray | None:
    """:func:`_spans_from_views` for one Arrow list array."""
    if not isinstance(lists, (pa.ListArray, pa.LargeListArray)):
        return None
    entries = lists.values
    if not pa.types.is_struct(entries.type) or entries.offset or entries.null_count:
        return None
    if entries.type.get_field_index("version") < 0:
        return None
    offsets = lists.offsets.to_numpy()
    first, last = int(offsets[0]), int(offsets[-1])
    views = _inline_views(entries.field("version"), first, last)
    if views is None:
        return None
    span = np.empty(len(lists), dtype=np.int64)
    # In slices of about _SLICE_SPANS spans, through scratch arrays made once: the
    # temporaries stay in cache and no new memory is touched slice after slice (fresh
    # pages cost more than the arithmetic here).
    bounds = [0]
    while bounds[-1] < len(lists):
        begin = bounds[-1]
        end = int(np.searchsorted(offsets, offsets[begin] + _SLICE_SPANS, side="right")) - 1
        bounds.append(min(max(end, begin + 1), len(lists)))
    for begin, end in itertools.pairwise(bounds):
        part = views[offsets[begin] - first : offsets[end] - first]
        counted = _slice_spans(part, offsets[begin : end + 1] - offsets[begin], written, scratch)
        if counted is None:
            return None
        span[begin:end] = counted
    if lists.null_count:
        span[lists.is_null().to_numpy(zero_copy_only=False)] = -1
    return span


_SLICE_SPANS = 1 << 18


class Scratch:
    """Arrays reused (as prefixes) for every slice; they grow when a slice is longer."""

    def __init__(self) -> None:
        self.size = -1
        self.texts: dict[tuple[int, int], str] = {}
        """Text of every view decoded so far."""

    def fit(self, size: int) -> None:
        if size <= self.size:
            return
        self.size = size
        self.low = np.empty(size, dtype=np.uint64)
        self.code = np.empty(size, dtype=np.int32)
        self.real = np.empty(size, dtype=bool)
        self.counts = np.empty(size, dtype=np.int32)
        self.real_code = np.empty(size, dtype=np.int32)
        self.flags = np.empty(size, dtype=bool)


def _slice_spans(
    views: np.ndarray, offsets: np.ndarray, written: dict[str, None], scratch: Scratch
) -> np.ndarray | None:
    """Spans of a slice of records from their labels' views; adds the labels to ``written``.

    ``offsets`` are the records' bounds within ``views``. None when the views turn out
    not to be keys (padding that is not zero, bad UTF-8).
    """
    size = len(views)
    if size == 0:
        return np.zeros(len(offsets) - 1, dtype=np.int64)
    scratch.fit(size)
    indices, distinct = _encode_views(views, scratch.low)
    if len(distinct) + len(written) > MANY_LABELS:
        return None  # so many labels that polars decides each (real_labels_expr)
    known = scratch.texts
    texts = []
    for low_word, high_word in distinct.tolist():
        key = (low_word, high_word)
        if key not in known:
            try:
                known[key] = _view_text(key)
            except UnicodeDecodeError:
                return None
        texts.append(known[key])
    if len(set(texts)) < len(texts):
        return None  # padding that is not zero: views are not keys after all
    written.update(dict.fromkeys(texts))
    code = np.take(label_codes(texts), indices, out=scratch.code[:size])
    real = np.greater_equal(code, 0, out=scratch.real[:size])
    # How many real spans come before each record's first span.
    seen = np.cumsum(real, dtype=np.int32, out=scratch.counts[:size])
    before = np.where(offsets > 0, seen[np.maximum(offsets - 1, 0)], 0)
    real_code = np.compress(real, code, out=scratch.real_code[: before[-1]])
    return distinct_per_record(real_code, before, scratch)


def _view_text(view: tuple[int, int]) -> str:
    """The string an inline 16-byte view holds (length, then up to 12 bytes)."""
    low, high = view
    raw = low.to_bytes(8, "little")[4:] + high.to_bytes(8, "little")
    return raw[: low & 0xFFFFFFFF].decode("utf-8")


def label_codes(written: list[str]) -> np.ndarray:
    """Code of each written label's normal form, -1 for labels that are not real.

    Codes follow the labels' natural order (integers by value), so that the codes of a
    record's spans, in version order, rarely decrease; see :func:`distinct_per_record`.
    """
    normal = [real_label(text) for text in written]
    ordered = sorted({label for label in normal if label is not None}, key=natural_key)
    code_of = {label: code for code, label in enumerate(ordered)}
    return np.array([-1 if label is None else code_of[label] for label in normal], np.int32)


def natural_key(label: str) -> tuple[tuple[tuple[int, int | str], ...], str]:
    """Numbers inside a label compare by value ("v9" before "v10"), the rest as text."""
    parts = _DIGITS.split(label)  # text, digits, text, digits, ..., text
    key = tuple((0, int(part)) if i % 2 else (1, part) for i, part in enumerate(parts) if part)
    return key, label


_DIGITS = re.compile("([0-9]+)")


_LONG_RECORD = 1 << 16
"""Spans of a record whose distinct codes are counted, not sorted (a record with a span
per token of alternating versions can be a slice by itself, of millions of spans)."""


def distinct_per_record(code: np.ndarray, before: np.ndarray, scratch: Scratch) -> np.ndarray:
    """How many distinct codes each record has; record i's codes are
    ``code[before[i]:before[i + 1]]``.

    Within a record whose codes never decrease (labels in natural order, as versions
    are written), a code is new where it differs from the previous one; only the
    records where a code decreases are sorted.
    """
    size = len(code)
    n_records = len(before) - 1
    if size == 0:
        return np.zeros(n_records, dtype=np.int64)
    starts = before[:-1][before[:-1] < before[1:]]  # first code of each record that has any
    new = scratch.flags[:size]
    new[0] = True
    np.not_equal(code[1:], code[:-1], out=new[1:])
    new[starts] = True
    seen = np.cumsum(new, dtype=np.int32, out=scratch.counts[:size])
    upto = np.where(before > 0, seen[np.maximum(before - 1, 0)], 0)
    count = np.diff(upto).astype(np.int64)
    decreases = np.less(code[1:], code[:-1], out=scratch.flags[: size - 1])
    decreases[starts[starts > 0] - 1] = False  # a pair across two records
    if decreases.any():
        unsorted = np.unique(np.searchsorted(before, np.flatnonzero(decreases) + 1, "right") - 1)
        lengths = before[unsorted + 1] - before[unsorted]
        for long in unsorted[lengths >= _LONG_RECORD]:  # by counting, not sorting
            count[long] = np.count_nonzero(np.bincount(code[before[long] : before[long + 1]]))
        unsorted = unsorted[lengths < _LONG_RECORD]
        if len(unsorted) == 0:
            return count
        record = np.repeat(np.arange(n_records), np.diff(before))
        pick = np.isin(record, unsorted)
        order = np.lexsort((code[pick], record[pick]))
        pair_record, pair_code = record[pick][order], code[pick][order]
        first = np.ones(len(order), dtype=bool)
        first[1:] = (pair_record[1:] != pair_record[:-1]) | (pair_code[1:] != pair_code[:-1])
        count[unsorted] = np.bincount(pair_record[first], minlength=n_records)[unsorted]
    return count
