"""Turn canonical rows into polars frames: the columns, the spans column, and the checks on extra (ordering) fields."""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Any

import polars as pl
import pyarrow as pa

from analysis.errors import (
    LogFormatError,
    Message,
    ReplayError,
    setting,
)
from analysis.formats.dressage.segments import ERRORS, Chunk
from analysis.formats.fields import (
    RowColumns,
    row_columns,
)
from analysis.table.schema import (
    CANONICAL_SCHEMA,
    SPAN_TYPE,
)


class FolderTable:
    """An artifact folder's results, turned into frames as they come and sorted at the end."""

    def __init__(self, extra: Sequence[str], *, where: str) -> None:
        self.extra, self.where = extra, where
        self.frames: list[pl.DataFrame] = []
        self.errors: list[tuple[int, str, int, ReplayError]] = []
        self.by_completion = False
        """Whether :meth:`table` ordered the rows by completion time (else by file time)."""
        self.untimed = 0
        """How many rows carry no completion time."""

    def take(self, chunk: Chunk) -> None:
        for stamp, path, number, kind, parts in chunk.errors:
            self.errors.append((stamp, path, number, ERRORS[kind](Message.from_plain(parts))))
        if chunk.row_stamps:
            frame = columns_frame(chunk.rows, self.extra, where=self.where)
            self.frames.append(
                frame.with_columns(pl.Series(_MTIME, chunk.row_stamps, dtype=pl.Int64))
            )

    def errors_in_order(self) -> list[ReplayError]:
        return [error for *_, error in sorted(self.errors, key=lambda e: e[:3])]

    def table(self) -> pl.DataFrame | None:
        """All rows in arrival order. When every row carries its completion time (Dressage
        writes the proxy's read time into each segment, and the failure time into each
        error file), a group arrives when its last trajectory completed, its rows in path
        order (the files hold no sample order); otherwise by the files' modification
        times (docs/semantics.md §5.1). Ties: path, then record number."""
        if not self.frames:
            return None
        table = concat_checked(self.frames, self.extra, self.where)
        self.untimed = table["completed_at"].null_count()
        self.by_completion = table.height > 0 and self.untimed == 0
        if self.by_completion:
            arrival = pl.col("completed_at").max().over("group_id")
            return table.sort(arrival, "source", "record").drop(_MTIME)
        return table.sort(_MTIME, "source", "record").drop(_MTIME)


_MTIME = "\x00mtime"


def rows_to_frame(rows: list[dict[str, Any]], extra: Sequence[str], *, where: str) -> pl.DataFrame:
    return columns_frame(row_columns(rows, extra), extra, where=where)


def columns_frame(data: RowColumns, extra: Sequence[str], *, where: str) -> pl.DataFrame:
    """The canonical table (and extra columns) of rows already turned into columns."""
    columns = {
        name: _spans_column(data)
        if name == "version_spans"
        else pl.Series(name, data.columns[name], dtype=dtype)
        for name, dtype in CANONICAL_SCHEMA.items()
    }
    for path in extra:
        if path in CANONICAL_SCHEMA:
            continue
        values = data.columns[path]
        _check_kinds(path, values, data, where)
        try:
            columns[path] = pl.Series(path, values, strict=False)
        except (TypeError, pl.exceptions.PolarsError) as exc:
            raise LogFormatError(
                f"{where}: field {path} has values of mixed types ({exc})"
            ) from exc
    return pl.DataFrame(columns)


_KINDS = {
    bool: "boolean",
    int: "number",
    float: "number",
    str: "text",
    list: "list",
    dict: "object",
}
"""The kinds of value an extra (ordering) field may hold, by Python type."""


_ORDERABLE = frozenset({"boolean", "number", "text", "time"})


def _check_kinds(path: str, values: Sequence[Any], data: RowColumns, where: str) -> None:
    """An extra field is an ordering key: numbers, text, times or booleans, one kind
    throughout (polars would turn numbers beside text into text, which sorts 10 before
    5). The error names the first record whose value breaks that."""
    kinds = {_KINDS.get(kind, kind.__name__) for kind in set(map(type, values))} - {"NoneType"}
    if len(kinds) <= 1 and kinds <= _ORDERABLE:
        return  # the common case, decided without a Python loop over the records
    first = None
    for i, value in enumerate(values):
        if value is None:
            continue
        kind = _KINDS.get(type(value), type(value).__name__)
        if kind not in _ORDERABLE or (first is not None and kind != first):
            source, record = data.columns["source"][i], data.columns["record"][i]
            found = (
                f"{kind} values"
                if first is None or kind not in _ORDERABLE
                else f"a {kind} value where earlier records hold {first}"
            )
            raise LogFormatError(_kind_error(f"{source}: record {record}", path, found))
        first = kind


def _kind_error(where: str, path: str, found: str) -> str:
    return (
        f"{where}: field {path} holds {found}; an ordering field needs numbers, text, "
        "times or booleans, one kind in every record: pick another "
        + setting("order_by")
        + " field"
    )


def _frame_kind(frame: pl.DataFrame, path: str) -> str | None:
    """The kind of value (see :data:`_KINDS`) an extra column holds; None when all null."""
    dtype = frame.schema.get(path, pl.Null)
    if dtype == pl.Null:
        return None
    if dtype in (pl.String, pl.Categorical) or isinstance(dtype, pl.Enum):
        return "text"
    if dtype == pl.Boolean:
        return "boolean"
    if dtype.is_numeric():
        return "number"
    return "time" if dtype.is_temporal() else str(dtype)


class KindsSeen:
    """The kind of each extra field in the chunks so far: a chunk of another kind is an
    error (a relaxed concatenation, or a writer, would turn its values into the first's)."""

    def __init__(self, extra: Sequence[str]) -> None:
        self.paths = [path for path in extra if path not in CANONICAL_SCHEMA]
        self.seen: dict[str, tuple[str, str]] = {}

    def check(self, frame: pl.DataFrame, where: str) -> None:
        for path in self.paths:
            kind = _frame_kind(frame, path)
            if kind is None:
                continue
            if kind not in _ORDERABLE:
                raise LogFormatError(_kind_error(where, path, f"{kind} values"))
            first, first_where = self.seen.setdefault(path, (kind, where))
            if kind != first:
                raise LogFormatError(
                    _kind_error(where, path, f"{kind} values where {first_where} holds {first}")
                )


def where_from(frame: pl.DataFrame, fallback: str) -> str:
    """The file a chunk's first row came from, for a message."""
    if "source" in frame.columns and frame.height and frame["source"][0] is not None:
        return str(frame["source"][0])
    return fallback


def concat_checked(frames: list[pl.DataFrame], extra: Sequence[str], where: str) -> pl.DataFrame:
    """The frames one under the other; an extra field must be of one kind in all of them."""
    kinds = KindsSeen(extra)
    for frame in frames:
        kinds.check(frame, where_from(frame, where))
    return stacked(frames, where)


def stacked(frames: list[pl.DataFrame], where: str) -> pl.DataFrame:
    try:
        return pl.concat(frames, how="vertical_relaxed")
    except pl.exceptions.PolarsError as exc:
        raise LogFormatError(f"{where}: files disagree on column types ({exc})") from exc


def _spans_column(data: RowColumns) -> pl.Series:
    """Build the spans column from flat Arrow arrays (a list of dicts per row is much slower)."""
    values = pa.StructArray.from_arrays(
        [
            _positions(data.span_starts),
            _positions(data.span_ends),
            pa.array(data.span_labels, pa.string()),
        ],
        names=["start", "end", "version"],
    )
    array = pa.ListArray.from_arrays(
        pa.array(data.span_offsets, pa.int32()),
        values,
        mask=pa.array(data.spans_missing, pa.bool_()),
    )
    return pl.Series("version_spans", pl.from_arrow(array)).cast(SPAN_TYPE)


def _positions(values: array[int]) -> pa.Array:
    """64-bit positions as an Arrow array over the same memory."""
    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(values)])
