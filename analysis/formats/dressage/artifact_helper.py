"""The helper process that reads part of an artifact folder on the second core, and its
protocol (see :mod:`analysis.formats.dressage.artifacts`)."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import marshal
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from analysis.formats.dressage import segments
from analysis.formats.dressage.segments import Chunk, FileResult
from analysis.table.fieldmap import FieldMap
from analysis.table.limits import DEFAULT_LIMITS, Limits

HELPER_MIN_INSTANCES = 128
"""Below this many session folders the helper's start-up costs more than it saves."""


HELPER_BATCH = (4, 64)
"""The fewest and most session folders handed to the helper at a time: an eighth of
those left, within these bounds, so that the two processes finish close together."""


HELPER_BATCHES_AHEAD = 2
"""Batches the helper holds before it asks for more, so it never waits to be answered."""


def helper_wanted(instances: Sequence[str]) -> bool:
    """A helper pays for a big folder, can be turned off, and needs a real interpreter."""
    return (
        len(instances) >= HELPER_MIN_INSTANCES
        and os.environ.get("DRESSAGE_REPLAY_HELPERS") != "0"
        and bool(sys.executable)
        and not getattr(sys, "frozen", False)  # a frozen app's executable is the app
    )


# The helper: ``python -P -c _BOOTSTRAP <folder holding analysis/>``. The packages on the
# way to this module hold nothing but their docstrings (``analysis`` imports its names when
# first used), so it starts without polars, pyarrow or NumPy. Its
# stdin brings frames (a length, then marshal data): the job, then batches of instance
# folders, until it is closed. Its stdout takes one frame per batch read, and one last
# frame once its input ends: a header (see _HEADER), then the payload: a chunk of
# results, or nothing when too few have piled up to send yet.
_BOOTSTRAP = """\
import signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
sys.path.insert(0, sys.argv[1])
from analysis.formats.dressage.artifact_helper import helper_main
helper_main()
"""


_MAGIC = b"DRh\x01"


_HEADER = 20
"""Bytes of a helper frame's header: the magic (4), payload length (8), batches read (4),
session folders read (4)."""


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
    field_paths, extra, parent, chunk_files, limit_values = _read_frame(stdin)
    limits = Limits(*limit_values)
    fields = FieldMap(**{name: tuple(paths) for name, paths in field_paths.items()})
    results: list[FileResult] = []
    batches = instances = 0

    def send(payload: bytes) -> None:
        counts = batches.to_bytes(4, "little") + instances.to_bytes(4, "little")
        out.write(_MAGIC + len(payload).to_bytes(8, "little") + counts)
        out.write(payload)
        out.flush()  # now: the parent hands out the next batch as this one is done

    with segments.collector_paused():
        while (batch := _read_frame(stdin)) is not None:
            for instance in batch:
                segments.read_session(instance, fields, extra, results, limits)
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


class HelperProcess:
    """One helper process that reads batches of session folders taken from the back of
    ``pending``; its chunks are taken as they come."""

    def __init__(
        self,
        pending: collections.deque[str],
        fields: FieldMap,
        extra: Sequence[str],
        limits: Limits = DEFAULT_LIMITS,
    ) -> None:
        import queue
        import subprocess
        import threading

        job = marshal.dumps(
            (
                dataclasses.asdict(fields),
                list(extra),
                os.getpid(),
                segments.CHUNK_FILES,
                dataclasses.astuple(limits),
            )
        )
        self.pending = pending
        self.process: subprocess.Popen[bytes] | None = None
        self.problem = ""
        self.assigned: list[list[str]] = []
        """The batches handed to it, in order."""
        self.covered = 0
        """How many of those batches the chunks taken so far cover."""
        self.instances_done = 0
        """How many session folders it has read (for progress)."""
        self.stderr = b""
        self.chunks: queue.SimpleQueue[tuple[int, bytes] | None] = queue.SimpleQueue()
        self.requests: queue.SimpleQueue[bool] = queue.SimpleQueue()
        self.threads: list[threading.Thread] = []
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-P", "-c", _BOOTSTRAP, str(Path(__file__).parents[3])],
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
                    or size > segments.MAX_CHUNK_BYTES
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
        """The session folders handed to it whose results did not come back."""
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
