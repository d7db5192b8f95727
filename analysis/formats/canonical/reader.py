"""Read canonical Parquet and Arrow files (as `convert` writes them) safely and fast."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import polars as pl
import pyarrow as pa

from analysis.errors import (
    DamagedFileError,
    LogFormatError,
    MissingFieldError,
    NoRoomError,
    counted,
    setting,
)
from analysis.formats.canonical.ipc_sizes import IpcLayoutError, declared_sizes
from analysis.formats.source import Source
from analysis.table.limits import (
    DEFAULT_LIMITS,
    INFLATION_FLOOR,
    Limits,
    memory_room,
    over_limit,
)
from analysis.table.schema import (
    CANONICAL_SCHEMA,
    COUNT_COLUMNS,
    REQUIRED_COLUMNS,
    arrow_type_fits,
    check_counts,
    check_span_runs,
    is_string_view,
)

if TYPE_CHECKING:
    import pyarrow.parquet as pq

SOURCE_FORMATS_KEY = "dressage_replay.source_formats"
"""The key of a converted file's metadata naming the formats its rows were read from."""


def source_formats(source: Source) -> list[str]:
    """The formats a converted file's rows were read from (its metadata; `convert` keeps
    them), e.g. ["verl"]; empty for a file that does not say."""
    try:
        schema = _ArrowFile(source).schema
    except Exception:  # an unreadable file: reading it says why
        return []
    stored = (schema.metadata or {}).get(SOURCE_FORMATS_KEY.encode())
    return [name for name in stored.decode(errors="replace").split(",") if name] if stored else []


def read_canonical(
    source: Source,
    extra: Sequence[str],
    columns: Sequence[str] | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> pl.DataFrame:
    """A canonical Parquet or Arrow file as the canonical table; only ``columns`` (and
    the extra fields) are read when given."""
    extra = [path for path in extra if path not in CANONICAL_SCHEMA]
    unreadable = f"{source.path}: not a readable {source.format} file"
    try:
        file = _ArrowFile(source)
    except (Exception, pl.exceptions.PanicException) as exc:
        raise DamagedFileError(f"{unreadable} ({exc})") from exc
    if file.metadata is not None and file.rows is not None:
        _check_rows(source, file.rows, limits)
        _check_parquet_spans(source, file.metadata, limits)
        _check_room(source, file.rows)
    else:
        _check_room(source, _check_ipc_sizes(source, limits, unreadable))
    present = file.columns
    missing = [c for c in (*REQUIRED_COLUMNS, *extra) if c not in present]
    if missing:
        raise MissingFieldError(
            f"{source.path}: not in the canonical layout: lacks {', '.join(missing)} "
            f"(columns: {', '.join(present)}); "
            + (
                "convert the run's log again keeping the ordering field "
                "(" + setting("order_by", "FIELD") + ")"
                if not [c for c in REQUIRED_COLUMNS if c not in present]
                else _CANONICAL_ONLY
            )
        )
    wanted = {
        name: dtype
        for name, dtype in CANONICAL_SCHEMA.items()
        if columns is None or name in columns
    }
    # The source column is the file path, not whatever the file says.
    read = [name for name in present if name in extra or (name in wanted and name != "source")]
    # Token counts are checked whether or not the caller asked for them, so that every
    # command gives a file the same verdict (inspect refused one replay read: issue 34).
    read += [name for name in COUNT_COLUMNS if name in present and name not in read]
    for name in read:
        if name in CANONICAL_SCHEMA and not arrow_type_fits(file.schema.field(name).type, name):
            raise LogFormatError(
                f"{source.path}: column {name} holds {file.schema.field(name).type} where the "
                f"canonical layout has {CANONICAL_SCHEMA[name]}; {_CANONICAL_ONLY}"
            )
    try:
        stored = file.read(read)
    except MemoryError:  # (pyarrow's "malloc failed": out of memory, not a damaged file)
        raise
    # A damaged file can make polars panic (a BaseException), not only raise.
    except (Exception, pl.exceptions.PanicException) as exc:
        raise DamagedFileError(f"{unreadable} ({exc})") from exc
    if "version_spans" in stored.column_names:
        check_span_runs(stored.column("version_spans"), source.path)
    try:
        frame = file.frame(stored)
        check_counts(frame, source.path)
        absent = {name: dtype for name, dtype in wanted.items() if name not in frame.columns}
        frame = frame.with_columns(
            pl.lit(None, dtype=dtype).alias(name) for name, dtype in absent.items()
        )
        if "source" in wanted:
            frame = frame.with_columns(pl.lit(str(source.path)).alias("source"))
        frame = _struct_fields_by_name(frame, wanted)
        # Strict: a value that does not fit (an unsigned 2^63, say) is an error, not a null.
        frame = frame.select(*wanted, *extra).cast(wanted)  # type: ignore[arg-type]
    except LogFormatError:  # a count out of range, said as such
        raise
    except (Exception, pl.exceptions.PanicException) as exc:  # values, not the file
        raise LogFormatError(f"{unreadable} ({exc})") from exc
    _check_spans(frame, source, limits)
    return frame


def _struct_fields_by_name(frame: pl.DataFrame, wanted: dict[str, Any]) -> pl.DataFrame:
    """A list-of-struct column whose fields are the wanted ones in another order (a writer
    free to order them) put in the wanted order: a strict cast matches struct fields by
    position (polars 2), and a missing or extra field stays an error of the cast."""
    for name, dtype in wanted.items():
        have = frame.schema.get(name)
        if not (isinstance(dtype, pl.List) and isinstance(dtype.inner, pl.Struct)):
            continue
        if not (isinstance(have, pl.List) and isinstance(have.inner, pl.Struct)):
            continue
        order = [field.name for field in dtype.inner.fields]
        found = [field.name for field in have.inner.fields]
        if found != order and sorted(found) == sorted(order):
            fields = (pl.element().struct.field(field) for field in order)
            frame = frame.with_columns(pl.col(name).list.eval(pl.struct(*fields)))
    return frame


ROW_BYTES = 100
"""The least memory one row of the canonical table takes once read (22 columns)."""


def _check_rows(source: Source, rows: int, limits: Limits) -> None:
    """Refuse a Parquet file whose footer declares more rows than its bytes can hold
    within ``max_inflation``: the reader allocates what the footer says (a 19 KB file
    declaring a billion rows asked for 8 GB; 50 million copies of one row compress to
    5.6 MB and took 2.6 GB). A file that convert writes holds a row in 6 bytes or more."""
    size = source.path.stat().st_size
    ratio = limits.max_inflation
    if rows * ROW_BYTES > max(INFLATION_FLOOR, ratio * size):
        raise over_limit(
            source.path,
            f"a Parquet file declaring {rows:,} rows in {size:,} bytes (at least "
            f"{rows * ROW_BYTES:,} bytes in memory, more than {ratio} times its size)",
            "max_inflation",
            ratio,
        )


def _check_ipc_sizes(source: Source, limits: Limits, unreadable: str) -> int:
    """Refuse an Arrow IPC file whose batches declare more rows, or more bytes once
    decompressed, than its bytes can hold within ``max_inflation`` (rows counted as
    :func:`_check_rows` counts them), from its metadata alone: pyarrow allocates what a
    batch declares before it reads the batch."""
    size = source.path.stat().st_size
    ratio = limits.max_inflation
    bound = max(INFLATION_FLOOR, ratio * size)
    try:
        declared = declared_sizes(source.path, bound // ROW_BYTES, bound)
    except (IpcLayoutError, OSError, ValueError) as exc:
        raise DamagedFileError(f"{unreadable} ({exc})") from exc
    if declared.rows * ROW_BYTES > bound:
        what = f"{declared.rows:,} rows (at least {declared.rows * ROW_BYTES:,} bytes in memory)"
    elif declared.inflated > bound:
        what = f"{declared.inflated:,} bytes once decompressed"
    else:
        return declared.rows
    raise over_limit(
        source.path,
        f"an Arrow IPC file whose batches declare at least {what} in {size:,} bytes, "
        f"more than {ratio} times its size",
        "max_inflation",
        ratio,
    )


def _check_room(source: Source, rows: int) -> None:
    """Refuse, before it is read, a file whose rows need more memory than the process
    can have (its address-space limit, the machine's free memory): reading on, the
    readers' allocators abort the process (a signal, not an error) when memory runs out.
    Counted at :data:`ROW_BYTES` a row, the least a row takes, so a file that fits is
    never refused."""
    need = rows * ROW_BYTES
    room = memory_room()
    if room is not None and need > room:
        raise NoRoomError(
            f"{source.path}: its {rows:,} rows need at least {need / 2**30:.1f} GiB of memory, "
            f"and this process can have {room / 2**30:.1f} GiB more; read it where more "
            "memory is free"
        )


def _check_parquet_spans(source: Source, metadata: pq.FileMetaData, limits: Limits) -> None:
    """Refuse, from its metadata, a Parquet file with a row group of more than
    ``max_spans`` spans a row: one of its rows is past the limit (as a JSONL record of
    that many is refused; 30 million spans of one row in a 58 MB file took 2.7 GB). A row
    past it among shorter ones is refused once read (:func:`_check_spans`)."""
    most = limits.max_spans
    try:
        for index in range(metadata.num_row_groups):
            group = metadata.row_group(index)
            for leaf in map(group.column, range(group.num_columns)):
                spans = leaf.num_values  # (and an entry for each empty or null list)
                if leaf.path_in_schema.startswith("version_spans.") and spans > most * max(
                    group.num_rows, 1
                ):
                    what = (
                        f"a row group of {counted(group.num_rows, 'row')} holding {spans:,} "
                        f"runs of token versions (spans), over {most:,} a row"
                    )
                    raise over_limit(source.path, what, "max_spans", most)
    except (OSError, pa.ArrowException, UnicodeDecodeError):
        return  # a damaged file (a column name that is not UTF-8, too): reading it says so


def _check_spans(frame: pl.DataFrame, source: Source, limits: Limits) -> None:
    """Refuse a table read with a row of more than ``max_spans`` spans, as a JSONL record
    of that many is refused."""
    if "version_spans" not in frame.columns or frame.height == 0:
        return
    longest = frame["version_spans"].list.len().max()
    if isinstance(longest, int) and longest > limits.max_spans:
        what = f"a row of {longest:,} runs of token versions (spans)"
        raise over_limit(source.path, what, "max_spans", limits.max_spans)


_CANONICAL_ONLY = (
    "Parquet and Arrow files are read in the layout `dressage-replay convert` writes: "
    "write raw records as JSONL instead (polars: DataFrame.write_ndjson), and read or "
    "convert that"
)


_JOINED, _SMALL_BATCH = 1024, 4096
"""Runs of this many batches of fewer rows than that are joined into one as they are
read (a copy of small data): each batch holds its own buffers (200,000 one-row batches
took 1.6 GB), and polars took a second per thousand one-row chunks."""


class _Batches:
    """Record batches in file order, runs of small ones joined."""

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self.kept: list[pa.RecordBatch] = []
        self.run: list[pa.RecordBatch] = []  # small batches, not yet joined

    def add(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows >= _SMALL_BATCH:
            self.join()
            self.kept.append(batch)
            return
        self.run.append(batch)
        if len(self.run) >= _JOINED:
            self.join()

    def join(self) -> None:
        if len(self.run) > 1:
            joined = pa.Table.from_batches(self.run, self.schema).combine_chunks()
            self.kept += joined.to_batches()
        else:
            self.kept += self.run
        self.run = []

    def table(self) -> pa.Table:
        self.join()
        table = pa.Table.from_batches(self.kept, self.schema)
        if len(self.kept) > 1 and table.num_rows < _SMALL_BATCH * len(self.kept):
            table = table.combine_chunks()  # (the joined runs: small data)
        return table


class _ArrowFile:
    """A Parquet or Arrow IPC file, read with pyarrow.

    Not with polars: polars' Parquet reader aborts the whole process on some damaged
    files (a page header with a negative value count makes it ask for 2^61 bytes), where
    pyarrow raises an error. Arrow IPC data is checked in full before polars sees it,
    since its offsets are taken as they are written.
    """

    def __init__(self, source: Source) -> None:
        self.path, self.parquet = source.path, source.format == "parquet"
        if self.parquet:
            import pyarrow.parquet as pq

            self.schema = pq.read_schema(self.path)
            self.metadata: pq.FileMetaData | None = pq.read_metadata(self.path)
            self.rows: int | None = self.metadata.num_rows
        else:
            self.metadata, self.rows = None, None
            with pa.ipc.open_file(self.path) as reader:
                self.schema = reader.schema
        self.columns = self.schema.names

    def read(self, columns: list[str]) -> pa.Table:
        """The columns as stored (this is where a damaged file fails)."""
        schema = pa.schema([_for_polars(self.schema.field(name)) for name in columns])
        if self.parquet:
            import pyarrow.parquet as pq

            # pyarrow's Parquet reader does not check that strings are UTF-8, and polars
            # aborts the process on one that is not: strings are read as bytes (straight
            # into polars' layout), and the cast to strings checks them. Dictionary-encoded
            # strings cannot be read as bytes: those columns are checked in full instead.
            table = pq.read_table(self.path, columns=columns, schema=_as_bytes(schema))
            for field in schema:
                if _has_dictionary(field.type):
                    table.column(field.name).validate(full=True)
            return table
        # A batch at a time, and only the columns wanted decompressed: read whole, a
        # compressed file was held twice over (every column, then the ones kept). Without
        # threads: each buffer handed to a thread took 5 times as long as the batch (20,000
        # batches of one row: 7.4 s, 1.8 s without).
        wanted = [self.schema.get_field_index(name) for name in columns]
        options = pa.ipc.IpcReadOptions(included_fields=wanted or None, use_threads=False)
        with pa.ipc.open_file(self.path, options=options) as reader:
            batches = _Batches(reader.schema)
            for index in range(reader.num_record_batches):
                batch = reader.get_batch(index)
                batch.validate(full=True)
                batches.add(batch)
            table = batches.table()
        return table.select(columns)

    def frame(self, table: pa.Table) -> pl.DataFrame:
        """The columns read, as polars takes them (this is where text that is not UTF-8
        fails: a bad value, not a damaged file)."""
        schema = pa.schema([_for_polars(self.schema.field(name)) for name in table.column_names])
        frame = pl.from_arrow(table.cast(schema), rechunk=False)
        assert isinstance(frame, pl.DataFrame)
        return frame


def _for_polars(field: pa.Field) -> pa.Field:
    """The field as polars takes it over fastest and safely, at any depth of structs and
    lists: strings as views (polars' own layout, so no copy), and no metadata (polars
    panics, printing a backtrace, on a metadata key that is not UTF-8, as in a damaged
    file)."""
    kind = field.type
    if (pa.types.is_string(kind) or pa.types.is_large_string(kind)) and _views_castable():
        kind = pa.string_view()
    elif pa.types.is_struct(kind):
        kind = pa.struct([_for_polars(child) for child in kind])
    elif pa.types.is_list(kind):
        kind = pa.list_(_for_polars(kind.value_field))
    elif pa.types.is_large_list(kind):
        kind = pa.large_list(_for_polars(kind.value_field))
    return pa.field(field.name, kind, field.nullable)


def _has_dictionary(kind: pa.DataType) -> bool:
    """Whether a type is dictionary-encoded, or holds a dictionary-encoded child."""
    if pa.types.is_dictionary(kind):
        return True
    if pa.types.is_struct(kind):
        return any(_has_dictionary(field.type) for field in kind)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return _has_dictionary(kind.value_type)
    return False


def _as_bytes(schema: pa.Schema) -> pa.Schema:
    """The schema with every string type, at any depth, as the same layout of bytes."""

    def as_bytes(kind: pa.DataType) -> pa.DataType:
        if is_string_view(kind):
            return pa.binary_view()
        if pa.types.is_large_string(kind):
            return pa.large_binary()
        if pa.types.is_string(kind):
            return pa.binary()
        if pa.types.is_struct(kind):
            return pa.struct([field.with_type(as_bytes(field.type)) for field in kind])
        if pa.types.is_list(kind):
            return pa.list_(kind.value_field.with_type(as_bytes(kind.value_type)))
        if pa.types.is_large_list(kind):
            return pa.large_list(kind.value_field.with_type(as_bytes(kind.value_type)))
        return kind

    return pa.schema([field.with_type(as_bytes(field.type)) for field in schema])


@functools.cache
def _views_castable() -> bool:
    """Whether this pyarrow casts strings to string views (pyarrow 16 cannot)."""
    try:
        pa.array(["x"], pa.large_string()).cast(pa.string_view())
    except (AttributeError, pa.ArrowNotImplementedError):
        return False
    return True
