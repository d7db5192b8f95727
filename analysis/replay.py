"""Replay Dressage's two staleness controls over a loaded log (SPEC §2-§6).

The work that does not depend on the setting (arrival order, trajectory versions,
spans, counts) is done once by :func:`prepare`; :func:`replay` then runs the
sequential collection loop for one :class:`ReplayConfig` over compact per-group values.
"""

from __future__ import annotations

import functools
import itertools
import re
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from analysis.engine import (
    DROPPED_ARRIVAL,
    DROPPED_PENDING,
    FAILED,
    KEPT,
    NO_VERSION,
    REJECTED,
    Collection,
    GroupArrays,
    Observation,
    collect,
    observe,
)
from analysis.errors import ConfigError, MissingFieldError, counted
from analysis.labels import real_label

DECISIONS = ("kept", "dropped_stale", "rejected_span", "failed")

REPLAY_COLUMNS = (
    "group_id", "trajectory_id", "segment_index", "end_version", "version_spans", "status",
    "response_length", "loss_mask_length", "trainer_step",
)  # fmt: skip
"""The canonical columns that :func:`prepare` (and so a replay or sweep) reads."""

SPAN_TABLE_CELLS = 8_000_000
"""Largest per-group table of span counts kept for sweeps (groups x spans; 64 MB)."""


MAX_SETTING = 1_000_000
"""Largest K, M or B accepted: more versions or groups than any run has."""


@dataclass(frozen=True)
class ReplayConfig:
    """One setting of the two controls and the trainer batch size, validated on construction.

    Examples
    --------
    >>> ReplayConfig(keep_versions=2, max_preempts=None, batch_groups=8).keep_versions
    2
    >>> ReplayConfig(keep_versions=-1)
    Traceback (most recent call last):
    ...
    analysis.errors.ConfigError: require `keep_versions` >= 0 (found -1); pass --keep-versions 0 to disable the batch-level control
    """

    keep_versions: int = 0
    max_preempts: int | None = None
    batch_groups: int | None = None

    def __post_init__(self) -> None:
        self._check_types_and_signs()
        for name in ("keep_versions", "max_preempts", "batch_groups"):
            value = getattr(self, name)
            if value is not None and value > MAX_SETTING:
                raise ConfigError(
                    f"require `{name}` <= {MAX_SETTING:,} (found {value:,}); "
                    f"pass --{name.replace('_', '-')} with a value a run can have"
                )

    def _check_types_and_signs(self) -> None:
        if isinstance(self.keep_versions, bool) or not isinstance(self.keep_versions, int):
            raise ConfigError(
                f"require `keep_versions` to be an integer (found {self.keep_versions!r})"
            )
        if self.keep_versions < 0:
            raise ConfigError(
                f"require `keep_versions` >= 0 (found {self.keep_versions}); "
                "pass --keep-versions 0 to disable the batch-level control"
            )
        if self.max_preempts is not None and (
            isinstance(self.max_preempts, bool)
            or not isinstance(self.max_preempts, int)
            or self.max_preempts < 0
        ):
            raise ConfigError(
                f"require `max_preempts` >= 0 or none (found {self.max_preempts!r}); "
                "pass --max-preempts none to disable the partial-rollout control"
            )
        if self.batch_groups is not None and (
            isinstance(self.batch_groups, bool)
            or not isinstance(self.batch_groups, int)
            or self.batch_groups < 1
        ):
            raise ConfigError(
                f"require `batch_groups` >= 1 (found {self.batch_groups!r}); "
                "pass --batch-groups with the number of GRPO groups per trainer step"
            )

    def describe(self) -> str:
        """``K=2, M=none, B=8``, for titles and legends."""
        limit = "none" if self.max_preempts is None else self.max_preempts
        return f"K={self.keep_versions}, M={limit}, B={self.batch_groups}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "keep_versions": self.keep_versions,
            "max_preempts": self.max_preempts,
            "batch_groups": self.batch_groups,
        }


@dataclass(frozen=True)
class TrajectoryArrays:
    """Per-trajectory facts as flat arrays, trajectories in order of their first record.

    -1 stands for "none" in ``span`` (no token versions), ``version_row`` and
    ``first_versioned_row`` (no version).
    """

    first_row: np.ndarray
    records: np.ndarray
    tokens: np.ndarray
    tokens_missing: np.ndarray
    span: np.ndarray
    version_row: np.ndarray
    """The record whose end version is the trajectory's version (SPEC §2)."""
    first_versioned_row: np.ndarray
    arrival: np.ndarray
    """Arrival position of the trajectory's group."""
    single_records: bool = False
    """Every trajectory is one record: the arrays are per record, in row order."""
    duplicate_records: int = 0
    """Records whose (group, trajectory, segment) another record has too: the same run
    read twice, say (counted among trajectories of several records, the only place)."""


@dataclass(frozen=True)
class PreparedLog:
    """Setting-independent facts of a log, one row per group (arrival order) and per trajectory."""

    groups: pl.DataFrame
    tokens_known: bool
    inferred_batch_groups: int | None
    arrays: GroupArrays
    """The groups as flat arrays for the collection loop."""
    per_trajectory: TrajectoryArrays = field(repr=False, compare=False)
    _rows: pl.DataFrame = field(repr=False, compare=False)
    _cache: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)

    @functools.cached_property
    def trajectories(self) -> pl.DataFrame:
        """One row per trajectory in order of its first record: ids, records, tokens,
        version, span, switches and the group's arrival position (built on first use)."""
        return _trajectory_frame(self._rows, self.per_trajectory)

    @property
    def n_trajectories(self) -> int:
        return len(self.per_trajectory.first_row)

    @property
    def n_groups(self) -> int:
        return self.groups.height

    @property
    def duplicate_records(self) -> int:
        """Records that repeat another's (group, trajectory, segment); see ``inspect``."""
        return self.per_trajectory.duplicate_records

    @property
    def warnings(self) -> tuple[str, ...]:
        """What preparing found that a user should hear about (the CLI prints it)."""
        if not self.duplicate_records:
            return ()
        return (
            f"{counted(self.duplicate_records, 'record')} share a (group, trajectory, segment) "
            "with another, so they are counted more than once: is the same run given twice, "
            "in two formats say? (inspect counts them too)",
        )

    def trajectory_versions(self) -> pl.Series:
        """Each group's trajectory versions (SPEC §2) as a list, groups in arrival order."""
        if "trajectory_versions" not in self._cache:
            arrays = self.arrays
            self._cache["trajectory_versions"] = _lists(
                arrays.labels, arrays.codes, arrays.owner, arrays.n
            )
        return self._cache["trajectory_versions"]

    def span_histogram(self, groups: np.ndarray | None) -> np.ndarray:
        """How many checked trajectories have each span, in the groups selected by a
        boolean mask over arrival positions (or in all groups when None).

        A sweep asks this for every setting, so a per-group table of span counts is built
        once (when it is small, as it is in practice) and summed over the groups.
        """
        arrays = self.arrays
        if "span_table" not in self._cache:
            width = int(arrays.span.max()) + 1 if len(arrays.span) else 1
            table = None
            if arrays.n * width <= SPAN_TABLE_CELLS:
                cells = np.bincount(
                    arrays.span_owner * width + arrays.span, minlength=arrays.n * width
                )
                table = cells.reshape(arrays.n, width)
            self._cache["span_table"] = (table, np.bincount(arrays.span, minlength=width))
        table, everything = self._cache["span_table"]
        if groups is None:
            return everything
        if table is not None:
            return groups.astype(np.int64) @ table
        return np.bincount(arrays.span[groups[arrays.span_owner]], minlength=len(everything))

    def observation(self, max_preempts: int | None) -> Observation:
        """Observation order under one ``max_preempts`` (computed once per value)."""
        key = ("observation", max_preempts)
        if key not in self._cache:
            self._cache[key] = observe(self.arrays, max_preempts)
        return self._cache[key]


def prepare(table: pl.DataFrame, *, order_by: str | None = None) -> PreparedLog:
    """Compute per-group and per-trajectory facts that no setting changes.

    ``order_by`` names a column whose per-group maximum (the moment the group was
    complete) orders arrival instead of first appearance; ties keep first appearance.

    The work is mostly on integer codes in NumPy: a group's code is its rank of first
    appearance, realness is decided once per distinct label, and the trajectories that
    have a single record (nearly all of them in most logs) are read without grouping.
    """
    if order_by is not None and order_by not in table.columns:
        raise MissingFieldError(
            f"no column {order_by!r} to order arrival by (columns: {', '.join(table.columns)}); "
            "pass --order-by with a field that the log has"
        )
    if order_by is not None and table.schema[order_by].is_nested():
        raise ConfigError(
            f"--order-by {order_by}: the field holds {table.schema[order_by]} values, which do "
            "not order arrival; pass a field holding numbers, text or times"
        )
    # The ordering column under a name of its own: it may be one of the columns above.
    order = [pl.col(order_by).alias(_ORDER_KEY)] if order_by else []
    rows = table.select(*REPLAY_COLUMNS, *order)
    # The pass over every token-version span runs in a second thread beside the group
    # and id work; it uses NumPy and Arrow only (no polars, whose threads the other side
    # uses), and both release the GIL, so the two cores share the work.
    with ThreadPoolExecutor(max_workers=1) as helper:
        labelled = helper.submit(_record_spans, rows["version_spans"])
        group_code, group_ids = _first_appearance_codes(rows["group_id"])
        n_groups = len(group_ids)
        single = _single_record_rows(rows["group_id"], rows["trajectory_id"], group_code)
        inferred_batch_groups = _infer_batch_groups(rows["trainer_step"], group_code)
        position = _arrival_positions(rows, group_code, n_groups, order_by)
        arrival = position[group_code]  # of each row
        by_arrival = np.argsort(position)  # group code at each arrival position
        response = rows["response_length"]
        if response.null_count():
            response = rows.select(pl.coalesce("response_length", "loss_mask_length")).to_series()
        response_missing = response.is_null().to_numpy()
        response_tokens = response.fill_null(0).cast(pl.Int64).to_numpy()
        aborted = (rows["status"] == "aborted").fill_null(False).to_numpy()
        end_code, end_labels = _first_appearance_codes(rows["end_version"])
        real_labels, record_span = labelled.result()

    per_trajectory = _trajectory_arrays(
        rows, single, real_labels, record_span, response_tokens, response_missing, arrival
    )
    by_row = _ByGroup(arrival, n_groups)
    tokens = by_row.sum(response_tokens)
    tokens_missing = by_row.any(response_missing)
    arrays = _group_arrays(
        per_trajectory,
        by_trajectory=by_row if per_trajectory.arrival is arrival else None,
        end_code=end_code,
        end_labels=end_labels,
        samples=by_row.count(),
        tokens=np.where(tokens_missing, 0, tokens),
        failed=by_row.any(aborted),
    )
    groups = pl.DataFrame(
        {
            "arrival": np.arange(n_groups, dtype=np.int64),
            "group_id": group_ids.gather(by_arrival),
            "samples": arrays.samples,
            "trajectories": arrays.trajectories,
            "tokens": pl.Series(tokens).set(pl.Series(tokens_missing), None),
            "failed": arrays.failed,
            "max_switches": pl.Series(arrays.max_switches).replace(-1, None),
        }
    )
    return PreparedLog(
        groups=groups,
        tokens_known=not response_missing.any(),
        inferred_batch_groups=inferred_batch_groups,
        arrays=arrays,
        per_trajectory=per_trajectory,
        _rows=rows,
    )


_ORDER_KEY = "\x00order_by"


def _first_appearance_codes(ids: pl.Series) -> tuple[np.ndarray, pl.Series]:
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
    """:func:`_first_appearance_codes` of ids of at most 12 bytes without nulls, from
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
    """:func:`_first_appearance_codes` from the first id of each run, or None when runs
    are not much fewer than rows. Reads polars' chunks as they are (no copy)."""
    values = _arrow_chunks(ids)
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


def _arrow_chunks(values: pl.Series) -> pa.ChunkedArray:
    """A polars column as Arrow chunks without copying (strings as string views)."""
    compat = getattr(pl, "CompatLevel", None)
    if compat is None:
        return pa.chunked_array([values.to_arrow()])
    return pa.chunked_array(
        [chunk.to_arrow(compat_level=compat.newest()) for chunk in values.get_chunks()]
    )


def _arrival_positions(
    rows: pl.DataFrame, group_code: np.ndarray, n_groups: int, order_by: str | None
) -> np.ndarray:
    """Arrival position of each group code (SPEC §5).

    Codes are already in order of first appearance; ``order_by`` sorts groups by the
    column's per-group maximum instead, nulls last, ties by first appearance.
    """
    if order_by is None:
        return np.arange(n_groups, dtype=np.int64)
    keys = (
        rows.select(pl.col(_ORDER_KEY).alias("key"))
        .with_columns(code=pl.Series(group_code))
        .group_by("code")
        .agg(pl.col("key").max())
        .sort("key", "code", nulls_last=True)
    )
    position = np.empty(n_groups, dtype=np.int64)
    position[keys["code"].to_numpy()] = np.arange(n_groups)
    return position


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


def real_labels_expr(written: Iterable[str]) -> pl.Expr:
    """An expression for ``list.eval`` giving the real labels of a record's spans, normalised.

    ``written`` are the distinct labels of the spans (:func:`written_labels`). Realness
    (SPEC §2) is decided once per distinct label; labels that need stripping (rare) are
    mapped to their normal form, the others filtered.
    """
    normal = {text: real_label(text) for text in written}
    if all(label is None or label == text for text, label in normal.items()):
        not_real = [text for text, label in normal.items() if label is None]
        return _VERSION.filter(~_VERSION.is_in(not_real))
    return _VERSION.replace_strict(normal, default=None, return_dtype=pl.String).drop_nulls()


def _record_spans(spans: pl.Series) -> tuple[pl.Expr, np.ndarray]:
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
    scratch = _Scratch()
    parts = []
    # Chunk by chunk as polars holds them: one Arrow array of the whole column would
    # be a copy of every span.
    for chunk in spans.get_chunks():
        part = _chunk_spans(chunk.to_arrow(compat_level=compat.newest()), written, scratch)
        if part is None:
            return None
        parts.append(part)
    return list(written), np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def _chunk_spans(lists: pa.Array, written: dict[str, None], scratch: _Scratch) -> np.ndarray | None:
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


class _Scratch:
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
    views: np.ndarray, offsets: np.ndarray, written: dict[str, None], scratch: _Scratch
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
    code = np.take(_label_codes(texts), indices, out=scratch.code[:size])
    real = np.greater_equal(code, 0, out=scratch.real[:size])
    # How many real spans come before each record's first span.
    seen = np.cumsum(real, dtype=np.int32, out=scratch.counts[:size])
    before = np.where(offsets > 0, seen[np.maximum(offsets - 1, 0)], 0)
    real_code = np.compress(real, code, out=scratch.real_code[: before[-1]])
    return _distinct_per_record(real_code, before, scratch)


def _view_text(view: tuple[int, int]) -> str:
    """The string an inline 16-byte view holds (length, then up to 12 bytes)."""
    low, high = view
    raw = low.to_bytes(8, "little")[4:] + high.to_bytes(8, "little")
    return raw[: low & 0xFFFFFFFF].decode("utf-8")


def _label_codes(written: list[str]) -> np.ndarray:
    """Code of each written label's normal form, -1 for labels that are not real.

    Codes follow the labels' natural order (integers by value), so that the codes of a
    record's spans, in version order, rarely decrease; see :func:`_distinct_per_record`.
    """
    normal = [real_label(text) for text in written]
    ordered = sorted({label for label in normal if label is not None}, key=_natural_key)
    code_of = {label: code for code, label in enumerate(ordered)}
    return np.array([-1 if label is None else code_of[label] for label in normal], np.int32)


def _natural_key(label: str) -> tuple[tuple[tuple[int, int | str], ...], str]:
    """Numbers inside a label compare by value ("v9" before "v10"), the rest as text."""
    parts = _DIGITS.split(label)  # text, digits, text, digits, ..., text
    key = tuple((0, int(part)) if i % 2 else (1, part) for i, part in enumerate(parts) if part)
    return key, label


_DIGITS = re.compile("([0-9]+)")


def _distinct_per_record(code: np.ndarray, before: np.ndarray, scratch: _Scratch) -> np.ndarray:
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
        record = np.repeat(np.arange(n_records), np.diff(before))
        pick = np.isin(record, unsorted)
        order = np.lexsort((code[pick], record[pick]))
        pair_record, pair_code = record[pick][order], code[pick][order]
        first = np.ones(len(order), dtype=bool)
        first[1:] = (pair_record[1:] != pair_record[:-1]) | (pair_code[1:] != pair_code[:-1])
        count[unsorted] = np.bincount(pair_record[first], minlength=n_records)[unsorted]
    return count


def _single_record_rows(group_ids: pl.Series, ids: pl.Series, group_code: np.ndarray) -> np.ndarray:
    """Rows that are a trajectory by themselves: no id, or a (group, id) pair no other row has.

    When each group's rows are together and its ids rise from row to row (as logs are
    often written), every pair is distinct. Otherwise it is decided on a 64-bit hash of
    the pair: a hash no other row shares implies a pair no other row has; the rows that
    share one (the same pair, or rarely a collision) are left to the exact grouping.
    Only rows in crowded hash buckets are sorted.
    """
    if _ids_rise_within_groups(ids, group_code):
        return np.ones(len(ids), dtype=bool)
    pair = ids.hash().to_numpy() ^ (group_ids.hash().to_numpy() * np.uint64(0x9E3779B97F4A7C15))
    single = ids.is_null().to_numpy()
    if pl.Series(pair).n_unique() == len(pair):
        return np.ones(len(pair), dtype=bool)
    n_buckets = 1 << max(4, (4 * len(pair)).bit_length())
    bucket = (pair & np.uint64(n_buckets - 1)).astype(np.intp)
    crowded = np.flatnonzero(np.bincount(bucket, minlength=n_buckets)[bucket] > 1)
    unique = np.ones(len(pair), dtype=bool)
    if len(crowded):
        ordered = np.sort(pair[crowded])
        shared = ordered[1:][ordered[1:] == ordered[:-1]]
        unique[crowded] = ~np.isin(pair[crowded], shared)
    return single | unique


def _ids_rise_within_groups(ids: pl.Series, group_code: np.ndarray) -> bool:
    """Whether each group's rows are consecutive and its ids strictly rise along them."""
    if len(ids) < 2 or ids.null_count() or np.any(group_code[1:] < group_code[:-1]):
        return False
    values = _arrow_chunks(ids)
    try:
        rises = pc.less(values[:-1], values[1:]).to_numpy()
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError):  # an older pyarrow
        return False
    return bool(np.all(rises | (group_code[1:] != group_code[:-1])))


def _trajectory_arrays(
    rows: pl.DataFrame,
    single: np.ndarray,
    real_labels: pl.Expr,
    record_span: np.ndarray,
    response_tokens: np.ndarray,
    response_missing: np.ndarray,
    arrival: np.ndarray,
) -> TrajectoryArrays:
    """Per trajectory: records, tokens, span and the record that gives its version (SPEC §2, §4).

    A trajectory is (group, trajectory id); a record without an id is its own. The
    trajectories that have a single record (``single``; nearly all in most logs) take
    that record's facts without grouping; only the others are grouped.
    """
    valid = (rows["trajectory_id"].is_not_null() & rows["end_version"].is_not_null()).to_numpy()
    span = record_span
    every_row = np.arange(rows.height)
    if single.all():  # the per-record arrays are the per-trajectory ones
        versioned_rows = np.where(valid, every_row, -1)
        return TrajectoryArrays(
            first_row=every_row,
            records=np.ones(rows.height, dtype=np.int64),
            tokens=response_tokens,
            tokens_missing=response_missing,
            span=span,
            version_row=versioned_rows,
            first_versioned_row=versioned_rows,
            arrival=arrival,
            single_records=True,
        )
    single_rows = np.flatnonzero(single)
    versioned_rows = np.where(valid[single_rows], single_rows, -1)
    parts = {
        "first_row": single_rows,
        "records": np.ones(len(single_rows), dtype=np.int64),
        "tokens": response_tokens[single_rows],
        "tokens_missing": response_missing[single_rows],
        "span": span[single_rows],
        "version_row": versioned_rows,
        "first_versioned_row": versioned_rows,
    }
    multi_rows = np.flatnonzero(~single)
    subset = rows[multi_rows].with_columns(
        row=pl.Series(multi_rows),
        group=pl.Series(arrival[multi_rows]),
        tokens=pl.Series(response_tokens[multi_rows]),
        tokens_missing=pl.Series(response_missing[multi_rows]),
        valid=pl.Series(valid[multi_rows]),
    )
    multi = _multi_record_facts(subset, real_labels)
    duplicates = subset.select(
        pl.struct("group", "trajectory_id", "segment_index").is_duplicated().sum()
    ).item()
    order = np.argsort(np.concatenate([single_rows, multi["first_row"].to_numpy()]))
    merged = {
        name: np.concatenate([values, multi[name].to_numpy()])[order]
        for name, values in parts.items()
    }
    return TrajectoryArrays(
        first_row=merged["first_row"],
        records=merged["records"],
        tokens=merged["tokens"],
        tokens_missing=merged["tokens_missing"],
        span=merged["span"],
        version_row=merged["version_row"],
        first_versioned_row=merged["first_versioned_row"],
        arrival=arrival[merged["first_row"]],
        duplicate_records=int(duplicates),
    )


def _multi_record_facts(subset: pl.DataFrame, real_labels: pl.Expr) -> pl.DataFrame:
    """Facts of the trajectories with several records, grouped by (group, trajectory id)."""
    versioned = pl.col("valid")
    return subset.group_by("group", "trajectory_id").agg(
        first_row=pl.col("row").min(),
        records=pl.len().cast(pl.Int64),
        tokens=pl.col("tokens").sum(),
        tokens_missing=pl.col("tokens_missing").any(),
        first_versioned_row=pl.col("row").filter(versioned).min().fill_null(-1),
        # The record with the highest (segment_index, position in the group) gives the
        # version; within a group, row order is position order.
        version_row=pl.col("row")
        .filter(versioned)
        .sort_by(pl.col("segment_index").filter(versioned), pl.col("row").filter(versioned))
        .last()
        .fill_null(-1),
        # Span: distinct real labels over all the trajectory's records.
        span=pl.when(pl.col("version_spans").is_not_null().any())
        .then(pl.col("version_spans").list.eval(real_labels).explode().drop_nulls().n_unique())
        .cast(pl.Int64)
        .fill_null(-1),
    )


def _trajectory_frame(rows: pl.DataFrame, facts: TrajectoryArrays) -> pl.DataFrame:
    """The per-trajectory arrays as a frame, with ids and versions read from the records."""
    every = len(facts.first_row) == rows.height  # then first_row is every row in order
    first_row = pl.Series(facts.first_row)
    no_span = pl.Series(facts.span < 0)
    span = pl.Series(facts.span).set(no_span, None)
    return pl.DataFrame(
        {
            "group_id": rows["group_id"] if every else rows["group_id"].gather(first_row),
            "trajectory_id": (
                rows["trajectory_id"] if every else rows["trajectory_id"].gather(first_row)
            ),
            "first_row": first_row,
            "records": facts.records,
            "tokens": pl.Series(facts.tokens).set(pl.Series(facts.tokens_missing), None),
            "version": rows["end_version"].gather(_nullable(facts.version_row)),
            "first_versioned_row": _nullable(facts.first_versioned_row),
            "span": span,
            "switches": (span - 1).clip(lower_bound=0),
            "arrival": facts.arrival,
        }
    )


def _nullable(values: np.ndarray) -> pl.Series:
    """An Int64 series with null where ``values`` is -1."""
    return pl.Series(values, dtype=pl.Int64).set(pl.Series(values < 0), None)


def _group_arrays(
    facts: TrajectoryArrays,
    *,
    by_trajectory: _ByGroup | None,
    end_code: np.ndarray,
    end_labels: pl.Series,
    samples: np.ndarray,
    tokens: np.ndarray,
    failed: np.ndarray,
) -> GroupArrays:
    """Per-group arrays in arrival order from the trajectory facts and per-group sums."""
    n_groups = len(samples)
    arrival, span = facts.arrival, facts.span
    by_trajectory = by_trajectory or _ByGroup(arrival, n_groups)
    checked = span >= 0
    every_checked = bool(checked.all())
    switches = np.maximum(span - 1, 0)
    max_switches = by_trajectory.max(switches if every_checked else np.where(checked, switches, -1))
    # One version per versioned trajectory, groups in arrival order, trajectories in
    # order of their first versioned record (SPEC §2). The version is the end version
    # of one record (``version_row``), whose label code is already known.
    version_row, first, owner = facts.version_row, facts.first_versioned_row, arrival
    every_versioned = bool((version_row >= 0).all())
    if not every_versioned:
        versioned = version_row >= 0
        version_row, first, owner = version_row[versioned], first[versioned], owner[versioned]
    # Usually already in that order: one record per trajectory, rows in arrival order.
    in_order = by_trajectory.starts is not None and every_versioned and facts.single_records
    if not in_order:
        steps, later = np.diff(owner), np.diff(first)
        if not np.all((steps > 0) | ((steps == 0) & (later > 0))):
            order = np.lexsort((first, owner))
            version_row, owner = version_row[order], owner[order]
    codes = end_code if in_order else end_code[version_row]
    used = np.bincount(codes, minlength=len(end_labels)) > 0
    if not used.all():
        codes = (np.cumsum(used) - 1)[codes]
    return GroupArrays(
        labels=end_labels.filter(pl.Series(used)).to_list(),
        codes=codes,
        owner=owner,
        samples=samples.astype(np.int64),
        trajectories=by_trajectory.count(),
        tokens=tokens,
        failed=failed,
        max_switches=max_switches,
        span=span if every_checked else span[checked],
        span_owner=arrival if every_checked else arrival[checked],
    )


class _ByGroup:
    """Per-group reductions of values given each one's group position (0 .. n_groups - 1).

    Every group must have a value. When the values are already in group order, as they
    are in most logs, a reduction is one pass over contiguous slices (``reduceat``);
    otherwise it scatters by position.
    """

    def __init__(self, position: np.ndarray, n_groups: int) -> None:
        self.position, self.n_groups = position, n_groups
        self.starts: np.ndarray | None = None
        if len(position) and bool(np.all(position[1:] >= position[:-1])):
            starts = np.flatnonzero(np.diff(position, prepend=-1))
            self.starts = starts if len(starts) == n_groups else None

    def count(self) -> np.ndarray:
        if self.starts is not None:
            return np.diff(self.starts, append=len(self.position))
        return np.bincount(self.position, minlength=self.n_groups)

    def sum(self, values: np.ndarray) -> np.ndarray:
        if self.starts is not None:
            return np.add.reduceat(values.astype(np.int64, copy=False), self.starts)
        totals = np.zeros(self.n_groups, dtype=np.int64)
        np.add.at(totals, self.position, values)
        return totals

    def any(self, flags: np.ndarray) -> np.ndarray:
        if self.starts is not None:
            return np.logical_or.reduceat(flags, self.starts)
        return np.bincount(self.position, weights=flags, minlength=self.n_groups) > 0

    def max(self, values: np.ndarray) -> np.ndarray:
        if self.starts is not None:
            return np.maximum.reduceat(values, self.starts)
        largest = np.full(self.n_groups, np.iinfo(values.dtype).min, dtype=values.dtype)
        np.maximum.at(largest, self.position, values)
        return largest


def _lists(labels: list[str], codes: np.ndarray, owner: np.ndarray, n_groups: int) -> pl.Series:
    """The per-group lists of trajectory versions, from flat codes grouped by owner."""
    offsets = np.zeros(n_groups + 1, dtype=np.int64)
    np.cumsum(np.bincount(owner, minlength=n_groups), out=offsets[1:])
    values = pa.array(labels, pa.large_string()).take(pa.array(codes, pa.int64()))
    lists = pa.LargeListArray.from_arrays(pa.array(offsets, pa.int64()), values)
    return pl.Series("trajectory_versions", pl.from_arrow(lists)).cast(pl.List(pl.String))


def _infer_batch_groups(steps: pl.Series, group_code: np.ndarray) -> int | None:
    """Most common number of groups per trainer step (ties: the larger), or None."""
    pairs = pl.DataFrame({"step": steps, "group": group_code}).drop_nulls("step")
    if pairs.height == 0:
        return None
    # A group's records mostly sit together: keep the first row of each run of one
    # (step, group) pair before the exact count of distinct groups per step.
    new_pair = (pl.col("step").diff() != 0) | (pl.col("group").diff() != 0)
    pairs = pairs.filter(new_pair.fill_null(True))
    per_step = pairs.group_by("step").agg(n=pl.col("group").n_unique())["n"]
    counts = Counter(per_step.to_list())
    return max(counts, key=lambda n: (counts[n], n))


def real_token_labels(rows: pl.DataFrame, *, by: str) -> pl.DataFrame:
    """(``by``, label) for every real token-version label of each record, normalised."""
    real = real_labels_expr(written_labels(rows["version_spans"]))
    return (
        rows.select(by, label=pl.col("version_spans").list.eval(real))
        .explode("label")
        .drop_nulls("label")
    )


@dataclass(frozen=True)
class ReplaySummary:
    """Figures of one replay (SPEC §6); :meth:`to_dict` gives the ``--json`` shape."""

    config: ReplayConfig
    counts: dict[str, dict[str, int | None]]
    batches: dict[str, Any]
    version_gap: dict[str, float | int | None]
    version_span: dict[str, dict[str, Any]]
    versions: tuple[str, ...]
    unchecked_trajectories: int
    notes: tuple[str, ...]

    @property
    def current_version_index(self) -> int | None:
        return len(self.versions) - 1 if self.versions else None

    @property
    def cutoff_version_index(self) -> int | None:
        if not self.versions or self.config.keep_versions == 0:
            return None
        return max(0, len(self.versions) - self.config.keep_versions)

    def dressage_metrics(self) -> dict[str, float | int | None]:
        """The same figures under the names of Dressage's training dashboard."""
        span = self.version_span["kept"]
        return {
            "staleness/dropped_groups": self.counts["groups"]["dropped_stale"],
            "staleness/version_gap_min": self.version_gap["min"],
            "staleness/version_gap_max": self.version_gap["max"],
            "staleness/version_gap_mean": self.version_gap["mean"],
            "staleness/version_span_mean": span["mean"],
            "staleness/version_span_max": span["max"],
            "staleness/version_span_min": span["min"],
            "staleness/partial_rollout_rejected_groups": self.counts["groups"]["rejected_span"],
            "staleness/partial_rollout_rejected_samples": self.counts["samples"]["rejected_span"],
            "staleness/current_version_index": self.current_version_index,
            "staleness/cutoff_version_index": self.cutoff_version_index,
        }

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"config": self.config.to_dict()}
        for unit, counts in self.counts.items():
            total = counts["total"]
            rates = {
                key: (None if value is None or not total else value / total)
                for key, value in counts.items()
                if key != "total"
            }
            out[unit] = {**counts, "rates": rates}
        out["batches"] = dict(self.batches)
        out["version_gap"] = dict(self.version_gap)
        out["version_span"] = {k: dict(v) for k, v in self.version_span.items()}
        out["version_span"]["unchecked_trajectories"] = self.unchecked_trajectories
        out["versions_observed"] = len(self.versions)
        out["versions"] = list(self.versions)
        out["dressage_metrics"] = self.dressage_metrics()
        out["notes"] = list(self.notes)
        return out


@dataclass(frozen=True)
class ReplayResult:
    """Everything one replay produced: per-group decisions, emitted batches, summary.

    The two frames are built on first use: a sweep of many settings reads only the
    summaries of most of them.
    """

    config: ReplayConfig
    summary: ReplaySummary
    _prepared: PreparedLog = field(repr=False, compare=False)
    _observation: Observation = field(repr=False, compare=False)
    _collection: Collection = field(repr=False, compare=False)

    @functools.cached_property
    def decisions(self) -> pl.DataFrame:
        """One row per group in arrival order: decision, stage, batch, version index and gap."""
        return _decisions_frame(self._prepared, self._observation, self._collection)

    @functools.cached_property
    def batches(self) -> pl.DataFrame:
        """One row per emitted batch."""
        return _batches_frame(self._observation, self._collection, self.config)


def resolve_config(prepared: PreparedLog, config: ReplayConfig) -> ReplayConfig:
    """Fill in ``batch_groups`` from the log's trainer steps when it was not given (SPEC §5)."""
    if config.batch_groups is not None:
        return config
    if prepared.n_groups == 0:
        # Said first: "no trainer steps" would send the user after the wrong problem.
        raise ConfigError(
            "batch_groups cannot be inferred: the log has no records (an empty input, or "
            "every record skipped); check the input, or pass --batch-groups B to replay "
            "nothing"
        )
    if prepared.inferred_batch_groups is None:
        raise ConfigError(
            "batch_groups cannot be inferred: the log has no trainer steps "
            "(rollout_id / metadata.dressage_return_rollout_id); pass --batch-groups B "
            "(or --field trainer_step=PATH if the steps are under another name)"
        )
    return ReplayConfig(
        keep_versions=config.keep_versions,
        max_preempts=config.max_preempts,
        batch_groups=prepared.inferred_batch_groups,
    )


def replay(
    log: pl.DataFrame | PreparedLog,
    config: ReplayConfig,
    *,
    order_by: str | None = None,
) -> ReplayResult:
    """Replay one setting of ``keep_versions``, ``max_preempts`` and ``batch_groups``.

    Examples
    --------
    >>> import analysis
    >>> table = analysis.records_to_table([
    ...     {"group_index": 0, "metadata": {"parent_traj_id": "a", "dressage_end_token_version": "old"}},
    ...     {"group_index": 1, "metadata": {"parent_traj_id": "b", "dressage_end_token_version": "new"}},
    ...     {"group_index": 2, "metadata": {"parent_traj_id": "c", "dressage_end_token_version": "new"}},
    ... ])
    >>> result = analysis.replay(table, analysis.ReplayConfig(keep_versions=1, batch_groups=2))
    >>> result.decisions.select("group_id", "decision", "stage", "batch").rows()
    [('0', 'dropped_stale', 'pending', None), ('1', 'kept', None, 0), ('2', 'kept', None, 0)]
    """
    prepared = log if isinstance(log, PreparedLog) else prepare(log, order_by=order_by)
    config = resolve_config(prepared, config)
    observation = prepared.observation(config.max_preempts)
    collection = collect(
        observation, keep_versions=config.keep_versions, batch_groups=config.batch_groups or 1
    )
    return ReplayResult(
        config=config,
        summary=_summarise(prepared, config, observation, collection),
        _prepared=prepared,
        _observation=observation,
        _collection=collection,
    )


_DECISION_NAMES = ["kept", "dropped_stale", "dropped_stale", "rejected_span", "failed"]
_STAGE_NAMES = [None, "arrival", "pending", None, None]

_BATCH_SCHEMA = {
    "batch": pl.Int64,
    "groups": pl.Int64,
    "partial": pl.Boolean,
    "current_version_index": pl.Int64,
    "cutoff_version_index": pl.Int64,
    "version_gap_mean": pl.Float64,
    "version_gap_max": pl.Int64,
    "dropped_arrival": pl.Int64,
    "dropped_pending": pl.Int64,
}


def _decisions_frame(
    prepared: PreparedLog, observation: Observation, collection: Collection
) -> pl.DataFrame:
    versioned = observation.min_index != NO_VERSION
    decided = collection.current >= 0
    gap = np.where(versioned & decided, collection.current - observation.min_index, 0)
    code = pl.Series(collection.decision)
    return prepared.groups.select("group_id", "arrival").with_columns(
        decision=code.replace_strict(dict(enumerate(_DECISION_NAMES)), return_dtype=pl.String),
        stage=code.replace_strict(dict(enumerate(_STAGE_NAMES)), return_dtype=pl.String),
        batch=pl.Series(collection.batch).replace(-1, None),
        version_index=pl.Series(observation.min_index).set(pl.Series(~versioned), None),
        version_gap=pl.Series(gap).set(pl.Series(~(versioned & decided)), None),
        samples=prepared.groups["samples"],
        trajectories=prepared.groups["trajectories"],
        tokens=prepared.groups["tokens"],
        # Of every group, rejected ones too (the observation counts only observed groups).
        versioned_trajectories=pl.Series(
            np.bincount(prepared.arrays.owner, minlength=prepared.arrays.n), dtype=pl.Int64
        ),
    )


def _kept_gaps(observation: Observation, collection: Collection) -> tuple[np.ndarray, ...]:
    """Per kept group with versions: (group positions, gap sums, smallest gap, largest gap)."""
    kept = np.flatnonzero((collection.decision == KEPT) & (observation.versioned > 0))
    current = collection.current[kept]
    sums = observation.versioned[kept] * current - observation.sum_index[kept]
    return kept, sums, current - observation.max_index[kept], current - observation.min_index[kept]


def _batches_frame(
    observation: Observation, collection: Collection, config: ReplayConfig
) -> pl.DataFrame:
    kept, sums, _, largest = _kept_gaps(observation, collection)
    emitted = len(collection.batch_rows)
    batch = collection.batch[kept]
    gap_sum = np.bincount(batch, weights=sums, minlength=emitted)
    gap_count = np.bincount(batch, weights=observation.versioned[kept], minlength=emitted)
    gap_max = np.full(emitted, -1, dtype=np.int64)
    np.maximum.at(gap_max, batch, largest)
    rows = []
    for (number, size, partial, now, arrivals, pendings), total, count, high in zip(
        collection.batch_rows, gap_sum, gap_count, gap_max, strict=True
    ):
        known = now + 1
        cutoff = max(0, known - config.keep_versions) if config.keep_versions and known else None
        rows.append(
            (
                number, size, partial, now if known else None, cutoff,
                total / count if count else None, int(high) if count else None,
                arrivals, pendings,
            )
        )  # fmt: skip
    return pl.DataFrame(rows, schema=_BATCH_SCHEMA, orient="row")


def _summarise(
    prepared: PreparedLog, config: ReplayConfig, observation: Observation, collection: Collection
) -> ReplaySummary:
    arrays = prepared.arrays
    decision = collection.decision
    counts: dict[str, dict[str, int | None]] = {}
    for unit, weights in (
        ("groups", None),
        ("samples", arrays.samples),
        ("trajectories", arrays.trajectories),
        ("tokens", arrays.tokens),
    ):
        by_code = np.bincount(decision, weights=weights, minlength=5).astype(np.int64).tolist()
        unit_counts: dict[str, int | None] = {
            "total": sum(by_code),
            "kept": by_code[KEPT],
            "dropped_stale": by_code[DROPPED_ARRIVAL] + by_code[DROPPED_PENDING],
            "dropped_stale_arrival": by_code[DROPPED_ARRIVAL],
            "dropped_stale_pending": by_code[DROPPED_PENDING],
            "rejected_span": by_code[REJECTED],
            "failed": by_code[FAILED],
        }
        if unit == "tokens" and not prepared.tokens_known:
            unit_counts = dict.fromkeys(unit_counts)
        counts[unit] = unit_counts

    kept, sums, smallest, largest = _kept_gaps(observation, collection)
    gap_count = int(observation.versioned[kept].sum())
    version_gap: dict[str, float | int | None] = {
        "min": int(smallest.min()) if gap_count else None,
        "mean": int(sums.sum()) / gap_count if gap_count else None,
        "max": int(largest.max()) if gap_count else None,
    }
    version_span = {
        "kept": _span_stats(prepared.span_histogram(decision == KEPT)),
        "all": _span_stats(prepared.span_histogram(None)),
    }

    notes: list[str] = []
    rejected = counts["groups"]["rejected_span"] or 0
    if rejected:
        notes.append(
            f"{counted(rejected, 'rejected group')} would have been retried by Dressage as a "
            "new attempt; a log cannot show what the retry would produce, so "
            + ("it counts as lost" if rejected == 1 else "they count as lost")
        )
    if not prepared.tokens_known:
        notes.append(
            "some records have neither response_length nor loss_mask, so token figures are null"
        )
    uses_versions = config.keep_versions > 0 or config.max_preempts is not None
    if uses_versions and prepared.n_groups and not arrays.labels and not len(arrays.span):
        notes.append(
            "no record carries version information (a real dressage_end_token_version, "
            "full_versions or version_spans), so the controls had nothing to act on; if the "
            "log keeps versions under other names, pass --field end_version=PATH or "
            "--field token_versions=PATH"
        )
    emitted = len(collection.batch_rows)
    return ReplaySummary(
        config=config,
        counts=counts,
        batches={
            "emitted": emitted,
            "last_partial": bool(emitted and collection.batch_rows[-1][2]),
        },
        version_gap=version_gap,
        version_span=version_span,
        versions=observation.versions,
        unchecked_trajectories=prepared.n_trajectories - len(arrays.span),
        notes=tuple(notes),
    )


def _span_stats(histogram: np.ndarray) -> dict[str, Any]:
    """Min, mean, max and histogram of spans, from how many trajectories have each span."""
    present = np.flatnonzero(histogram)
    if len(present) == 0:
        return {"min": None, "mean": None, "max": None, "histogram": {}}
    counts = histogram[present]
    return {
        "min": int(present[0]),
        "mean": float((present * counts).sum() / counts.sum()),
        "max": int(present[-1]),
        "histogram": {
            str(k): int(c) for k, c in zip(present.tolist(), counts.tolist(), strict=True)
        },
    }


def replay_many(
    log: pl.DataFrame | PreparedLog,
    configs: Sequence[ReplayConfig],
    *,
    order_by: str | None = None,
) -> list[ReplayResult]:
    """Replay several settings over one preparation of the log."""
    prepared = log if isinstance(log, PreparedLog) else prepare(log, order_by=order_by)
    return [replay(prepared, config) for config in configs]


def trajectory_outcomes(prepared: PreparedLog, result: ReplayResult) -> pl.DataFrame:
    """One row per trajectory: its group's decision, span, version index and version gap.

    The gap of a kept trajectory is the current version index when its batch was emitted
    minus the index of its own version (SPEC §3); null when it has no version or was not kept.
    """
    index = {label: position for position, label in enumerate(result.summary.versions)}
    decisions = result.decisions.select(
        "group_id",
        "decision",
        "stage",
        "batch",
        current=pl.col("version_gap") + pl.col("version_index"),
    )
    return (
        prepared.trajectories.select(
            "group_id", "trajectory_id", "arrival", "records", "tokens", "span", "version"
        )
        .join(decisions, on="group_id", how="left", maintain_order="left")
        .with_columns(
            version_index=pl.col("version").replace_strict(
                index, default=None, return_dtype=pl.Int64
            )
        )
        .with_columns(
            version_gap=pl.when(pl.col("decision") == "kept").then(
                pl.col("current") - pl.col("version_index")
            )
        )
        .drop("current")
    )
