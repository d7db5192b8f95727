"""Other systems' logs (prime-rl, AReaL, verl, NeMo-RL) as formats: what each one's
:class:`PeerFormat` holds, and how a file of one is read (docs/semantics.md, "Other
systems' logs"). Each system's reader is a folder of its own
(``analysis/formats/<system>/``: ``reader.py`` maps its records, ``format.py`` says what
the format is); which system a file or folder is, is found in :mod:`analysis.formats.discover`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

import polars as pl

from analysis.errors import LogFormatError, ReplayError
from analysis.formats.peer_records import PeerItem, at
from analysis.formats.reading import Format, Reading
from analysis.formats.source import Source
from analysis.formats.text.jsonl import jsonl_records
from analysis.table.schema import CANONICAL_SCHEMA

FIELDS_UNUSED = (
    "other systems' logs",
    "their fields are mapped as docs/semantics.md says (Other systems' logs)",
)

Tree = Callable[[Path, str | None, Callable[[Path], str | None]], tuple[list[Path], str] | None]
"""A folder laid out as the system lays out its log (root, the format told, the probe of a
file's system): the files read in arrival order and a note of what was read; else None."""


class PeerReader(Protocol):
    """What a system's ``reader`` module gives its format (:meth:`PeerFormat.of`)."""

    @property
    def NAME(self) -> str: ...
    @property
    def KEYS(self) -> frozenset[str]: ...
    @property
    def NO_VERSIONS(self) -> str: ...
    @property
    def LIMITS(self) -> tuple[str, ...]: ...
    def rows(self, path: Path, records: Iterable[tuple[int, Any]]) -> Iterator[PeerItem]: ...


@dataclass(frozen=True)
class PeerFormat(Format):
    """Another system's JSONL log: its records' keys tell it apart (``keys``: every key
    its writer always writes), ``rows`` maps one file's records to canonical rows,
    ``file_order`` gives the step or version a file's name holds (files are read in its
    order), ``names_files`` says a flat folder's files of this log are all so named, and
    ``tree`` finds the system's own folder layout."""

    users_name: str = ""
    keys: frozenset[str] = frozenset()
    rows: Callable[[Path, Iterable[tuple[int, Any]]], Iterator[PeerItem]] | None = None
    file_order: Callable[[Path], Any] | None = None
    names_files: bool = False
    tree: Tree | None = None
    notes: Callable[[pl.DataFrame], tuple[str, ...]] | None = None
    peer: ClassVar[bool] = True

    @property
    def display(self) -> str:
        return self.users_name or self.name

    @classmethod
    def of(
        cls,
        reader: PeerReader,
        *,
        described: str,
        users_name: str,
        file_order: Callable[[Path], Any],
        names_files: bool = False,
        tree: Tree | None = None,
        notes: Callable[[pl.DataFrame], tuple[str, ...]] | None = None,
        step_offset: int = 0,
    ) -> PeerFormat:
        """The format of a system whose ``reader`` module gives its ``NAME``, record
        ``KEYS``, ``NO_VERSIONS``, ``LIMITS`` and ``rows``."""
        return cls(
            name=reader.NAME,
            described=described,
            fields_unused=FIELDS_UNUSED,
            no_versions=reader.NO_VERSIONS,
            cannot_tell=reader.LIMITS,
            users_name=users_name,
            keys=reader.KEYS,
            rows=reader.rows,
            file_order=file_order,
            names_files=names_files,
            tree=tree,
            notes=notes,
            step_offset=step_offset,
        )

    def table_notes(self, table: pl.DataFrame) -> tuple[str, ...]:
        return () if self.notes is None or table.height == 0 else self.notes(table)

    def read(
        self, source: Source, reading: Reading, before: int, total: int
    ) -> Iterator[pl.DataFrame]:
        """A file of the log, line by line."""
        assert self.rows is not None, f"{self.name}: a peer format maps its records"
        path_text = str(source.path)
        within = reading.within(before, total)
        lines = jsonl_records(source.path, reading.options.limits, progress=within)
        items = self.rows(source.path, lines)
        extra = [n for n in reading.options.extra_fields if n not in CANONICAL_SCHEMA]
        first = True
        while True:
            try:  # a file that breaks midway keeps the records read before
                number, record, row = next(items)
            except StopIteration:
                break
            except LogFormatError as error:
                reading.skip_or_raise(reading.forced(error, source) if first else error)
                break
            if isinstance(row, ReplayError):
                reading.skip_or_raise(reading.forced(row, source) if first else row)
                first = False
                continue
            first = False
            for name in extra:
                row[name] = at(record, name)
            row["source"], row["record"] = path_text, number
            yield from reading.take(row, path_text)
