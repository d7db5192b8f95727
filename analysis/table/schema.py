"""The canonical table: one row per record (one segment of one trajectory), its columns,
their types and the checks a stored table must pass (docs/semantics.md §1).

Importing this module does not import polars or pyarrow: the helper process that reads
part of an artifact folder needs only the column names. ``CANONICAL_SCHEMA`` and
``SPAN_TYPE`` (polars types) are made on first use.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

    import polars as pl
    import pyarrow as pa

    CANONICAL_SCHEMA: dict[str, pl.DataType]
    SPAN_TYPE: pl.DataType

MAX_TOKENS = 2**40
"""Largest token count a record may give: more than any trajectory has, and small enough
that sums over any log stay within 64 bits (a count near 2^63 made them overflow)."""

_TYPES: dict[str, str] = {
    "source": "String",
    "record": "Int64",
    "group_id": "String",
    "trajectory_id": "String",
    "segment_index": "Int64",
    "sample_index": "Int64",
    "end_version": "String",
    "end_version_derived": "Boolean",
    "version_spans": "Spans",
    "token_count": "Int64",
    "trainer_step": "Int64",
    "response_length": "Int64",
    "loss_mask_length": "Int64",
    "reward": "Float64",
    "status": "String",
    "remove_sample": "Boolean",
    "log_prob_drift": "Float64",
    "log_prob_tokens": "Int64",
    "completed_at": "Float64",
    "returned": "Boolean",
}
"""Each column's polars type by name; ``Spans`` is a list of {start, end, version}."""

CANONICAL_COLUMNS: tuple[str, ...] = tuple(_TYPES)
"""Columns of the canonical table, in order; ``convert`` writes exactly these (plus
--order-by fields)."""

REQUIRED_COLUMNS = ("group_id", "trajectory_id", "segment_index", "end_version", "version_spans")
"""What a stored canonical file must have to be read at all."""

COUNT_COLUMNS = ("token_count", "response_length", "loss_mask_length", "log_prob_tokens")
"""Token counts: each lies in 0..MAX_TOKENS."""


@functools.cache
def polars_schema() -> dict[str, pl.DataType]:
    """The canonical columns with their polars types."""
    import polars as pl

    spans = pl.List(pl.Struct({"start": pl.Int64, "end": pl.Int64, "version": pl.String}))
    return {
        name: spans if kind == "Spans" else getattr(pl, kind)() for name, kind in _TYPES.items()
    }


def __getattr__(name: str) -> Any:
    if name == "CANONICAL_SCHEMA":
        return polars_schema()
    if name == "SPAN_TYPE":
        return polars_schema()["version_spans"]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def check_counts(frame: pl.DataFrame, path: Path) -> None:
    """Token counts of a canonical file lie in 0..MAX_TOKENS, as a JSONL record's must:
    a negative or near-2^63 count (a bad writer, or bytes overwritten in an Arrow file,
    which has no checksums) would give negative totals."""
    from analysis.errors import LogFormatError

    for name in (c for c in COUNT_COLUMNS if c in frame.columns):
        column = frame[name]
        low, high = column.min(), column.max()
        if low is None or 0 <= low <= high <= MAX_TOKENS:  # type: ignore[operator]
            continue  # the common case, in two passes without a mask
        outside = ((column < 0) | (column > MAX_TOKENS)).fill_null(False)
        if outside.any():
            row = int(outside.arg_true()[0])
            raise LogFormatError(
                f"{path}: column {name} holds {column[row]:,} in row {row + 1:,}, outside 0 to "
                f"{MAX_TOKENS:,} (a damaged file, or one convert did not write)"
            )


SPAN_RULE = f"version_spans must be consecutive runs from 0, each ending past its start and at most at {MAX_TOKENS:,}"
"""What every reader holds a record's spans to (a JSONL record, a dump's sample, a row of
a canonical file): the same verdict in every command (issue 34)."""


def check_span_runs(spans: pa.ChunkedArray | pa.Array, path: Path) -> None:
    """Refuse (LogFormatError) a canonical column of span lists with a row whose spans do
    not run consecutively from 0, run backwards or end past ``MAX_TOKENS``, as a JSONL
    record's are refused (:data:`SPAN_RULE`). Read from the Arrow buffers (a few tens of
    milliseconds for 3.5 million spans), before polars sees the column."""
    import numpy as np
    import pyarrow as pa

    chunks = spans.chunks if isinstance(spans, pa.ChunkedArray) else [spans]
    rows_before = 0
    for chunk in chunks:
        if pa.types.is_null(chunk.type) or len(chunk) == 0:
            rows_before += len(chunk)
            continue
        offsets = np.asarray(chunk.offsets)
        first, last = int(offsets[0]), int(offsets[-1])
        values = chunk.values.slice(first, last - first)
        # (a null reads as NaN, never equal nor ordered: refused as bad)
        start = values.field("start").to_numpy(zero_copy_only=False)
        end = values.field("end").to_numpy(zero_copy_only=False)
        due = np.empty_like(end)
        due[1:] = end[:-1]
        heads = offsets[:-1][offsets[:-1] < offsets[1:]] - first
        due[heads] = 0
        bad = ~((start < end) & (end <= MAX_TOKENS) & (start == due))
        if values.null_count:
            bad |= np.asarray(values.is_null().to_numpy(zero_copy_only=False))
        if bad.any():
            at = int(np.argmax(bad))
            row = rows_before + int(np.searchsorted(offsets, at + first, side="right")) - 1
            from analysis.errors import LogFormatError

            shown = [None if x != x else int(x) for x in (start[at], end[at], due[at])]
            raise LogFormatError(
                f"{path}: row {row + 1:,}: {SPAN_RULE} (found start {shown[0]}, end "
                f"{shown[1]} where start {shown[2]} was due); a damaged file, or one "
                "convert did not write: convert the log again"
            )
        rows_before += len(chunk)


def arrow_type_fits(kind: pa.DataType, name: str) -> bool:
    """Whether a column of this Arrow type reads as the canonical column ``name``: an
    integer type for an integer column, any string type for a string one, exactly the
    span fields for ``version_spans``, and so on (all nulls fit anything). Checked before
    polars sees the data: some types (decimal256) make it panic, others (a struct where
    a number belongs) pass its cast and fail later, or silently (a span struct with
    other field names comes out as nulls)."""
    import pyarrow as pa

    if pa.types.is_null(kind):
        return True
    if pa.types.is_dictionary(kind):  # as polars writes a Categorical, pandas a category
        return pa.types.is_integer(kind.index_type) and arrow_type_fits(kind.value_type, name)
    expected = _TYPES[name]
    if name == "version_spans":
        if not (pa.types.is_list(kind) or pa.types.is_large_list(kind)):
            return False
        spans = kind.value_type
        return (
            pa.types.is_struct(spans)
            and sorted(field.name for field in spans) == ["end", "start", "version"]
            and arrow_type_fits(spans.field("start").type, "record")
            and arrow_type_fits(spans.field("end").type, "record")
            and arrow_type_fits(spans.field("version").type, "group_id")
        )
    if expected == "String":
        return bool(
            pa.types.is_string(kind) or pa.types.is_large_string(kind) or is_string_view(kind)
        )
    if expected in ("Int64", "Float64"):  # floats too: pandas writes integers with nulls as floats
        return bool(pa.types.is_integer(kind) or pa.types.is_floating(kind))
    return bool(pa.types.is_boolean(kind))


def is_string_view(kind: pa.DataType) -> bool:
    """Whether an Arrow type is a string view (pyarrow 16 has no such type)."""
    import pyarrow as pa

    return bool(kind == getattr(pa, "string_view", lambda: None)())
