"""Read a Dressage artifact folder (``<instance>/<session>/samples/<segment>.json``) quickly.

A run writes one small JSON file per segment, so a folder holds tens of thousands of
them, and reading it is bound by opening, parsing and mapping files one at a time in
Python. Two things make it faster than a plain loop:

- the instance folders are shared with one helper process, which uses the second
  core. The helper is a fresh interpreter started with ``-c`` that imports only the
  record mapping (:mod:`analysis.records`, no polars): it never runs the caller's
  script, so a script without a ``__main__`` guard is safe, and it starts in well
  under a tenth of a second. It hands its rows back as columns with :mod:`marshal`
  (plain data only; nothing is unpickled), a few thousand files at a time, which this
  process takes as they come. If it cannot start or fails, this process reads what it
  left. ``DRESSAGE_REPLAY_HELPERS=0`` turns it off.
- files are read with plain os calls, and the cyclic garbage collector is paused while
  results pile up (they hold no cycles), which otherwise rescans them again and again.

The caller puts the files in arrival order once all are read: modification time, then
path (SPEC §5); the last file read may be the first to arrive.
"""

from __future__ import annotations

import array
import contextlib
import dataclasses
import gc
import itertools
import json
import marshal
import os
import stat
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from analysis.errors import InputNotFoundError, LogFormatError, MissingFieldError, ReplayError
from analysis.records import FieldMap, RowColumns, canonical_row, parse_json, row_columns

if TYPE_CHECKING:  # the helper process never needs these: it starts faster without
    import queue
    import subprocess
    import threading

HELPER_MIN_INSTANCES = 128
"""Below this many instance folders the helper's start-up costs more than it saves."""

HELPER_SHARE = 0.47
"""The share of instance folders the helper reads."""

MAX_CHUNK_BYTES = 1 << 31
"""A larger length prefix in the helper's output means the output is not its chunks."""

CHUNK_FILES = 5_000
"""Files whose results are handed on together (by this process and by the helper)."""

ERRORS: dict[str, type[ReplayError]] = {
    error.__name__: error for error in (InputNotFoundError, LogFormatError, MissingFieldError)
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
    """Whether ``root`` holds at least one ``<instance>/<session>/samples/<n>.json``."""
    return any(
        _segment_files(os.path.join(session, "samples"), [])
        for instance in _directories(str(root), [])
        for session in _directories(instance, [])
    )


def read_artifact_folder(
    root: Path,
    *,
    fields: FieldMap,
    extra: Sequence[str] = (),
    on_chunk: Callable[[Chunk], None],
    progress: Callable[[int, int], None] | None = None,
) -> tuple[int, list[str]]:
    """Read every segment file below ``root``; return how many there were, and warnings.

    The results go to ``on_chunk`` a few thousand files at a time, in no particular
    order: the caller puts them in arrival order (modification time, then path) once
    all are read, since the last file read may be the first to arrive. Folders that
    cannot be listed and files that cannot be read come as entries with an error, in
    place of rows. ``progress(done, total)`` counts instance folders.
    """
    problems: list[FileResult] = []
    instances = sorted(_directories(str(root), problems))
    warnings: list[str] = []
    stamps = array.array("q")

    def take(chunk: Chunk) -> None:
        stamps.extend(chunk.file_stamps)
        on_chunk(chunk)

    def read(results: list[FileResult], done: int = 0) -> None:
        take(Chunk.of(results, extra))
        if helper is not None:  # the helper's chunks that came meanwhile
            for chunk in helper.arrived():
                take(chunk)

    with _collector_paused():
        helper_wanted = _helper_wanted(instances)
        mine, theirs = _shares(instances) if helper_wanted else (list(instances), [])
        helper = _Helper(theirs, fields, extra) if helper_wanted else None
        try:
            tick = None
            if progress is not None:
                total, scale = len(instances), len(instances) / max(1, len(mine))
                tick = lambda done: progress(min(round(done * scale), total), total)  # noqa: E731
            read_shard(mine, fields, extra, on_chunk=read, tick=tick)
            if helper is not None:
                for chunk in helper.rest():
                    take(chunk)
                if helper.problem:
                    # Its chunks so far stand; this process reads the folders left.
                    left, problem, helper = theirs[helper.done :], helper.problem, None
                    warnings.append(
                        f"{root}: the helper process failed ({problem}); "
                        f"this process read the {len(left)} instance folder(s) it left"
                    )
                    read_shard(left, fields, extra, on_chunk=read)
        finally:
            if helper is not None:
                helper.stop()
        if problems:
            read(problems)
    if progress is not None:
        progress(len(instances), len(instances))
    tied = 0
    for _, run in itertools.groupby(sorted(stamps)):
        count = sum(1 for _ in run)
        tied += count if count > 1 else 0
    if tied:
        warnings.append(
            f"{tied} of {len(stamps)} artifact files share a modification time with another, "
            "so their arrival order falls back to path order (as after a plain copy); "
            "pass --order-by with a completion-time field if the log has one"
        )
    return len(stamps), warnings


def read_shard(
    instances: Sequence[str],
    fields: FieldMap,
    extra: Sequence[str],
    *,
    on_chunk: Callable[[list[FileResult], int], None],
    tick: Callable[[int], None] | None = None,
    parent: int | None = None,
    chunk_files: int | None = None,
) -> None:
    """Read every segment file below the given instance folders, in no particular order.

    Results go to ``on_chunk(results, done)`` every :data:`CHUNK_FILES` files or so, at
    the end of an instance folder: ``done`` is how many instance folders they complete.
    ``tick(n)`` is called after the n-th instance folder. ``parent`` is the helper's
    parent process id: the helper stops when its parent is gone.
    """
    chunk_files = chunk_files or CHUNK_FILES
    results: list[FileResult] = []
    for done, instance in enumerate(instances, start=1):
        for session in _directories(instance, results):
            files = _segment_files(os.path.join(session, "samples"), results)
            results += [read_segment_file(path, fields, extra) for path in files]
        if len(results) >= chunk_files:
            on_chunk(results, done)
            results = []
        if tick is not None:
            tick(done)
        if parent is not None and os.getppid() != parent:
            raise SystemExit(1)
    if results:
        on_chunk(results, len(instances))


def read_segment_file(path: str, fields: FieldMap, extra: Sequence[str]) -> FileResult:
    """One segment file (an object, or a list of them) as canonical rows or errors."""
    try:
        stamp, data = _read_file(path)
    except OSError as exc:
        return _unreadable(path, f"{path}: cannot read ({exc.strerror})")
    if data is None:
        return stamp, path, []  # no longer a regular file (replaced since it was listed)
    try:
        document = parse_json(data)
    except json.JSONDecodeError as exc:
        return (
            stamp,
            path,
            [(0, None, ("LogFormatError", f"{path}:{exc.lineno}: not valid JSON ({exc.msg})"))],
        )
    if isinstance(document, list):
        numbered = [(n, f"{path}: record {n}", record) for n, record in enumerate(document, 1)]
    else:
        numbered = [(1, path if os.sep == "/" else path.replace(os.sep, "/"), document)]
    entries: list[Entry] = []
    for number, where, record in numbered:
        try:
            row = canonical_row(record, fields=fields, where=where, extra=extra)
        except (LogFormatError, MissingFieldError) as error:
            entries.append((number, None, (type(error).__name__, str(error))))
            continue
        row["source"] = path
        row["record"] = number
        entries.append((number, row, None))
    return stamp, path, entries


_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_BINARY", 0) | getattr(os, "O_NONBLOCK", 0)


def _read_file(path: str) -> tuple[int, bytes | None]:
    """(modification time, contents) of a regular file; None for anything else.

    Plain os calls, not open(): a file object costs more than the read itself for
    files of a few KB. O_NONBLOCK keeps a FIFO from blocking the open.
    """
    fd = os.open(path, _OPEN_FLAGS)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return info.st_mtime_ns, None
        data = os.read(fd, info.st_size + 1)
        while len(data) > info.st_size:  # it grew since: read to the end
            more = os.read(fd, 1 << 20)
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
            return [entry.path for entry in entries if entry.is_dir()]
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        problems.append(_unreadable(path, f"{path}: cannot list the folder ({exc.strerror})"))
        return []


def _segment_files(samples: str, problems: list[FileResult]) -> list[str]:
    """The ``*.json`` files of a session's ``samples`` folder (none when it has none)."""
    try:
        with os.scandir(samples) as entries:
            return [e.path for e in entries if e.name.endswith(".json") and e.is_file()]
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        problems.append(_unreadable(samples, f"{samples}: cannot list the folder ({exc.strerror})"))
        return []


def _unreadable(path: str, message: str) -> FileResult:
    """A file or folder that could not be read: no time (-1, so it sorts first), an error."""
    return -1, path, [(0, None, ("InputNotFoundError", message))]


def _shares(instances: Sequence[str]) -> tuple[list[str], list[str]]:
    """The instance folders this process reads and those the helper reads, interleaved.

    The helper gets a little less than half: it also starts up and hands its results over.
    """
    mine: list[str] = []
    theirs: list[str] = []
    for i, folder in enumerate(instances):
        # Spread evenly: the helper's count steps up on its share of the folders.
        share = theirs if int((i + 1) * HELPER_SHARE) > int(i * HELPER_SHARE) else mine
        share.append(folder)
    return mine, theirs


def _helper_wanted(instances: Sequence[str]) -> bool:
    """A helper pays for a big folder, can be turned off, and needs a real interpreter."""
    return (
        len(instances) >= HELPER_MIN_INSTANCES
        and os.environ.get("DRESSAGE_REPLAY_HELPERS") != "0"
        and bool(sys.executable)
        and not getattr(sys, "frozen", False)  # a frozen app's executable is the app
    )


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


# The helper: ``python -P -c _BOOTSTRAP <analysis folder>``. It registers the analysis
# folder as a bare package (skipping analysis/__init__.py, which imports polars), reads
# its job from stdin and writes its results to stdout, both with marshal.
_BOOTSTRAP = """\
import signal, sys, types
signal.signal(signal.SIGINT, signal.SIG_IGN)
package = types.ModuleType("analysis")
package.__path__ = [sys.argv[1]]
sys.modules["analysis"] = package
from analysis.artifacts import helper_main
helper_main()
"""


def helper_main() -> None:
    """Entry point of the helper process."""
    instances, field_paths, extra, parent, chunk_files = marshal.load(sys.stdin.buffer)
    fields = FieldMap(**{name: tuple(paths) for name, paths in field_paths.items()})
    out = sys.stdout.buffer

    def send(results: list[FileResult], done: int) -> None:
        # As columns, made here: the parent then only builds the table chunk.
        blob = marshal.dumps((done, Chunk.of(results, extra).to_marshal()))
        out.write(len(blob).to_bytes(8, "little") + blob)
        out.flush()  # now: the parent takes chunks as they come

    with _collector_paused():
        read_shard(instances, fields, extra, on_chunk=send, parent=parent, chunk_files=chunk_files)
    out.flush()


class _Helper:
    """One helper process reading a share of the instance folders; its chunks are taken
    as they come."""

    def __init__(self, instances: list[str], fields: FieldMap, extra: Sequence[str]) -> None:
        import queue
        import subprocess
        import threading

        job = marshal.dumps(
            (instances, dataclasses.asdict(fields), list(extra), os.getpid(), CHUNK_FILES)
        )
        self.process: subprocess.Popen[bytes] | None = None
        self.problem = ""
        self.done = 0
        """How many of its instance folders the chunks taken so far complete."""
        self.stderr = b""
        self.queue: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self.threads: list[threading.Thread] = []
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-P", "-c", _BOOTSTRAP, str(Path(__file__).parent)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        except (OSError, ValueError, TypeError) as exc:
            self.problem = f"cannot start {sys.executable or 'python'}: {exc}"
            return
        # Threads feed the job, drain stderr and collect the chunks without blocking us.
        for target, argument in ((self._feed, job), (self._drain, None), (self._collect, None)):
            thread = threading.Thread(target=target, args=(argument,), daemon=True)
            thread.start()
            self.threads.append(thread)

    def _feed(self, job: bytes) -> None:
        assert self.process is not None and self.process.stdin is not None
        with contextlib.suppress(OSError):  # it died: its exit status tells why
            self.process.stdin.write(job)
            self.process.stdin.close()

    def _drain(self, _: None) -> None:
        assert self.process is not None and self.process.stderr is not None
        self.stderr = self.process.stderr.read()

    def _collect(self, _: None) -> None:
        assert self.process is not None and self.process.stdout is not None
        stdout = self.process.stdout
        try:
            while header := stdout.read(8):
                size = int.from_bytes(header, "little")
                if len(header) < 8 or not 0 < size <= MAX_CHUNK_BYTES:
                    # Not our framing (something printed to stdout as the helper started?)
                    self.problem = "unreadable results (not the expected chunks)"
                    break
                blob = stdout.read(size)
                if len(blob) != size:
                    self.problem = "unreadable results (a chunk is cut short)"
                    break
                self.queue.put(blob)
        except Exception as exc:  # a broken pipe, or no memory for a chunk
            self.problem = f"unreadable results ({exc!r})"
        finally:
            if self.problem:
                # Nobody reads its output any more: end it rather than leave it blocked.
                self.process.kill()
            self.queue.put(None)

    def _chunk(self, blob: bytes) -> Chunk:
        done, data = marshal.loads(blob)
        self.done = done
        return Chunk.from_marshal(data)

    def arrived(self) -> Iterator[Chunk]:
        """The chunks that have come so far and not been taken (without waiting)."""
        import queue

        while not self.finished:
            try:
                blob = self.queue.get_nowait()
            except queue.Empty:
                return
            if blob is None:
                self.finished = True
                return
            yield self._chunk(blob)

    finished = False

    def rest(self) -> Iterator[Chunk]:
        """The remaining chunks as they come, until the helper ends; then ``problem``
        says whether it failed (and ``done`` how far its chunks got)."""
        if self.process is None:
            return
        while not self.finished and (blob := self.queue.get()) is not None:
            yield self._chunk(blob)
        self.finished = True
        for thread in self.threads:
            thread.join()
        returncode = self.process.wait()
        if returncode != 0 and not self.problem:
            lines = self.stderr.decode(errors="replace").strip().splitlines()
            self.problem = f"exit {returncode}: {lines[-1] if lines else 'no message'}"

    def stop(self) -> None:
        """Make sure the process is gone (after an error or Ctrl-C in this process)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
