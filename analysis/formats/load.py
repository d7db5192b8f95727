"""Load rollout logs of every supported format into one canonical table (docs/semantics.md §1).

One row per record (one segment of one trajectory). Token versions are kept only as
run-length spans; an end version derived from them is flagged.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from analysis.errors import (
    DamagedFileError,
    InputNotFoundError,
    LogFormatError,
    Message,
    MissingFieldError,
    ReplayError,
    SkipReason,
    UnsafePickleError,
    setting,
)
from analysis.formats.canonical.reader import read_canonical, source_formats
from analysis.formats.discover import Source, detect_sources, read_as, unreadable_error
from analysis.formats.dressage.artifacts import read_artifact_folder
from analysis.formats.fields import (
    FieldMap,
    canonical_row,
)
from analysis.formats.frames import (
    FolderTable,
    KindsSeen,
    columns_frame,
    rows_to_frame,
    stacked,
    where_from,
)
from analysis.formats.peer_records import at
from analysis.formats.peers import PEER_FORMATS, peer_rows, peer_warnings
from analysis.formats.slime_dumps.reader import dump_rollout_id, dump_samples, order_dumps
from analysis.formats.text.jsonl import jsonl_records, read_json_file
from analysis.formats.text.jsonl_parts import Piece, read_in_pieces, split_wanted
from analysis.formats.text.lean import LeanPlan, lean_plan
from analysis.table.limits import LimitError, Limits, printable
from analysis.table.options import ReadOptions
from analysis.table.schema import (
    CANONICAL_SCHEMA,
)


@dataclass
class LoadReport:
    """What loading saw besides the records: formats, skipped records, warnings."""

    sources: list[Source] = field(default_factory=list)
    skipped: Counter[SkipReason] = field(default_factory=Counter)
    """How many were skipped, by reason (the keys of ``skipped`` in ``--json``)."""
    skipped_where: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    converted_from: list[str] = field(default_factory=list)
    """The formats converted files (Parquet/Arrow) were read from, as their metadata
    says (``analysis.formats.canonical.reader.source_formats``), each once."""

    @property
    def formats(self) -> list[str]:
        return sorted({s.format for s in self.sources})

    @property
    def files(self) -> int:
        """How many input files were read (every segment file of an artifact folder counts)."""
        return sum(source.files for source in self.sources)

    def skip(self, error: ReplayError) -> None:
        self.skipped[error.skip_reason] += 1
        if len(self.skipped_where) < 5:
            self.skipped_where.append(Message(error.raw))


# --------------------------------------------------------------------------- discovery


# --------------------------------------------------------------------------- records


def load_logs(
    inputs: Sequence[str | Path] | str | Path,
    options: ReadOptions | None = None,
    *,
    report: LoadReport | None = None,
    **settings: Any,
) -> pl.DataFrame:
    """Read every input, in the order given, into the canonical table.

    ``options`` says how (:class:`ReadOptions`); its settings can also be given as
    keywords (``on_bad_record="skip"``). Pass a :class:`LoadReport` to learn formats,
    skips and warnings.

    Examples
    --------
    >>> import analysis, tempfile, json, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "log.jsonl"
    >>> _ = path.write_text(json.dumps({"group_index": 0, "metadata": {
    ...     "parent_traj_id": "t0", "dressage_end_token_version": "v1"}}) + "\\n")
    >>> analysis.load_logs([path]).select("group_id", "trajectory_id", "end_version").row(0)
    ('0', 't0', 'v1')
    """
    options = ReadOptions.of(options, **settings)
    report = report if report is not None else LoadReport()
    frames = list(iter_log_chunks(_listed(inputs), options, report=report))
    extra = options.extra_fields
    if not frames:
        table = _kept_columns(rows_to_frame([], extra, where=""), options.columns, extra)
    else:
        table = stacked(frames, "inputs")  # their kinds were checked as they came
        check_extra_fields(table, extra, report)
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
                f"(see `dressage-replay inspect`) or drop {setting('order_by')}"
            )
        if count:
            report.warnings.append(
                f"{count} of {total} records lack {path!r}; their groups arrive after all others"
            )


def iter_log_chunks(
    inputs: Sequence[str | Path] | str | Path,
    options: ReadOptions | None = None,
    *,
    report: LoadReport | None = None,
    **settings: Any,
) -> Iterator[pl.DataFrame]:
    """Yield the canonical table in chunks of at most ``options.chunk_records`` raw records.

    For JSONL, dumps and tables, memory stays bounded by a chunk (``convert`` writes
    each as it comes). An artifact folder is the exception: it is read whole before its
    first chunk, because arrival order needs every file's modification time, so its part
    of the table (spans, not token lists: about 230 bytes a segment file) is held whole.
    So is the part of a large JSONL file that the helper process reads (see
    :mod:`analysis.formats.text.jsonl_parts`), until this process has read its own part.
    """
    options = ReadOptions.of(options, **settings)
    columns = options.columns
    if columns is not None:  # an extra field that is a canonical column is kept too
        columns = (*columns, *(name for name in options.extra_fields if name in CANONICAL_SCHEMA))
        options = dataclasses.replace(options, columns=columns)
    reading = _Reading(options, report if report is not None else LoadReport())
    inputs = _listed(inputs)
    kinds = KindsSeen(options.extra_fields)
    for chunk in reading.chunks(inputs):
        kinds.check(chunk, where_from(chunk, "inputs"))
        yield _kept_columns(chunk, columns, options.extra_fields)


def iter_piece_chunks(
    path: str | Path, piece: Piece, options: ReadOptions, *, report: LoadReport
) -> Iterator[pl.DataFrame]:
    """The canonical chunks of one piece of a JSONL file (lines ``piece.first_line`` on,
    bytes ``piece.start`` to ``piece.stop``), numbered and checked as a whole read of the
    file numbers and checks them: a partitioned conversion's unit (analysis.output.partitioned)."""
    reading = _Reading(options, report)
    source = Source(Path(path), "jsonl")
    report.sources.append(source)
    yield from reading._records(source, 0, 1, piece)
    yield from reading._flush(str(path))


def _listed(inputs: Sequence[str | Path] | str | Path) -> Sequence[str | Path]:
    """One path given alone, as a notebook user writes it, is a list of one (a string is
    a sequence too: its characters would be read as paths)."""
    return [inputs] if isinstance(inputs, (str, Path)) else inputs


def _kept_columns(
    frame: pl.DataFrame, columns: Sequence[str] | None, extra: Sequence[str]
) -> pl.DataFrame:
    """The canonical ``columns`` of a frame (all when None) and the extra fields."""
    if columns is None:
        return frame
    extra = [path for path in extra if path not in CANONICAL_SCHEMA]
    return frame.select(*[name for name in CANONICAL_SCHEMA if name in columns], *extra)


CHUNK_SPANS = 1 << 20
"""Spans held as rows before they are made a table chunk, as with ``chunk_records``
records: a record can hold a span a token (alternating versions)."""


class _Reading:
    """One load: the sources in arrival order, each read by the reader of its format, the
    rows of record-by-record formats gathered into chunks, bad input skipped or raised."""

    def __init__(self, options: ReadOptions, report: LoadReport) -> None:
        self.options, self.report = options, report
        self.rows: list[dict[str, Any]] = []
        self.spans = 0  # held in self.rows
        self.dump_ids: dict[Path, int | None] = {}  # each dump's rollout_id, to order them

    def chunks(self, inputs: Sequence[str | Path]) -> Iterator[pl.DataFrame]:
        sources = self._sources(inputs)
        progress = self.options.progress
        readers = {"parquet": self._canonical, "ipc": self._canonical}
        readers.update(dict.fromkeys(PEER_FORMATS, self._peer))
        for done, source in enumerate(sources, start=1):
            if progress is not None:
                progress(done - 1, len(sources))
            if source.folder:
                reader = self._folder
            elif (unreadable := self._unreadable(source)) is not None:
                self.skip_or_raise(unreadable)
                continue
            else:
                reader = readers.get(source.format, self._records)
            yield from reader(source, done - 1, len(sources))
        if progress is not None:
            progress(len(sources), len(sources))
        yield from self._flush("inputs")

    def _sources(self, inputs: Sequence[str | Path]) -> list[Source]:
        """The sources in arrival order, with the warnings their list deserves; dumps are
        read first, since their order comes from inside them."""
        report = self.report
        sources, warnings = detect_sources(
            inputs, include_eval=self.options.include_eval, log_format=self.options.log_format
        )
        report.sources += [source for source in sources if not source.folder]  # folders once read
        report.warnings += warnings
        times = Counter(source.path.resolve() for source in sources)
        report.warnings += [
            f"{path}: given {count} times, so its records are read {count} times; "
            "pass each input once"
            for path, count in times.items()
            if count > 1
        ]
        canonical = [s.path.name for s in sources if s.format in ("parquet", "ipc")]
        peers = [s.path.name for s in sources if s.format in PEER_FORMATS]
        report.warnings += peer_warnings(s.format for s in sources)
        if peers and self.options.fields != FieldMap():
            report.warnings.append(
                Message(
                    f"{setting('fields')} does not apply to other systems' logs ({peers[0]}"
                    + (", ..." if len(peers) > 1 else "")
                    + "): their fields are mapped as docs/semantics.md says (Other systems' logs)"
                )
            )
        if canonical and self.options.fields != FieldMap():
            report.warnings.append(
                Message(
                    f"{setting('fields')} does not apply to canonical Parquet/Arrow input "
                    f"({canonical[0]}"
                    + (", ..." if len(canonical) > 1 else "")
                    + "): its fields were found when it was converted; convert the log again "
                    "with it"
                )
            )
        for source in [s for s in sources if s.format == "pt"]:
            if (unreadable := unreadable_error(source.path)) is not None:
                self.skip_or_raise(unreadable)
                continue
            try:
                self.dump_ids[source.path] = dump_rollout_id(
                    source.path, trust_pickle=self.options.trust_pickle,
                    limits=self.options.limits,
                )  # fmt: skip
            except UnsafePickleError:
                raise  # never skipped: the user must decide whether to trust the file
            except LogFormatError as error:
                self.skip_or_raise(error)
        read = [s for s in sources if s.format != "pt" or s.path in self.dump_ids]
        return order_dumps(read, self.dump_ids)

    def _unreadable(self, source: Source) -> InputNotFoundError | None:
        # (dumps were checked as they were read)
        return None if source.format == "pt" else unreadable_error(source.path)

    def skip_or_raise(self, error: ReplayError) -> None:
        if self.options.on_bad_record == "skip":
            self.report.skip(error)
            return
        if isinstance(error, LimitError):
            raise LimitError(f"{error.raw}, or pass {setting('on_bad_record', 'skip')}") from error
        if isinstance(error, DamagedFileError):
            raise DamagedFileError(
                f"{error.raw}; check that the file is whole (copy it again) "
                f"or pass {setting('on_bad_record', 'skip')}"
            ) from error
        if isinstance(error, LogFormatError) and not isinstance(error, UnsafePickleError):
            raise LogFormatError(
                f"{error.raw}; fix the record or pass {setting('on_bad_record', 'skip')}"
            ) from error
        raise error

    def _forced(self, error: ReplayError, source: Source) -> ReplayError:
        """The first record of a file read as a format it was told to be read as, which
        that format's reader refuses: most likely the wrong format, said with the one the
        file would be read as (not "fix the record": every record would fail alike)."""
        if self.options.log_format is None or self.options.on_bad_record == "skip":
            return error
        if isinstance(error, LimitError):  # unread: it tells nothing of the format
            return error
        try:
            found = read_as(source.path)
        except ReplayError:
            return error
        if found == source.format:
            return error
        told, own = (_KINDS.get(name, f"a {name} file") for name in (source.format, found))
        raise type(error)(  # its own exit code
            f"{error.raw.split('; fix the record')[0]}; {source.path} is probably not "
            f"{told} (its first record reads as {own}): leave out {setting('log_format')} or "
            "give the file's own format"
        ) from error

    def _flush(self, where: str) -> Iterator[pl.DataFrame]:
        if self.rows:
            yield rows_to_frame(self.rows, self.options.extra_fields, where=where)
            self.rows, self.spans = [], 0

    def _canonical(self, source: Source, before: int, total: int) -> Iterator[pl.DataFrame]:
        yield from self._flush(str(source.path))
        try:
            table = read_canonical(
                source, self.options.extra_fields, self.options.columns, self.options.limits
            )
        except LogFormatError as error:
            self.skip_or_raise(error)
            return
        new = [name for name in source_formats(source) if name not in self.report.converted_from]
        self.report.converted_from += new
        self.report.warnings += peer_warnings(new)  # as when the source itself is read
        yield table

    def _folder(self, source: Source, before: int, total: int) -> Iterator[pl.DataFrame]:
        yield from self._flush(str(source.path))
        progress, within = self.options.progress, None
        if progress is not None:
            # Instance folders count as parts of this one source.
            def within(part: int, parts: int) -> None:
                progress(before * parts + part, total * parts)

        extra = self.options.extra_fields
        folder = FolderTable(extra, where=str(source.path))
        ties: list[str] = []
        files, warnings = read_artifact_folder(
            source.path, fields=self.options.fields, extra=extra, on_chunk=folder.take,
            progress=within, tie_warnings=ties, limits=self.options.limits,
        )  # fmt: skip
        self.report.sources.append(dataclasses.replace(source, files=files))
        self.report.warnings += warnings
        for problem in folder.errors_in_order():
            self.skip_or_raise(problem)
        ordered = folder.table()
        if ordered is not None:
            if not folder.by_completion:
                untimed = f"{folder.untimed:,} of {ordered.height:,} records"
                self.report.warnings += [_by_modification_time(source.path, untimed), *ties]
            yield ordered

    def _peer(self, source: Source, before: int, total: int) -> Iterator[pl.DataFrame]:
        """A file of another system's log (analysis.formats.peers), line by line."""
        path_text, within = str(source.path), None
        if (progress := self.options.progress) is not None:
            # The file's bytes as parts of this one source (per mille), as for JSONL.
            def within(done: int, size: int) -> None:
                progress(before * 1000 + done * 1000 // size, total * 1000)

        lines = jsonl_records(source.path, self.options.limits, progress=within)
        items = peer_rows(source.format, source.path, lines)
        extra = [name for name in self.options.extra_fields if name not in CANONICAL_SCHEMA]
        first = True
        while True:
            try:  # a file that breaks midway keeps the records read before
                number, record, row = next(items)
            except StopIteration:
                break
            except LogFormatError as error:
                self.skip_or_raise(self._forced(error, source) if first else error)
                break
            if isinstance(row, ReplayError):
                self.skip_or_raise(self._forced(row, source) if first else row)
                first = False
                continue
            first = False
            for name in extra:
                row[name] = at(record, name)
            row["source"], row["record"] = path_text, number
            self.rows.append(row)
            self.spans += len(row.get("version_spans") or ())
            if len(self.rows) >= self.options.chunk_records or self.spans >= CHUNK_SPANS:
                yield from self._flush(path_text)

    def _records(
        self, source: Source, before: int, total: int, part: Piece | None = None
    ) -> Generator[pl.DataFrame, None, int | None]:
        """A file read record by record (JSONL, a JSON document, a dump); a large JSONL
        file on two cores (:mod:`analysis.formats.text.jsonl_parts`), ``part`` one piece of it
        (then returns the number of lines the piece holds, or None when the file could
        not be read to the piece's end: its lines are not known, and the pieces after it
        are not read, as one process reading the file stops where it breaks)."""
        path_text = printable(str(source.path))
        options = self.options
        if part is None and source.format == "jsonl":
            size = _size(source.path)
            if size is not None and split_wanted(source.path, size):
                yield from read_in_pieces(
                    source.path, size, options,
                    read_here=lambda piece: self._records(source, before, total, piece),
                    flush=lambda: self._flush(path_text), warn=self.report.warnings.append,
                    frame_of=lambda data: columns_frame(data, options.extra_fields, where=path_text),
                    renumber=lambda frame, lines: frame.with_columns(pl.col("record") + lines),
                )  # fmt: skip
                return 0
        within = None
        if (progress := options.progress) is not None and part is None:
            # The file's bytes as parts of this one source (per mille).
            def within(done: int, size: int) -> None:
                progress(before * 1000 + done * 1000 // size, total * 1000)

        lean = lean_plan(options.fields, options.extra_fields, options.limits.max_spans)
        records = _raw_records(
            source, self.dump_ids, trust_pickle=options.trust_pickle, limits=options.limits,
            progress=within, part=part, lean=lean,
        )  # fmt: skip
        lines = 0
        while True:
            # A file that breaks midway (a truncated .gz) keeps the records read before.
            try:
                where, number, file_step, record = next(records)
            except StopIteration as end:
                lines = end.value or 0
                break
            except LogFormatError as error:  # (the file cannot be read on)
                self.skip_or_raise(error)
                return None
            try:
                if isinstance(record, ReplayError):
                    raise record
                row = canonical_row(
                    record, fields=options.fields, where=where, file_step=file_step,
                    extra=options.extra_fields, limits=options.limits,
                )  # fmt: skip
            except (LogFormatError, MissingFieldError) as error:
                self.skip_or_raise(self._forced(error, source) if number == 1 else error)
                continue
            row["source"] = path_text
            row["record"] = number
            self.rows.append(row)
            self.spans += len(row["version_spans"] or ())
            if len(self.rows) >= options.chunk_records or self.spans >= CHUNK_SPANS:
                yield from self._flush(path_text)
        return lines


_KINDS = {
    "prime-rl": "a prime-rl log", "areal": "an AReaL log", "verl": "a verl log",
    "nemo-rl": "a NeMo-RL log", "jsonl": "a JSONL log of Dressage or slime records",
}  # fmt: skip
"""What a file read as each format is, in a message."""


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None  # said where the file is read


def _by_modification_time(folder: Path, untimed: str) -> Message:
    """Artifact files ordered by modification time: a copy or a checkout reorders them."""
    return Message(
        f"{folder}: {untimed} carry no completion time "
        "(metadata.proxy_extra_info.timestamp), so the artifact files arrive in order of "
        "modification time, which a copy or a checkout changes; pass "
        f"{setting('order_by')} with a completion-time field if the log has one"
    )


def _raw_records(
    source: Source, dump_ids: dict[Path, int | None], *, trust_pickle: bool, limits: Limits,
    progress: Callable[[int, int], None] | None = None, part: Piece | None = None,
    lean: LeanPlan | None = None,
) -> Generator[tuple[str, int, int | None, Any], None, int]:  # fmt: skip
    """Yield (location, record number, file-level step, raw record) for one source (of a
    JSONL file, the lines of ``part`` only when given); return the lines of a JSONL file
    read (0 for other formats)."""
    if source.format == "jsonl":
        lines = None if part is None else (part.start, part.stop, part.first_line)
        records = jsonl_records(source.path, limits, progress=progress, part=lines, lean=lean)
        while True:
            try:
                number, record = next(records)
            except StopIteration as end:
                return int(end.value)  # the lines read, for a piece's successor's numbers
            yield f"{source.path}:{number}", number, None, record
    elif source.format == "artifacts":
        document = read_json_file(source.path, limits)
        if isinstance(document, list):
            for number, record in enumerate(document, start=1):
                yield f"{source.path}: record {number}", number, None, record
        else:
            yield source.path.as_posix(), 1, None, document
    elif source.format == "pt":
        # Read now, in rollout_id order: one dump's samples in memory at a time.
        rollout_id, samples = dump_samples(source.path, trust_pickle=trust_pickle, limits=limits)
        if rollout_id != dump_ids[source.path]:  # only a dict that repeats the key
            raise LogFormatError(
                f"{source.path}: the dump gives rollout_id twice ({dump_ids[source.path]} "
                f"and {rollout_id}); save it with one"
            )
        for number, record in enumerate(samples, start=1):
            yield f"{source.path}: sample {number}", number, rollout_id, record
    return 0


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
    return rows_to_frame(rows, extra_fields, where=source)
