"""What a log format is (:class:`Format`), and the :class:`Reading` every format reads into.

A format is one typed object in its own folder (``analysis/formats/<format>/format.py``),
listed once in :mod:`analysis.formats.registry`: its name, how a file is recognised as it,
what it cannot tell, and how it reads a source into canonical chunks. A load hands each
source to its format's :meth:`Format.read` with the load's :class:`Reading`, which holds
the options, gathers record-by-record rows into chunks and skips or raises bad input the
same way for every format.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import polars as pl

from analysis.errors import (
    DamagedFileError,
    LogFormatError,
    MissingFieldError,
    ReplayError,
    UnsafePickleError,
    setting,
)
from analysis.formats.fields import canonical_row
from analysis.formats.frames import rows_to_frame
from analysis.formats.load_report import LoadReport
from analysis.formats.source import Source
from analysis.table.limits import LimitError, printable
from analysis.table.options import ReadOptions

_SKIP = setting("on_bad_record", "skip")

CHUNK_SPANS = 1 << 20
"""Spans held as rows before they are made a table chunk, as with ``chunk_records``
records: a record can hold a span a token (alternating versions)."""

RawRecords = Generator[tuple[str, int, int | None, Any], None, int]
"""(location, record number, file-level step, raw record) of one source; returns the
lines a JSONL file or piece held (0 for other formats)."""

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class Format:
    """One log format: subclassed once per format, in that format's folder.

    ``name`` is the ``--format`` value and :attr:`Source.format`; ``described`` names a file
    read as it in a message ("a verl log"); ``endings`` are the (lower-case) file-name
    endings read as it; ``magic`` the leading bytes that say a file of no known ending is
    it. ``fields_unused`` says, when ``--field`` does not apply to it, what its files are
    and why (None: it applies); ``no_versions`` why a replay of it has nothing to act on
    ("": its logs carry weight versions); ``cannot_tell`` what its logs cannot tell, a
    line each (``inspect``).
    """

    name: str
    described: str
    endings: tuple[str, ...] = ()
    magic: tuple[bytes, ...] = ()
    fields_unused: tuple[str, str] | None = None
    no_versions: str = ""
    cannot_tell: tuple[str, ...] = ()
    folder_kind: str | None = None
    """The kind of file a folder's logs of it are looked for as ("JSONL"; files of one kind
    are read together), None when a folder's files are not searched for it."""
    folder_rank: int = 50
    """Where its kind stands when a folder holds several (the lowest is read, the others
    named in a warning)."""
    step_offset: int = 0
    """A trainer step ``s`` of its logs trains weight version ``s - step_offset``."""
    reads_alone: bool = False
    """Each file of it reads to the same rows alone as among the others (no order across
    files, no state): a partitioned conversion makes it a unit of its own."""
    cut_in_pieces: ClassVar[bool] = False
    """A large plain file of it can be read a byte range at a time (``read_piece``)."""
    peer: ClassVar[bool] = False
    """Another system's log (its display name is :attr:`display`)."""

    @property
    def display(self) -> str:
        """The format's name as its users write it (AReaL, NeMo-RL)."""
        return self.name

    def sniff(self, head: bytes) -> bool:
        """Whether a file of no known ending is of this format, by its first 8 bytes."""
        return bool(self.magic) and head.startswith(self.magic)

    def versionless(self) -> str | None:
        """The warning that a replay of its logs has nothing to act on (no weight versions),
        None when they carry them."""
        return f"{self.name} log: {self.no_versions}" if self.no_versions else None

    def table_notes(self, table: pl.DataFrame) -> tuple[str, ...]:
        """What a table read from its logs cannot tell, counted (``inspect``)."""
        return ()

    def arrange(self, sources: list[Source], reading: Reading) -> list[Source]:
        """The sources in the order they are read: as given, unless the format's order is
        inside its files (slime dumps)."""
        return sources

    def opened_on_arrival(self) -> bool:
        """Whether :meth:`arrange` has already opened every source (so the load need not
        check again that each can be read)."""
        return False

    def read(
        self, source: Source, reading: Reading, before: int, total: int
    ) -> Iterator[pl.DataFrame]:
        """The canonical chunks of one source, the ``before``-th of ``total``; bad input
        goes to :meth:`Reading.skip_or_raise`."""
        raise NotImplementedError(f"{self.name}: a format must say how it reads a source")


class Reading:
    """One load: the options, the report, the rows of record-by-record formats gathered
    into chunks, bad input skipped or raised."""

    def __init__(
        self,
        options: ReadOptions,
        report: LoadReport,
        formats: Mapping[str, Format],
        *,
        read_as: Callable[[Path], str] | None = None,
    ) -> None:
        self.options, self.report, self.formats = options, report, formats
        self.rows: list[dict[str, Any]] = []
        self.spans = 0  # held in self.rows
        self.read_as = read_as
        """The format a file would be read as, unless told (for :meth:`forced`)."""
        self.held: dict[str, dict[Path, Any]] = {}
        """What a format learned of its sources in :meth:`Format.arrange`, by format."""

    def within(self, before: int, total: int) -> Progress | None:
        """Progress within one source, counted in per mille of the file's bytes."""
        progress = self.options.progress
        if progress is None:
            return None

        def within(done: int, size: int) -> None:
            progress(before * 1000 + done * 1000 // size, total * 1000)

        return within

    def versionless(self, names: Iterable[str]) -> list[str]:
        """One warning per format of these whose logs carry no weight versions (verl,
        NeMo-RL): a replay of them has nothing to act on, whatever its settings."""
        found = (self.formats[name] for name in dict.fromkeys(names) if name in self.formats)
        return [warning for fmt in found if (warning := fmt.versionless()) is not None]

    def skip_or_raise(self, error: ReplayError) -> None:
        """Count ``error`` as skipped (``on_bad_record="skip"``), or raise it with what to
        do, kept apart from what is wrong (:meth:`ReplayError.advised`)."""
        if self.options.on_bad_record == "skip":
            self.report.skip(error)
            return
        if isinstance(error, LimitError):
            raise LimitError.advised(error.message, ", or pass " + _SKIP) from error
        if isinstance(error, DamagedFileError):
            raise DamagedFileError.advised(
                error.message, "; check that the file is whole (copy it again) or pass " + _SKIP
            ) from error
        if isinstance(error, LogFormatError) and not isinstance(error, UnsafePickleError):
            raise LogFormatError.advised(
                error.message, "; fix the record or pass " + _SKIP
            ) from error
        raise error

    def forced(self, error: ReplayError, source: Source) -> ReplayError:
        """The first record of a file read as a format it was told to be read as, which
        that format's reader refuses: most likely the wrong format, said with the one the
        file would be read as (not "fix the record": every record would fail alike)."""
        if self.options.log_format is None or self.options.on_bad_record == "skip":
            return error
        if isinstance(error, LimitError) or self.read_as is None:  # unread: tells nothing
            return error
        try:
            found = self.read_as(source.path)
        except ReplayError:
            return error
        if found == source.format:
            return error
        told, own = (self.formats[name].described for name in (source.format, found))
        raise type(error)(  # its own exit code
            error.base + f"; {source.path} is probably not "
            f"{told} (its first record reads as {own}): leave out " + setting("log_format") + " or "
            "give the file's own format"
        ) from error

    def flush(self, where: str) -> Iterator[pl.DataFrame]:
        """The rows gathered so far, as one chunk."""
        if self.rows:
            yield rows_to_frame(self.rows, self.options.extra_fields, where=where)
            self.rows, self.spans = [], 0

    def take(self, row: dict[str, Any], where: str) -> Iterator[pl.DataFrame]:
        """Gather one canonical row; a chunk once enough records or spans are held."""
        self.rows.append(row)
        self.spans += len(row.get("version_spans") or ())
        if len(self.rows) >= self.options.chunk_records or self.spans >= CHUNK_SPANS:
            yield from self.flush(where)

    def records(
        self, source: Source, records: RawRecords
    ) -> Generator[pl.DataFrame, None, int | None]:
        """A file read record by record (a JSONL file or piece, a JSON document, a dump),
        each raw record mapped to a canonical row; returns the lines read (None when the
        file could not be read to its end: the pieces after it are not read, as one process
        reading the file stops where it breaks)."""
        path_text = printable(str(source.path))
        options = self.options
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
                self.skip_or_raise(self.forced(error, source) if number == 1 else error)
                continue
            row["source"] = path_text
            row["record"] = number
            yield from self.take(row, path_text)
        return lines
