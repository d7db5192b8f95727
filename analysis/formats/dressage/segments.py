"""Dressage's artifact files one at a time: a session's segment files read and mapped to
canonical rows, the chunks they are handed on in (by this process and the second-core
helper alike, :mod:`analysis.formats.dressage.artifact_helper`), and the folder listings on
the way. Without polars: the helper imports it."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import marshal
import os
import stat
from collections.abc import Iterator, Sequence
from typing import Any

from analysis.errors import (
    InputNotFoundError,
    LogFormatError,
    MissingFieldError,
    PlainPart,
    ReplayError,
)
from analysis.formats.fields import (
    RowColumns,
    canonical_row,
    row_columns,
)
from analysis.formats.text.jsonl import json_problem, parse_json
from analysis.table.fieldmap import FieldMap
from analysis.table.limits import DEFAULT_LIMITS, LimitError, Limits, over_limit, printable

MAX_CHUNK_BYTES = 1 << 31
"""A larger length prefix in the helper's output means the output is not its chunks."""


CHUNK_FILES = 1_000
"""Files whose results are handed on together (by this process and by the helper). Small
enough that the helper's last chunk, which this process waits for, comes quickly."""


ERRORS: dict[str, type[ReplayError]] = {
    error.__name__: error
    for error in (InputNotFoundError, LogFormatError, MissingFieldError, LimitError)
}


Entry = tuple[int, dict[str, Any] | None, tuple[str, tuple[PlainPart, ...]] | None]
"""(record number, canonical row or None, (error class name, message's parts) or None):
plain data, as the helper process hands it over (:meth:`Message.plain`)."""


FileResult = tuple[int, str, list[Entry]]
"""(modification time in ns, path, entries in record order) of one segment file."""


@dataclasses.dataclass
class Chunk:
    """The results of a few thousand segment files, as handed to the caller."""

    file_stamps: list[int]
    """Modification time of every file read (not of those that could not be read)."""
    errors: list[tuple[int, str, int, str, tuple[PlainPart, ...]]]
    """(modification time, path, record number, error class name, message's parts)."""
    row_stamps: list[int]
    """Modification time of the file of each row."""
    rows: RowColumns

    @classmethod
    def of(cls, results: list[FileResult], extra: Sequence[str]) -> Chunk:
        file_stamps, errors, row_stamps, rows = [], [], [], []
        for stamp, path, entries in results:
            if stamp >= 0:  # -1: unreadable
                file_stamps.append(stamp)
            for number, row, error in entries:
                if error is not None:
                    errors.append((stamp, path, number, *error))
                elif row is not None:
                    rows.append(row)
                    row_stamps.append(stamp)
        return cls(file_stamps, errors, row_stamps, row_columns(rows, extra))

    def to_marshal(self) -> bytes:
        return marshal.dumps((self.file_stamps, self.errors, self.row_stamps, self.rows.as_tuple()))

    @classmethod
    def from_marshal(cls, data: bytes | memoryview) -> Chunk:
        file_stamps, errors, row_stamps, rows = marshal.loads(data)
        return cls(file_stamps, errors, row_stamps, RowColumns(*rows))


def read_session(
    session: str,
    fields: FieldMap,
    extra: Sequence[str],
    results: list[FileResult],
    limits: Limits = DEFAULT_LIMITS,
) -> None:
    """Add the results of one session folder's files (its segments, or its error) to
    ``results``."""
    results += [
        read_segment_file(path, fields, extra, limits) for path in session_files(session, results)
    ]


def read_segment_file(
    path: str, fields: FieldMap, extra: Sequence[str], limits: Limits = DEFAULT_LIMITS
) -> FileResult:
    """One segment file (an object, or a list of them) as canonical rows or errors; one
    past ``max_record_bytes`` is refused unread."""
    most = limits.max_record_bytes
    try:
        stamp, data = _read_file(path, most)
    except OSError as exc:
        return _unreadable_entry(
            path, f"{path}: cannot read ({exc.strerror}); check its permissions"
        )
    if data is None:
        return stamp, path, []  # no longer a regular file (replaced since it was listed)
    if len(data) > most:
        what = f"a JSON document of more than {most:,} bytes"
        error = over_limit(printable(path), what, "max_record_bytes", most)
        return stamp, path, [(0, None, ("LimitError", error.message.plain()))]
    try:
        document = parse_json(data)
    except json.JSONDecodeError as exc:
        return (
            stamp,
            path,
            [
                (
                    0,
                    None,
                    (
                        "LogFormatError",
                        (f"{path}:{exc.lineno}: not valid JSON ({json_problem(exc)})",),
                    ),
                )
            ],
        )
    if isinstance(document, list):
        numbered = [(n, f"{path}: record {n}", record) for n, record in enumerate(document, 1)]
    else:
        numbered = [(1, path if os.sep == "/" else path.replace(os.sep, "/"), document)]
    entries: list[Entry] = []
    for number, where, record in numbered:
        try:
            row = canonical_row(record, fields=fields, where=where, extra=extra, limits=limits)
        except (LogFormatError, MissingFieldError) as error:
            # In the library's words (str), as these have always been said here.
            entries.append((number, None, (type(error).__name__, (str(error),))))
            continue
        row["source"] = printable(path)
        row["record"] = number
        entries.append((number, row, None))
    return stamp, path, entries


_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_BINARY", 0) | getattr(os, "O_NONBLOCK", 0)


def _read_file(path: str, most: int) -> tuple[int, bytes | None]:
    """(modification time, contents) of a regular file; None for anything else.

    Plain os calls, not open(): a file object costs more than the read itself for
    files of a few KB. O_NONBLOCK keeps a FIFO from blocking the open.
    """
    fd = os.open(path, _OPEN_FLAGS)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return info.st_mtime_ns, None
        data = os.read(fd, min(info.st_size, most) + 1)
        while info.st_size < len(data) <= most:  # it grew since: read to the end, or most
            more = os.read(fd, min(1 << 20, most + 1 - len(data)))
            if not more:
                break
            data += more
        return info.st_mtime_ns, data
    finally:
        os.close(fd)


def directories(path: str, problems: list[FileResult]) -> list[str]:
    """Sub-folders of ``path``; a folder that exists but cannot be listed goes to ``problems``."""
    try:
        with os.scandir(path) as entries:
            return [entry.path for entry in entries if _entry_is(entry, "dir", problems)]
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        problems.append(
            _unreadable_entry(
                path, f"{path}: cannot list the folder ({exc.strerror}); check its permissions"
            )
        )
        return []


def session_files(session: str, problems: list[FileResult]) -> list[str]:
    """A session folder's records: its segment files (``samples/*.json``) and, for a
    trajectory that failed (Dressage's ``traj_err/`` tree), its ``error.json``."""
    files = _segment_files(f"{session}{os.sep}samples", problems)
    error = f"{session}{os.sep}error.json"
    if os.path.isfile(error):
        files.append(error)
    return files


def _segment_files(samples: str, problems: list[FileResult]) -> list[str]:
    """The ``*.json`` files of a session's ``samples`` folder (none when it has none)."""
    try:
        with os.scandir(samples) as entries:
            return [
                e.path
                for e in entries
                if e.name.endswith(".json") and _entry_is(e, "file", problems)
            ]
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        problems.append(
            _unreadable_entry(
                samples,
                f"{samples}: cannot list the folder ({exc.strerror}); check its permissions",
            )
        )
        return []


def _entry_is(entry: os.DirEntry[str], kind: str, problems: list[FileResult]) -> bool:
    """Whether a folder's entry is a folder (``dir``) or a file; an entry that cannot be
    looked at (a link that loops) goes to ``problems`` alone, not the whole folder."""
    try:
        return entry.is_dir() if kind == "dir" else entry.is_file()
    except OSError as exc:
        problems.append(
            _unreadable_entry(entry.path, f"{entry.path}: cannot look at it ({exc.strerror})")
        )
        return False


def _unreadable_entry(path: str, message: str) -> FileResult:
    """A file or folder that could not be read: no time (-1, so it sorts first), an error."""
    return -1, path, [(0, None, ("InputNotFoundError", (message,)))]


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
