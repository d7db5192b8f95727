"""Load rollout logs of every supported format into one canonical table (SPEC §1).

One row per record (one segment of one trajectory). Token versions are kept only as
run-length spans; an end version derived from them is flagged.
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import gzip
import json
import operator
import os
import zlib
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import polars as pl
import pyarrow as pa

from analysis.artifacts import ERRORS, Chunk, is_artifact_folder, read_artifact_folder
from analysis.errors import (
    DamagedFileError,
    InputNotFoundError,
    LogFormatError,
    MissingFieldError,
    ReplayError,
    UnknownFormatError,
    UnsafePickleError,
    counted,
)
from analysis.pickles import ZIP_MAGIC, load_pickled
from analysis.records import (
    CANONICAL_COLUMNS,
    MAX_TOKENS,
    FieldMap,
    RowColumns,
    canonical_row,
    json_problem,
    parse_json,
    read_json_file,
    row_columns,
    short_repr,
)

Format = Literal["jsonl", "artifacts", "pt", "parquet", "ipc"]
OnBadRecord = Literal["fail", "skip"]

SPAN_TYPE = pl.List(pl.Struct({"start": pl.Int64, "end": pl.Int64, "version": pl.String}))

CANONICAL_SCHEMA: dict[str, pl.DataType] = {
    "source": pl.String(),
    "record": pl.Int64(),
    "group_id": pl.String(),
    "trajectory_id": pl.String(),
    "segment_index": pl.Int64(),
    "sample_index": pl.Int64(),
    "end_version": pl.String(),
    "end_version_derived": pl.Boolean(),
    "version_spans": SPAN_TYPE,
    "token_count": pl.Int64(),
    "trainer_step": pl.Int64(),
    "response_length": pl.Int64(),
    "loss_mask_length": pl.Int64(),
    "reward": pl.Float64(),
    "status": pl.String(),
    "remove_sample": pl.Boolean(),
    "log_prob_drift": pl.Float64(),
    "log_prob_tokens": pl.Int64(),
}
"""Columns of the canonical table; ``convert`` writes exactly these (plus --order-by fields)."""
assert tuple(CANONICAL_SCHEMA) == CANONICAL_COLUMNS

REQUIRED_COLUMNS = ("group_id", "trajectory_id", "segment_index", "end_version", "version_spans")


@dataclass(frozen=True)
class Source:
    """One input file and the format it is read as; or a whole artifact folder (``folder``)."""

    path: Path
    format: Format
    folder: bool = False
    files: int = 1
    """How many files it stands for (an artifact folder's segment files, once read)."""


_SKIP_REASONS = {
    "LogFormatError": "bad record",
    "DamagedFileError": "damaged file",
    "MissingFieldError": "missing field",
    "InputNotFoundError": "unreadable file",
}
"""Why something was skipped, by error (the keys of ``skipped`` in ``--json``)."""
SKIP_REASON_NOUNS = {
    "bad record": ("bad record", "bad records"),
    "damaged file": ("damaged file", "damaged files"),
    "missing field": ("record missing a field", "records missing a field"),
    "unreadable file": ("unreadable file", "unreadable files"),
}
"""Each reason as the thing skipped, singular and plural, for the warning."""


@dataclass
class LoadReport:
    """What loading saw besides the records: formats, skipped records, warnings."""

    sources: list[Source] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    skipped_where: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def formats(self) -> list[str]:
        return sorted({s.format for s in self.sources})

    @property
    def files(self) -> int:
        """How many input files were read (every segment file of an artifact folder counts)."""
        return sum(source.files for source in self.sources)

    def skip(self, error: ReplayError) -> None:
        reason = _SKIP_REASONS.get(type(error).__name__, "bad record")
        self.skipped[reason] += 1
        if len(self.skipped_where) < 5:
            self.skipped_where.append(str(error))


# --------------------------------------------------------------------------- discovery


def detect_sources(inputs: Sequence[str | Path]) -> tuple[list[Source], list[str]]:
    """Expand inputs (files, directories, globs) into sources in arrival order, plus warnings."""
    sources: list[Source] = []
    warnings: list[str] = []
    for raw in inputs:
        path = Path(raw)
        try:
            exists, is_dir = path.exists(), path.is_dir()
        except OSError as exc:  # a folder on the way that may not be searched
            raise InputNotFoundError(
                f"{raw}: cannot reach it ({exc.strerror}); check the permissions of its folders"
            ) from exc
        if not exists:
            pattern = str(raw)
            matches = (
                sorted(map(Path, glob.glob(pattern))) if any(c in pattern for c in "*?[") else []
            )
            if not matches:
                raise InputNotFoundError(f"{raw}: no such file or directory; check the path")
            for match in matches:
                found, more = detect_sources([match])
                sources += found
                warnings += more
            continue
        if is_dir:
            found, more = _directory_sources(path)
            sources += found
            warnings += more
        else:
            sources.append(Source(path, _file_format(path)))
    return sources, warnings


_FOLDER_KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("slime dump", (".pt", ".pkl", ".pickle")),
    ("JSONL", (".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz", ".json.gz")),
    ("Parquet/Arrow", (".parquet", ".arrow", ".ipc", ".feather")),
)
"""The files a folder's logs are looked for in, by (lower-case) name ending."""


def _directory_sources(root: Path) -> tuple[list[Source], list[str]]:
    """A folder's logs: its slime dumps, else its Dressage artifact tree, else its JSONL
    files, else its Parquet/Arrow files. Logs of a later kind beside them are not read
    (runs keep one kind of log), with a warning that names them."""
    try:
        # By name: the same order as sorting the paths, without making a Path of each of
        # what may be thousands of instance folders (that sort alone took 27 ms for 5,000).
        with os.scandir(root) as listing:
            entries = sorted(listing, key=operator.attrgetter("name"))
    except OSError as exc:
        raise InputNotFoundError(
            f"{root}: cannot list the folder ({exc.strerror}); check its permissions"
        ) from exc
    found: dict[str, list[Path]] = {kind: [] for kind, _ in _FOLDER_KINDS}
    broken: list[str] = []  # links to logs that are not there
    try:
        for entry in entries:
            name = entry.name.lower()
            for kind, endings in _FOLDER_KINDS:
                if name.endswith(endings) and (path := root / entry.name).is_file():
                    found[kind].append(path)
                    break
                if name.endswith(endings) and path.is_symlink() and not path.exists():
                    broken.append(entry.name)
                    break
    except OSError as exc:  # listed, but its entries may not be looked at
        raise InputNotFoundError(
            f"{root}: cannot look at the folder's files ({exc.strerror}); check its permissions"
        ) from exc
    artifacts = is_artifact_folder(root)
    chosen: list[Source] = []
    what = ""
    unread: list[str] = []
    for kind in ("slime dump", "artifacts", "JSONL", "Parquet/Arrow"):
        if kind == "artifacts":
            if artifacts and chosen:
                unread.append("a Dressage artifact tree")
            elif artifacts:
                # Its files are found, ordered and read together (analysis.artifacts).
                chosen = [Source(root, "artifacts", folder=True)]
                what = "the artifact tree"
            continue
        paths = found[kind]
        if paths and chosen:
            names = ", ".join(path.name for path in paths[:3]) + (", ..." if paths[3:] else "")
            unread.append(f"{counted(len(paths), kind + ' file')} ({names})")
        elif paths:
            # slime dumps are put in trainer-step order once read (_order_dumps).
            chosen = [Source(path, _file_format(path)) for path in paths]
            what = f"the {kind} file" if len(paths) == 1 else f"the {len(paths)} {kind} files"
    if not chosen:
        raise UnknownFormatError(
            f"{root}: a directory with no slime dumps (*.pt), no Dressage artifacts "
            "(<instance>/<session>/samples/<segment>.json), no *.jsonl and no *.parquet"
            + (f" (only links to files that are not there: {', '.join(broken)})" if broken else "")
            + "; point at the run's log folder or files"
        )
    warnings = []
    if broken:
        warnings.append(
            f"{root}: not read, as the files they link to are not there: {', '.join(broken)}"
        )
    if unread:
        warnings.append(
            f"{root}: read {what} only; also there and not read: {'; '.join(unread)} "
            "(pass those files explicitly to read them too, unless they hold the same run)"
        )
    return chosen, warnings


def _file_format(path: Path) -> Format:
    name = path.name.lower()
    if name.endswith(".json"):
        return "artifacts"  # one (pretty-printed) JSON document: an object or a list of them
    if name.endswith((".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz", ".json.gz")):
        return "jsonl"
    if name.endswith(".parquet"):
        return "parquet"
    if name.endswith((".arrow", ".ipc", ".feather")):
        return "ipc"
    if name.endswith((".pt", ".pkl", ".pickle")):
        return "pt"
    try:
        with path.open("rb") as handle:
            head = handle.read(8)
    except OSError:
        # Reading it will fail the same way, and say so where --on-bad-record skip applies.
        return "jsonl"
    if head.startswith(b"PAR1"):
        return "parquet"
    if head.startswith(b"ARROW1"):
        return "ipc"
    if head.startswith((ZIP_MAGIC, b"\x80")):
        return "pt"
    if head.startswith(b"\x1f\x8b") or head.lstrip()[:1] == b"{":
        return "jsonl"
    raise UnknownFormatError(
        f"{path}: unknown format (not JSONL, Parquet, Arrow IPC, or a slime .pt dump); "
        "give the file a .jsonl, .parquet, .arrow or .pt extension if it is one of those"
    )


# --------------------------------------------------------------------------- records


def _jsonl_records(path: Path) -> Iterator[tuple[int, Any]]:
    """Yield (line number, parsed object or the LogFormatError of an unparsable line)."""
    try:
        with path.open("rb") as probe:
            compressed = probe.read(2) == b"\x1f\x8b"
        # Lines of token-level logs run to megabytes: a large buffer saves re-copying them.
        with gzip.open(path, "rb") if compressed else open(path, "rb", buffering=1 << 22) as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    yield number, parse_json(line)
                except json.JSONDecodeError as exc:
                    # Yielded, not raised, so that --on-bad-record skip can go on reading.
                    # Past the line's own text: the record is cut short (or spans lines).
                    text = line.rstrip(b"\r\n").decode("utf-8", "replace")
                    at = (
                        json_problem(exc)
                        if exc.lineno == 1 and exc.pos < len(text)
                        else "the line ends before the record does ("
                        + (json_problem(exc) if exc.lineno == 1 else exc.msg)
                        + ")"
                    )
                    yield (
                        number,
                        LogFormatError(f"{path}:{number}: not valid JSON ({at})"),
                    )
    except (OSError, EOFError, UnicodeDecodeError, zlib.error) as exc:
        if isinstance(exc, FileNotFoundError):
            raise InputNotFoundError(f"{path}: no such file") from exc
        raise DamagedFileError(f"{path}: cannot be read as (gzipped) JSONL ({exc})") from exc


def _dump_samples(path: Path, *, trust_pickle: bool) -> tuple[int | None, list[Any]]:
    obj = load_pickled(path, trust_pickle=trust_pickle)
    if isinstance(obj, dict) and "samples" in obj:
        rollout_id = obj.get("rollout_id")
        if rollout_id is not None and (
            isinstance(rollout_id, bool) or not isinstance(rollout_id, int)
        ):
            raise LogFormatError(
                f"{path}: rollout_id must be an integer (found {short_repr(rollout_id)})"
            )
        samples = obj["samples"]
    elif isinstance(obj, list):
        rollout_id, samples = None, obj
    else:
        raise LogFormatError(
            f"{path}: expected {{'rollout_id': int, 'samples': [dict, ...]}} or a list of "
            f"sample dicts (found {type(obj).__name__})"
        )
    if not isinstance(samples, list):
        raise LogFormatError(f"{path}: 'samples' must be a list (found {type(samples).__name__})")
    return rollout_id, [_plain(s) for s in samples]


def _plain(value: Any) -> Any:
    """Turn tensors (from a trusted torch.load) into lists so fields read the same."""
    if hasattr(value, "tolist") and not isinstance(value, (list, dict, str)):
        return value.tolist()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _read_canonical(
    source: Source, extra: Sequence[str], columns: Sequence[str] | None = None
) -> pl.DataFrame:
    """A canonical Parquet or Arrow file as the canonical table; only ``columns`` (and
    the extra fields) are read when given."""
    extra = [path for path in extra if path not in CANONICAL_SCHEMA]
    unreadable = f"{source.path}: not a readable {source.format} file"
    try:
        file = _ArrowFile(source)
    except (Exception, pl.exceptions.PanicException) as exc:
        raise DamagedFileError(f"{unreadable} ({exc})") from exc
    present = file.columns
    missing = [c for c in (*REQUIRED_COLUMNS, *extra) if c not in present]
    if missing:
        raise MissingFieldError(
            f"{source.path}: not in the canonical layout: lacks {', '.join(missing)} "
            f"(columns: {', '.join(present)}); "
            + (
                "convert the run's log again with `dressage-replay convert --order-by FIELD` "
                "to keep an ordering field"
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
    for name in read:
        if name in CANONICAL_SCHEMA and not _fits(file.schema.field(name).type, name):
            raise LogFormatError(
                f"{source.path}: column {name} holds {file.schema.field(name).type} where the "
                f"canonical layout has {CANONICAL_SCHEMA[name]}; {_CANONICAL_ONLY}"
            )
    try:
        stored = file.read(read)
    # A damaged file can make polars panic (a BaseException), not only raise.
    except (Exception, pl.exceptions.PanicException) as exc:
        raise DamagedFileError(f"{unreadable} ({exc})") from exc
    try:
        frame = file.frame(stored)
        absent = {name: dtype for name, dtype in wanted.items() if name not in frame.columns}
        frame = frame.with_columns(
            pl.lit(None, dtype=dtype).alias(name) for name, dtype in absent.items()
        )
        if "source" in wanted:
            frame = frame.with_columns(pl.lit(str(source.path)).alias("source"))
        # Strict: a value that does not fit (an unsigned 2^63, say) is an error, not a null.
        frame = frame.select(*wanted, *extra).cast(wanted)  # type: ignore[arg-type]
    except (Exception, pl.exceptions.PanicException) as exc:  # values, not the file
        raise LogFormatError(f"{unreadable} ({exc})") from exc
    _check_counts(frame, source.path)
    return frame


_COUNT_COLUMNS = ("token_count", "response_length", "loss_mask_length", "log_prob_tokens")


def _check_counts(frame: pl.DataFrame, path: Path) -> None:
    """Token counts of a canonical file lie in 0..MAX_TOKENS, as a JSONL record's must:
    a negative or near-2^63 count (a bad writer, or bytes overwritten in an Arrow file,
    which has no checksums) would give negative totals."""
    for name in (c for c in _COUNT_COLUMNS if c in frame.columns):
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


_CANONICAL_ONLY = (
    "Parquet and Arrow files are read in the layout `dressage-replay convert` writes: "
    "write raw records as JSONL instead (polars: DataFrame.write_ndjson), and read or "
    "convert that"
)


def _fits(kind: pa.DataType, name: str) -> bool:
    """Whether a column of this Arrow type reads as the canonical column ``name``: an
    integer type for an integer column, any string type for a string one, exactly the
    span fields for ``version_spans``, and so on (all nulls fit anything). Checked before
    polars sees the data: some types (decimal256) make it panic, others (a struct where
    a number belongs) pass its cast and fail later, or silently (a span struct with
    other field names comes out as nulls)."""
    if pa.types.is_null(kind):
        return True
    if pa.types.is_dictionary(kind):  # as polars writes a Categorical, pandas a category
        return pa.types.is_integer(kind.index_type) and _fits(kind.value_type, name)
    expected = CANONICAL_SCHEMA[name]
    if name == "version_spans":
        if not (pa.types.is_list(kind) or pa.types.is_large_list(kind)):
            return False
        spans = kind.value_type
        return (
            pa.types.is_struct(spans)
            and sorted(field.name for field in spans) == ["end", "start", "version"]
            and _fits(spans.field("start").type, "record")
            and _fits(spans.field("end").type, "record")
            and _fits(spans.field("version").type, "group_id")
        )
    if expected == pl.String:
        return bool(
            pa.types.is_string(kind) or pa.types.is_large_string(kind) or _is_string_view(kind)
        )
    if expected == pl.Int64:  # floats too: pandas writes integers with nulls as floats
        return bool(pa.types.is_integer(kind) or pa.types.is_floating(kind))
    if expected == pl.Float64:
        return bool(pa.types.is_integer(kind) or pa.types.is_floating(kind))
    return bool(pa.types.is_boolean(kind))


def _is_string_view(kind: pa.DataType) -> bool:
    return kind == getattr(pa, "string_view", lambda: None)()


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
        else:
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
        with pa.ipc.open_file(self.path) as reader:
            table = reader.read_all().select(columns)
        table.validate(full=True)
        return table

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
        if _is_string_view(kind):
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


def _raw_records(
    source: Source, dumps: dict[Path, tuple[int | None, list[Any]]]
) -> Iterator[tuple[str, int, int | None, Any]]:
    """Yield (location, record number, file-level step, raw record) for one source."""
    if source.format == "jsonl":
        for number, record in _jsonl_records(source.path):
            yield f"{source.path}:{number}", number, None, record
    elif source.format == "artifacts":
        document = read_json_file(source.path)
        if isinstance(document, list):
            for number, record in enumerate(document, start=1):
                yield f"{source.path}: record {number}", number, None, record
        else:
            yield source.path.as_posix(), 1, None, document
    elif source.format == "pt":
        rollout_id, samples = dumps[source.path]
        for number, record in enumerate(samples, start=1):
            yield f"{source.path}: sample {number}", number, rollout_id, record


def load_logs(
    inputs: Sequence[str | Path],
    *,
    fields: FieldMap | None = None,
    extra_fields: Sequence[str] = (),
    on_bad_record: OnBadRecord = "fail",
    trust_pickle: bool = False,
    report: LoadReport | None = None,
    progress: Callable[[int, int], None] | None = None,
    columns: Sequence[str] | None = None,
) -> pl.DataFrame:
    """Read every input, in the order given, into the canonical table.

    ``extra_fields`` are dotted paths kept as extra columns of the same name (for
    ``--order-by``). Pass a :class:`LoadReport` to learn formats, skips and warnings;
    ``progress(files_done, files_total)`` is called after each file. ``columns`` keeps
    only those canonical columns (``analysis.REPLAY_COLUMNS`` is what a replay needs);
    Parquet and Arrow inputs then read nothing else.

    Examples
    --------
    >>> import analysis, tempfile, json, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "log.jsonl"
    >>> _ = path.write_text(json.dumps({"group_index": 0, "metadata": {
    ...     "parent_traj_id": "t0", "dressage_end_token_version": "v1"}}) + "\\n")
    >>> analysis.load_logs([path]).select("group_id", "trajectory_id", "end_version").row(0)
    ('0', 't0', 'v1')
    """
    report = report if report is not None else LoadReport()
    frames = list(
        iter_log_chunks(
            inputs, fields=fields, extra_fields=extra_fields, on_bad_record=on_bad_record,
            trust_pickle=trust_pickle, report=report, progress=progress, columns=columns,
        )
    )  # fmt: skip
    if not frames:
        table = _kept_columns(_rows_to_frame([], extra_fields, where=""), columns, extra_fields)
    else:
        table = _stacked(frames, "inputs")  # their kinds were checked as they came
        check_extra_fields(table, extra_fields, report)
    if table.height == 0:
        report.warnings.append(
            "no records were read"
            + (": every one was skipped" if report.skipped else " from the inputs")
        )
    return table


def check_extra_fields(
    table: pl.DataFrame, extra_fields: Sequence[str], report: LoadReport
) -> None:
    """Refuse an ordering field no record has; warn about records that lack it."""
    missing = {path: table[path].null_count() for path in extra_fields}
    report_missing_extra_fields(missing, table.height, report)


def report_missing_extra_fields(missing: dict[str, int], total: int, report: LoadReport) -> None:
    """Given null counts of extra fields over ``total`` records, refuse or warn."""
    for path, count in missing.items():
        if total and count == total:
            raise MissingFieldError(
                f"no record has the field {path!r}; name a field the log has "
                "(see `dressage-replay inspect`) or drop --order-by"
            )
        if count:
            report.warnings.append(
                f"{count} of {total} records lack {path!r}; their groups arrive after all others"
            )


def iter_log_chunks(
    inputs: Sequence[str | Path],
    *,
    fields: FieldMap | None = None,
    extra_fields: Sequence[str] = (),
    on_bad_record: OnBadRecord = "fail",
    trust_pickle: bool = False,
    report: LoadReport | None = None,
    progress: Callable[[int, int], None] | None = None,
    chunk_records: int = 50_000,
    columns: Sequence[str] | None = None,
) -> Iterator[pl.DataFrame]:
    """Yield the canonical table in chunks of at most ``chunk_records`` raw records.

    For JSONL, dumps and tables, memory stays bounded by a chunk (``convert`` writes
    each as it comes). An artifact folder is the exception: it is read whole before its
    first chunk, because arrival order needs every file's modification time, so its part
    of the table (spans, not token lists: about 230 bytes a segment file) is held whole.
    ``columns`` keeps only those canonical columns, as in :func:`load_logs`.
    """
    unknown = [name for name in columns or () if name not in CANONICAL_SCHEMA]
    if unknown:
        raise ValueError(f"not canonical columns: {', '.join(unknown)}")
    if columns is not None:  # an extra field that is a canonical column is kept too
        columns = [*columns, *(name for name in extra_fields if name in CANONICAL_SCHEMA)]
    chunks = _log_chunks(
        inputs, fields=fields, extra_fields=extra_fields, on_bad_record=on_bad_record,
        trust_pickle=trust_pickle, report=report, progress=progress,
        chunk_records=chunk_records, columns=columns,
    )  # fmt: skip
    kinds = _KindsSeen(extra_fields)
    for chunk in chunks:
        kinds.check(chunk, _where(chunk, "inputs"))
        yield _kept_columns(chunk, columns, extra_fields)


def _kept_columns(
    frame: pl.DataFrame, columns: Sequence[str] | None, extra: Sequence[str]
) -> pl.DataFrame:
    """The canonical ``columns`` of a frame (all when None) and the extra fields."""
    if columns is None:
        return frame
    extra = [path for path in extra if path not in CANONICAL_SCHEMA]
    return frame.select(*[name for name in CANONICAL_SCHEMA if name in columns], *extra)


def _log_chunks(
    inputs: Sequence[str | Path],
    *,
    fields: FieldMap | None,
    extra_fields: Sequence[str],
    on_bad_record: OnBadRecord,
    trust_pickle: bool,
    report: LoadReport | None,
    progress: Callable[[int, int], None] | None,
    chunk_records: int,
    columns: Sequence[str] | None,
) -> Iterator[pl.DataFrame]:
    fields = fields or FieldMap()
    report = report if report is not None else LoadReport()
    sources, warnings = detect_sources(inputs)
    report.sources += [source for source in sources if not source.folder]  # folders once read
    report.warnings += warnings
    times = Counter(source.path.resolve() for source in sources)
    report.warnings += [
        f"{path}: given {count} times, so its records are read {count} times; pass each input once"
        for path, count in times.items()
        if count > 1
    ]
    canonical = [s.path.name for s in sources if s.format in ("parquet", "ipc")]
    if canonical and fields != FieldMap():
        report.warnings.append(
            f"--field does not apply to canonical Parquet/Arrow input ({canonical[0]}"
            + (", ..." if len(canonical) > 1 else "")
            + "): its fields were found when it was converted; convert the log again with it"
        )

    def skip_or_raise(error: ReplayError) -> None:
        if on_bad_record == "fail":
            if isinstance(error, DamagedFileError):
                raise DamagedFileError(
                    f"{error}; check that the file is whole (copy it again) "
                    "or pass --on-bad-record skip"
                ) from error
            if isinstance(error, LogFormatError) and not isinstance(error, UnsafePickleError):
                raise LogFormatError(
                    f"{error}; fix the record or pass --on-bad-record skip"
                ) from error
            raise error
        report.skip(error)

    dumps: dict[Path, tuple[int | None, list[Any]]] = {}
    for source in [s for s in sources if s.format == "pt"]:
        if (unreadable := _unreadable(source.path)) is not None:
            skip_or_raise(unreadable)
            continue
        try:
            dumps[source.path] = _dump_samples(source.path, trust_pickle=trust_pickle)
        except UnsafePickleError:
            raise  # never skipped: the user must decide whether to trust the file
        except LogFormatError as error:
            skip_or_raise(error)
    sources = _order_dumps([s for s in sources if s.format != "pt" or s.path in dumps], dumps)

    rows: list[dict[str, Any]] = []
    for done, source in enumerate(sources, start=1):
        if progress is not None:
            progress(done - 1, len(sources))
        unreadable = None if source.folder or source.format == "pt" else _unreadable(source.path)
        if unreadable is not None:  # (dumps were checked as they were read)
            skip_or_raise(unreadable)
            continue
        if source.format in ("parquet", "ipc"):
            if rows:
                yield _rows_to_frame(rows, extra_fields, where=str(source.path))
                rows = []
            try:
                table = _read_canonical(source, extra_fields, columns)
            except LogFormatError as error:
                skip_or_raise(error)
                continue
            yield table
            continue
        if source.folder:
            if rows:
                yield _rows_to_frame(rows, extra_fields, where=str(source.path))
                rows = []
            within = None
            if progress is not None:
                # Instance folders count as parts of this one source.
                def within(part: int, parts: int, before: int = done - 1) -> None:
                    progress(before * parts + part, len(sources) * parts)

            folder = _FolderTable(extra_fields, where=str(source.path))
            files, warnings = read_artifact_folder(
                source.path, fields=fields, extra=extra_fields, on_chunk=folder.take,
                progress=within,
            )  # fmt: skip
            report.sources.append(dataclasses.replace(source, files=files))
            report.warnings += warnings
            for problem in folder.errors_in_order():
                skip_or_raise(problem)
            ordered = folder.table()
            if ordered is not None:
                yield ordered
            continue
        path_text = str(source.path)
        records = _raw_records(source, dumps)
        while True:
            # A file that breaks midway (a truncated .gz) keeps the records read before.
            try:
                where, number, file_step, record = next(records)
            except StopIteration:
                break
            except LogFormatError as error:
                skip_or_raise(error)
                break
            try:
                if isinstance(record, ReplayError):
                    raise record
                row = canonical_row(
                    record, fields=fields, where=where, file_step=file_step, extra=extra_fields
                )
            except (LogFormatError, MissingFieldError) as error:
                skip_or_raise(error)
                continue
            row["source"] = path_text
            row["record"] = number
            rows.append(row)
            if len(rows) >= chunk_records:
                yield _rows_to_frame(rows, extra_fields, where=str(source.path))
                rows = []
    if progress is not None:
        progress(len(sources), len(sources))
    if rows:
        yield _rows_to_frame(rows, extra_fields, where="inputs")


def _unreadable(path: Path) -> InputNotFoundError | None:
    """The error of an input file that cannot be opened (no permission, say), if any: one
    line and exit 3, where reading it would fail in a way of the format's own."""
    try:
        with open(path, "rb"):
            return None
    except FileNotFoundError:
        return InputNotFoundError(f"{path}: no such file; check the path")
    except OSError as exc:
        return InputNotFoundError(f"{path}: cannot read ({exc.strerror}); check its permissions")


class _FolderTable:
    """An artifact folder's results, turned into frames as they come and sorted at the end."""

    def __init__(self, extra: Sequence[str], *, where: str) -> None:
        self.extra, self.where = extra, where
        self.frames: list[pl.DataFrame] = []
        self.errors: list[tuple[int, str, int, ReplayError]] = []

    def take(self, chunk: Chunk) -> None:
        for stamp, path, number, kind, message in chunk.errors:
            self.errors.append((stamp, path, number, ERRORS[kind](message)))
        if chunk.row_stamps:
            frame = _columns_frame(chunk.rows, self.extra, where=self.where)
            self.frames.append(
                frame.with_columns(pl.Series(_MTIME, chunk.row_stamps, dtype=pl.Int64))
            )

    def errors_in_order(self) -> list[ReplayError]:
        return [error for *_, error in sorted(self.errors, key=lambda e: e[:3])]

    def table(self) -> pl.DataFrame | None:
        """All rows in arrival order: modification time, then path, then record number."""
        if not self.frames:
            return None
        table = _concat(self.frames, self.extra, self.where)
        return table.sort(_MTIME, "source", "record").drop(_MTIME)


_MTIME = "\x00mtime"


def _rows_to_frame(rows: list[dict[str, Any]], extra: Sequence[str], *, where: str) -> pl.DataFrame:
    return _columns_frame(row_columns(rows, extra), extra, where=where)


def _columns_frame(data: RowColumns, extra: Sequence[str], *, where: str) -> pl.DataFrame:
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
        "times or booleans, one kind in every record: pick another --order-by field"
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


class _KindsSeen:
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


def _where(frame: pl.DataFrame, fallback: str) -> str:
    """The file a chunk's first row came from, for a message."""
    if "source" in frame.columns and frame.height and frame["source"][0] is not None:
        return str(frame["source"][0])
    return fallback


def _concat(frames: list[pl.DataFrame], extra: Sequence[str], where: str) -> pl.DataFrame:
    """The frames one under the other; an extra field must be of one kind in all of them."""
    kinds = _KindsSeen(extra)
    for frame in frames:
        kinds.check(frame, _where(frame, where))
    return _stacked(frames, where)


def _stacked(frames: list[pl.DataFrame], where: str) -> pl.DataFrame:
    try:
        return pl.concat(frames, how="vertical_relaxed")
    except pl.exceptions.PolarsError as exc:
        raise LogFormatError(f"{where}: files disagree on column types ({exc})") from exc


def _spans_column(data: RowColumns) -> pl.Series:
    """Build the spans column from flat Arrow arrays (a list of dicts per row is much slower)."""
    values = pa.StructArray.from_arrays(
        [
            pa.array(data.span_starts, pa.int64()),
            pa.array(data.span_ends, pa.int64()),
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


def _order_dumps(
    sources: list[Source], dumps: dict[Path, tuple[int | None, list[Any]]]
) -> list[Source]:
    """Put each run of consecutive slime dumps in rollout_id order; other files stay as given."""
    ordered: list[Source] = []
    run: list[Source] = []
    for source in [*sources, None]:
        if source is not None and source.format == "pt":
            run.append(source)
            continue
        run.sort(key=lambda s: (dumps[s.path][0] is None, dumps[s.path][0] or 0, str(s.path)))
        ordered += run
        run = []
        if source is not None:
            ordered.append(source)
    return ordered


def records_to_table(
    records: Sequence[dict[str, Any]],
    *,
    fields: FieldMap | None = None,
    extra_fields: Sequence[str] = (),
    source: str = "<records>",
    first_record: int = 1,
) -> pl.DataFrame:
    """Build the canonical table from raw record dicts already in memory (a notebook's list)."""
    fields = fields or FieldMap()
    rows = []
    for number, record in enumerate(records, start=first_record):
        row = canonical_row(
            record, fields=fields, where=f"{source}: record {number}", extra=extra_fields
        )
        row["source"] = source
        row["record"] = number
        rows.append(row)
    return _rows_to_frame(rows, extra_fields, where=source)
