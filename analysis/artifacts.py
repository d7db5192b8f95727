"""Read a Dressage artifact folder (``<instance>/<session>/samples/<segment>.json``) quickly.

A run writes one small JSON file per segment, so a folder holds tens of thousands of
them, and reading it is bound by opening, parsing and mapping files one at a time in
Python. Two things make it faster than a plain loop:

- the instance folders are shared with one helper process, which uses the second
  core. The helper is a fresh interpreter started with ``-c`` that imports only the
  record mapping (:mod:`analysis.records`, no polars): it never runs the caller's
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

The caller puts the files in arrival order once all are read: modification time, then
path (SPEC §5); the last file read may be the first to arrive.
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
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from analysis.errors import (
    InputNotFoundError,
    LogFormatError,
    MissingFieldError,
    ReplayError,
    counted,
)
from analysis.records import (
    FieldMap,
    RowColumns,
    canonical_row,
    json_problem,
    parse_json,
    row_columns,
)

if TYPE_CHECKING:  # the helper process never needs these: it starts faster without
    import queue
    import subprocess
    import threading

HELPER_MIN_INSTANCES = 128
"""Below this many instance folders the helper's start-up costs more than it saves."""

HELPER_BATCH = (4, 64)
"""The fewest and most instance folders handed to the helper at a time: an eighth of
those left, within these bounds, so that the two processes finish close together."""

HELPER_BATCHES_AHEAD = 2
"""Batches the helper holds before it asks for more, so it never waits to be answered."""

MAX_CHUNK_BYTES = 1 << 31
"""A larger length prefix in the helper's output means the output is not its chunks."""

CHUNK_FILES = 1_000
"""Files whose results are handed on together (by this process and by the helper). Small
enough that the helper's last chunk, which this process waits for, comes quickly."""

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

    def read(results: list[FileResult]) -> None:
        take(Chunk.of(results, extra))
        if helper is not None:  # the helper's chunks that came meanwhile
            for chunk in helper.arrived():
                take(chunk)

    def tick(mine: int) -> None:
        if progress is not None:
            progress(mine + (helper.instances_done if helper is not None else 0), len(instances))

    helper: _Helper | None = None
    with _collector_paused():
        pending = collections.deque(instances)
        try:
            if _helper_wanted(instances):
                helper = _Helper(pending, fields, extra)
            read_shard(_taken(pending), fields, extra, on_chunk=read, tick=tick)
            if helper is not None:
                helper.no_more()  # none are left: its input ends, whatever it reports
                for chunk in helper.rest():
                    take(chunk)
                if helper.problem:
                    # Its chunks so far stand; this process reads the folders it left.
                    left, failed, helper = helper.unfinished(), helper, None
                    warnings.append(
                        f"{root}: the helper process failed ({failed.problem}); "
                        + (
                            f"this process read the {counted(len(left), 'instance folder')} it left"
                            if left
                            else "this process read every instance folder"
                            if not failed.assigned
                            else "all its results had come"
                        )
                    )
                    read_shard(left, fields, extra, on_chunk=read)
        finally:
            if helper is not None:
                helper.stop()
        if problems:
            read(problems)
    if progress is not None:
        progress(len(instances), len(instances))
    # (Counted only when some are tied: a groupby over the sorted times took 20 ms for
    # 20,000 files, at the end of the load, when the helper process is done.)
    tied = (
        0
        if len(set(stamps)) == len(stamps)
        else sum(count for count in collections.Counter(stamps).values() if count > 1)
    )
    if tied:
        warnings.append(
            f"{tied} of {len(stamps)} artifact files share a modification time with another, "
            "so their arrival order falls back to path order (as after a plain copy); "
            "pass --order-by with a completion-time field if the log has one"
        )
    return len(stamps), warnings


def _taken(pending: collections.deque[str]) -> Iterator[str]:
    """Instance folders taken one at a time from the front, while any are left."""
    while True:
        try:
            yield pending.popleft()  # atomic: the helper's feeder takes from the back
        except IndexError:
            return


def read_shard(
    instances: Iterable[str],
    fields: FieldMap,
    extra: Sequence[str],
    *,
    on_chunk: Callable[[list[FileResult]], None],
    tick: Callable[[int], None] | None = None,
) -> None:
    """Read every segment file below the given instance folders, in no particular order.

    Results go to ``on_chunk`` every :data:`CHUNK_FILES` files or so, at the end of an
    instance folder. ``tick(n)`` is called after the n-th instance folder.
    """
    results: list[FileResult] = []
    for done, instance in enumerate(instances, start=1):
        read_instance(instance, fields, extra, results)
        if len(results) >= CHUNK_FILES:
            on_chunk(results)
            results = []
        if tick is not None:
            tick(done)
    if results:
        on_chunk(results)


def read_instance(
    instance: str, fields: FieldMap, extra: Sequence[str], results: list[FileResult]
) -> None:
    """Add the results of every segment file below one instance folder to ``results``."""
    for session in _directories(instance, results):
        files = _segment_files(f"{session}{os.sep}samples", results)
        results += [read_segment_file(path, fields, extra) for path in files]


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
# folder as a bare package (skipping analysis/__init__.py, which imports polars). Its
# stdin brings frames (a length, then marshal data): the job, then batches of instance
# folders, until it is closed. Its stdout takes one frame per batch read, and one last
# frame once its input ends: a header (see _HEADER), then the payload: a chunk of
# results, or nothing when too few have piled up to send yet.
_BOOTSTRAP = """\
import signal, sys, types
signal.signal(signal.SIGINT, signal.SIG_IGN)
package = types.ModuleType("analysis")
package.__path__ = [sys.argv[1]]
sys.modules["analysis"] = package
from analysis.artifacts import helper_main
helper_main()
"""

_MAGIC = b"DRh\x01"
_HEADER = 20
"""Bytes of a helper frame's header: the magic (4), payload length (8), batches read (4),
instance folders read (4)."""


def _frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(8, "little") + payload


def _read_frame(stream: Any) -> Any:
    """The next frame of the helper's stdin, unmarshalled; None once it is closed."""
    header = stream.read(8)
    if len(header) < 8:
        return None
    return marshal.loads(stream.read(int.from_bytes(header, "little")))


def helper_main() -> None:
    """Entry point of the helper process."""
    stdin, out = sys.stdin.buffer, sys.stdout.buffer
    field_paths, extra, parent, chunk_files = _read_frame(stdin)
    fields = FieldMap(**{name: tuple(paths) for name, paths in field_paths.items()})
    results: list[FileResult] = []
    batches = instances = 0

    def send(payload: bytes) -> None:
        counts = batches.to_bytes(4, "little") + instances.to_bytes(4, "little")
        out.write(_MAGIC + len(payload).to_bytes(8, "little") + counts)
        out.write(payload)
        out.flush()  # now: the parent hands out the next batch as this one is done

    with _collector_paused():
        while (batch := _read_frame(stdin)) is not None:
            for instance in batch:
                read_instance(instance, fields, extra, results)
                if os.getppid() != parent:
                    raise SystemExit(1)
            batches, instances = batches + 1, instances + len(batch)
            if len(results) < chunk_files:
                send(b"")  # ready for more
                continue
            # As columns, made here: the parent then only builds the table chunk.
            send(Chunk.of(results, extra).to_marshal())
            results = []
        send(Chunk.of(results, extra).to_marshal() if results else b"")  # the end


class _Helper:
    """One helper process that reads batches of instance folders taken from the back of
    ``pending``; its chunks are taken as they come."""

    def __init__(
        self, pending: collections.deque[str], fields: FieldMap, extra: Sequence[str]
    ) -> None:
        import queue
        import subprocess
        import threading

        job = marshal.dumps((dataclasses.asdict(fields), list(extra), os.getpid(), CHUNK_FILES))
        self.pending = pending
        self.process: subprocess.Popen[bytes] | None = None
        self.problem = ""
        self.assigned: list[list[str]] = []
        """The batches handed to it, in order."""
        self.covered = 0
        """How many of those batches the chunks taken so far cover."""
        self.instances_done = 0
        """How many instance folders it has read (for progress)."""
        self.stderr = b""
        self.chunks: queue.SimpleQueue[tuple[int, bytes] | None] = queue.SimpleQueue()
        self.requests: queue.SimpleQueue[bool] = queue.SimpleQueue()
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
        # Threads feed it, drain stderr and collect the chunks without blocking us.
        for target, argument in ((self._feed, job), (self._drain, None), (self._collect, None)):
            thread = threading.Thread(target=target, args=(argument,), daemon=True)
            thread.start()
            self.threads.append(thread)

    def _feed(self, job: bytes) -> None:
        """Send the job, then a batch whenever it is ready for one; close when none are left."""
        assert self.process is not None and self.process.stdin is not None
        stdin = self.process.stdin
        with contextlib.suppress(OSError):  # it died: its exit status tells why
            stdin.write(_frame(job))
            ahead = HELPER_BATCHES_AHEAD
            while ahead or self.requests.get():
                ahead = max(0, ahead - 1)
                batch = self._batch()
                if not batch:
                    break
                stdin.write(_frame(marshal.dumps(batch)))
                stdin.flush()
        with contextlib.suppress(OSError):
            stdin.close()

    def _batch(self) -> list[str]:
        """The next batch, from the back of ``pending`` (this process takes the front)."""
        low, high = HELPER_BATCH
        size = min(high, max(low, len(self.pending) // 8))
        batch: list[str] = []
        with contextlib.suppress(IndexError):  # none left
            while len(batch) < size:
                batch.append(self.pending.pop())
        if batch:
            self.assigned.append(batch)  # before it is sent: if it is lost, it is read here
        return batch

    def _drain(self, _: None) -> None:
        assert self.process is not None and self.process.stderr is not None
        self.stderr = self.process.stderr.read()

    def _collect(self, _: None) -> None:
        assert self.process is not None and self.process.stdout is not None
        stdout = self.process.stdout
        batches = 0
        try:
            while header := stdout.read(_HEADER):
                size = int.from_bytes(header[4:12], "little")
                done = int.from_bytes(header[12:16], "little")
                instances = int.from_bytes(header[16:], "little")
                # One frame a batch, then one more at the end: anything else (output
                # printed as the helper started, say) is not its results.
                if (
                    len(header) < _HEADER
                    or header[:4] != _MAGIC
                    or size > MAX_CHUNK_BYTES
                    or done not in (batches, batches + 1)
                    or done > len(self.assigned)
                    or instances != sum(map(len, self.assigned[:done]))
                ):
                    self.problem = "unreadable results (not the expected chunks)"
                    break
                batches = done
                self.instances_done = instances
                self.requests.put(True)  # ready for another batch
                if size:
                    blob = stdout.read(size)
                    if len(blob) != size:
                        self.problem = "unreadable results (a chunk is cut short)"
                        break
                    self.chunks.put((batches, blob))
        except Exception as exc:  # a broken pipe, or no memory for a chunk
            self.problem = f"unreadable results ({exc!r})"
        finally:
            if self.problem:
                # Nobody reads its output any more: end it rather than leave it blocked.
                self.process.kill()
            self.requests.put(False)  # no more batches
            self.chunks.put(None)

    def _taken(self, item: tuple[int, bytes] | None) -> Chunk | None:
        """The chunk of an item of ``chunks``; None at the end, or once one cannot be read
        (then the helper is ended and what it read since counts as not read)."""
        if item is None or self.finished:
            self.finished = True
            return None
        try:
            chunk = Chunk.from_marshal(item[1])
        except Exception as exc:  # marshal data that is not a chunk
            self.problem = self.problem or f"unreadable results ({exc!r})"
            self.finished = True
            self.kill()
            return None
        self.covered = item[0]
        return chunk

    def arrived(self) -> Iterator[Chunk]:
        """The chunks that have come so far and not been taken (without waiting)."""
        import queue

        while not self.finished:
            try:
                item = self.chunks.get_nowait()
            except queue.Empty:
                return
            if (chunk := self._taken(item)) is not None:
                yield chunk

    finished = False

    def no_more(self) -> None:
        """Close its input once the batches it holds are sent: there are no more."""
        self.requests.put(False)

    def rest(self) -> Iterator[Chunk]:
        """The remaining chunks as they come, until the helper ends; then ``problem``
        says whether it failed, and :meth:`unfinished` what it left."""
        if self.process is None:
            return
        while not self.finished:
            if (chunk := self._taken(self.chunks.get())) is not None:
                yield chunk
        self.kill_when_done()
        returncode = self.process.wait()
        if returncode != 0 and not self.problem:
            lines = self.stderr.decode(errors="replace").strip().splitlines()
            self.problem = f"exit {returncode}: {lines[-1] if lines else 'no message'}"

    def unfinished(self) -> list[str]:
        """The instance folders handed to it whose results did not come back."""
        return [instance for batch in self.assigned[self.covered :] for instance in batch]

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()

    def kill_when_done(self) -> None:
        """Wait for its threads (ending it first if a problem was found), close its pipes."""
        if self.process is None:
            return
        if self.problem:
            self.kill()
        self.requests.put(False)
        for thread in self.threads:
            thread.join()
        for pipe in (self.process.stdin, self.process.stdout, self.process.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()

    def stop(self) -> None:
        """Make sure the process is gone (after an error or Ctrl-C in this process)."""
        self.requests.put(False)
        if self.process is not None:
            self.kill()
            self.process.wait()
            self.kill_when_done()
