"""Read a Dressage artifact folder (``<instance>/<session>/samples/<segment>.json``) quickly.

A run writes one small JSON file per segment, so a folder holds tens of thousands of
them, and reading it is bound by opening, parsing and mapping files one at a time in
Python. Two things make it faster than a plain loop:

- the session folders are shared with one helper process, which uses the second
  core. The helper is a fresh interpreter started with ``-c`` that imports only the
  record mapping (:mod:`analysis.formats.fields`, no polars): it never runs the caller's
  script, so a script without a ``__main__`` guard is safe, and it starts in well
  under a tenth of a second. The folders are handed out as they are read: this
  process takes them one at a time from the front of the list, the helper a batch at
  a time from the back whenever it is ready for more, so neither waits for the other
  however the two cores are shared out by the host. The helper hands its rows back as
  columns with :mod:`marshal` (plain data only; nothing is unpickled), a few thousand
  files at a time, which this process takes as they come. If it cannot start or
  fails, this process reads what it left. ``DRESSAGE_REPLAY_HELPERS=0`` turns it off.
- files are read with plain os calls, and the cyclic garbage collector is paused while
  results pile up (they hold no cycles), which otherwise rescans them again and again.

The caller puts the records in arrival order once all are read: completion time when
every record carries it, else modification time, then path (docs/semantics.md §5.1);
the last file read may be the first to arrive.
"""

from __future__ import annotations

import array
import collections
import contextlib
import dataclasses
import gc
import json
import marshal
import os
import stat
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from analysis.errors import (
    InputNotFoundError,
    LogFormatError,
    Message,
    MissingFieldError,
    ReplayError,
    counted,
    setting,
)
from analysis.formats.fields import (
    FieldMap,
    RowColumns,
    canonical_row,
    row_columns,
)
from analysis.formats.text.jsonl import json_problem, parse_json
from analysis.table.limits import DEFAULT_LIMITS, LimitError, Limits, over_limit, printable

if TYPE_CHECKING:  # imported when a helper is wanted (a circular import otherwise)
    from analysis.formats.dressage.artifact_helper import HelperProcess

MAX_CHUNK_BYTES = 1 << 31
"""A larger length prefix in the helper's output means the output is not its chunks."""

CHUNK_FILES = 1_000
"""Files whose results are handed on together (by this process and by the helper). Small
enough that the helper's last chunk, which this process waits for, comes quickly."""

ERRORS: dict[str, type[ReplayError]] = {
    error.__name__: error
    for error in (InputNotFoundError, LogFormatError, MissingFieldError, LimitError)
}

Entry = tuple[int, dict[str, Any] | None, tuple[str, str] | None]
"""(record number, canonical row or None, (error class name, message) or None)."""

FileResult = tuple[int, str, list[Entry]]
"""(modification time in ns, path, entries in record order) of one segment file."""


@dataclasses.dataclass
class Chunk:
    """The results of a few thousand segment files, as handed to the caller."""

    file_stamps: list[int]
    """Modification time of every file read (not of those that could not be read)."""
    errors: list[tuple[int, str, int, str, str]]
    """(modification time, path, record number, error class name, message)."""
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


def is_artifact_folder(root: Path) -> bool:
    """Whether ``root`` holds at least one ``<instance>/<session>/samples/<n>.json`` (a
    completed trajectory) or ``<instance>/<session>/error.json`` (a failed one)."""
    return any(
        _session_files(session, [])
        for instance in instance_folders(root, [])
        for session in _directories(instance, [])
    )


RUN_TREES = ("traj_payload", "traj_err")
"""The artifact trees of a Dressage run folder: completed and failed trajectories."""


def is_run_tree(root: Path) -> bool:
    """Whether ``root`` holds a Dressage run's artifact trees (False where it cannot be
    looked into: reading it then says why)."""
    return any(os.path.isdir(root / tree) for tree in RUN_TREES)


def instance_folders(root: Path, problems: list[FileResult]) -> list[str]:
    """The instance folders of an artifact tree; of a run folder, those of both its trees
    (``traj_payload/``, ``traj_err/``), read together so that arrival order covers both."""
    trees = [root / tree for tree in RUN_TREES if os.path.isdir(root / tree)]
    if not trees:
        return _directories(str(root), problems)
    return [instance for tree in trees for instance in _directories(str(tree), problems)]


def read_artifact_folder(
    root: Path,
    *,
    fields: FieldMap,
    extra: Sequence[str] = (),
    on_chunk: Callable[[Chunk], None],
    progress: Callable[[int, int], None] | None = None,
    tie_warnings: list[str] | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> tuple[int, list[str]]:
    """Read every segment file below ``root``; return how many there were, and warnings.

    The warning that files share a modification time goes to ``tie_warnings`` when given
    (the caller knows whether the files are ordered by it).

    A file past ``max_record_bytes`` is refused unread, a record past ``max_spans``
    is a bad record (``limits``).
    The results go to ``on_chunk`` a few thousand files at a time, in no particular
    order: the caller puts them in arrival order (completion time, else modification
    time, then path) once all are read, since the last file read may be the first to
    arrive. Folders that
    cannot be listed and files that cannot be read come as entries with an error, in
    place of rows. ``progress(done, total)`` counts session folders.
    """
    problems: list[FileResult] = []
    # The unit of work is a session folder: a run has few instance folders (prompts), each
    # of many sessions, so instance folders would leave the helper nothing to share.
    instances = sorted(
        session
        for instance in instance_folders(root, problems)
        for session in _directories(instance, problems)
    )
    warnings: list[str] = []
    stamps = array.array("q")

    def take(chunk: Chunk) -> None:
        stamps.extend(chunk.file_stamps)
        on_chunk(chunk)

    def read(results: list[FileResult]) -> None:
        take(Chunk.of(results, extra))
        if helper is not None:  # the helper's chunks that came meanwhile
            for chunk in helper.arrived():
                take(chunk)

    def tick(mine: int) -> None:
        if progress is not None:
            progress(mine + (helper.instances_done if helper is not None else 0), len(instances))

    from analysis.formats.dressage.artifact_helper import HelperProcess, helper_wanted

    helper: HelperProcess | None = None
    with collector_paused():
        pending = collections.deque(instances)
        try:
            if helper_wanted(instances):
                helper = HelperProcess(pending, fields, extra, limits)
            read_shard(_taken(pending), fields, extra, on_chunk=read, tick=tick, limits=limits)
            if helper is not None:
                warnings += _finish_helper(helper, root, fields, extra, read, take, limits)
        finally:
            if helper is not None:
                helper.stop()
        if problems:
            read(problems)
    if progress is not None:
        progress(len(instances), len(instances))
    (warnings if tie_warnings is None else tie_warnings).extend(_tie_warning(stamps))
    return len(stamps), warnings


def _taken(pending: collections.deque[str]) -> Iterator[str]:
    """Instance folders taken one at a time from the front, while any are left."""
    while True:
        try:
            yield pending.popleft()  # atomic: the helper's feeder takes from the back
        except IndexError:
            return


def _finish_helper(
    helper: HelperProcess,
    root: Path,
    fields: FieldMap,
    extra: Sequence[str],
    read: Callable[[list[FileResult]], None],
    take: Callable[[Chunk], None],
    limits: Limits,
) -> list[str]:
    """Take the helper's last chunks; read what a failed helper left, and say so."""
    helper.no_more()  # none are left: its input ends, whatever it reports
    for chunk in helper.rest():
        take(chunk)
    if not helper.problem:
        return []
    # Its chunks so far stand; this process reads the folders it left.
    left = helper.unfinished()
    read_shard(left, fields, extra, on_chunk=read, limits=limits)
    return [
        f"{root}: the helper process failed ({helper.problem}); "
        + (
            f"this process read the {counted(len(left), 'session folder')} it left"
            if left
            else "this process read every session folder"
            if not helper.assigned
            else "all its results had come"
        )
    ]


def _tie_warning(stamps: Sequence[int]) -> list[str]:
    """A warning when files share a modification time, as their order then falls back."""
    # (Counted only when some are tied: a groupby over the sorted times took 20 ms for
    # 20,000 files, at the end of the load, when the helper process is done.)
    if len(set(stamps)) == len(stamps):
        return []
    tied = sum(count for count in collections.Counter(stamps).values() if count > 1)
    return [
        Message(
            f"{tied} of {len(stamps)} artifact files share a modification time with "
            "another, so their arrival order falls back to path order (as after a plain "
            f"copy); pass {setting('order_by')} with a completion-time field if the log "
            "has one"
        )
    ]


def read_shard(
    instances: Iterable[str],
    fields: FieldMap,
    extra: Sequence[str],
    *,
    on_chunk: Callable[[list[FileResult]], None],
    tick: Callable[[int], None] | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> None:
    """Read every file of the given session folders, in no particular order.

    Results go to ``on_chunk`` every :data:`CHUNK_FILES` files or so, at the end of a
    session folder. ``tick(n)`` is called after the n-th session folder.
    """
    results: list[FileResult] = []
    for done, instance in enumerate(instances, start=1):
        read_session(instance, fields, extra, results, limits)
        if len(results) >= CHUNK_FILES:
            on_chunk(results)
            results = []
        if tick is not None:
            tick(done)
    if results:
        on_chunk(results)


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
        read_segment_file(path, fields, extra, limits) for path in _session_files(session, results)
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
        return _unreadable_entry(path, f"{path}: cannot read ({exc.strerror})")
    if data is None:
        return stamp, path, []  # no longer a regular file (replaced since it was listed)
    if len(data) > most:
        what = f"a JSON document of more than {most:,} bytes"
        error = over_limit(printable(path), what, "max_record_bytes", most)
        return stamp, path, [(0, None, ("LimitError", error.raw))]
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
                        f"{path}:{exc.lineno}: not valid JSON ({json_problem(exc)})",
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
            entries.append((number, None, (type(error).__name__, str(error))))
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


def _directories(path: str, problems: list[FileResult]) -> list[str]:
    """Sub-folders of ``path``; a folder that exists but cannot be listed goes to ``problems``."""
    try:
        with os.scandir(path) as entries:
            return [entry.path for entry in entries if _entry_is(entry, "dir", problems)]
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        problems.append(_unreadable_entry(path, f"{path}: cannot list the folder ({exc.strerror})"))
        return []


def _session_files(session: str, problems: list[FileResult]) -> list[str]:
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
            _unreadable_entry(samples, f"{samples}: cannot list the folder ({exc.strerror})")
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
    return -1, path, [(0, None, ("InputNotFoundError", message))]


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
