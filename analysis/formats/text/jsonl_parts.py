"""One large JSONL file read on two cores: cut into pieces at line ends, taken by this
process from the front and by a helper process from the back, so that neither waits for
the other however the host shares out the cores (see :mod:`analysis.formats.load`).

The helper maps its pieces' records to canonical rows as this process would, and sends
back per piece its table chunks and its bad records (errors, unraised); this process then
takes them in file order, so the table, the skipped records and the first error are the
same as one process reading the file from start to end."""

from __future__ import annotations

import contextlib
import itertools
import os
import pickle
import subprocess
import sys
import threading
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SPLIT_MIN_BYTES = 32 << 20
"""Below this size the helper's start and the merge of its rows cost about what it saves
(a 70 MB log of 300,000 short records: 8.0 s on one process, 6.3 s on two; 20 MB: 3.2 s,
2.7 s)."""

PIECES = 24
"""Pieces a file is cut into: enough that the two processes end close together."""

_BLOCK = 8 << 20


@dataclass(frozen=True)
class Piece:
    """Bytes ``start`` (where a line starts) to ``stop`` (just after a line ends) of a
    file, whose first line is line ``first_line`` of the file."""

    index: int
    start: int
    stop: int
    first_line: int


def split_wanted(path: Path, size: int) -> bool:
    """A helper pays for a big uncompressed file, can be turned off, and needs a real
    interpreter (as the artifact folders' helper)."""
    if size < SPLIT_MIN_BYTES or os.environ.get("DRESSAGE_REPLAY_HELPERS") == "0":
        return False
    if not sys.executable or getattr(sys, "frozen", False):
        return False
    try:
        with path.open("rb") as probe:
            return probe.read(2) != b"\x1f\x8b"
    except OSError:
        return False  # said as the file is read


def cut(path: Path, size: int, count: int | None = None, *, number: bool = True) -> list[Piece]:
    """``count`` (:data:`PIECES`) pieces of about equal size (fewer when lines are longer
    than a piece). ``number``: from one pass over the file that counts the lines before
    each cut; else only the cuts are looked for, and each piece's ``first_line`` is 0
    (unknown: its reader counts its lines, see :func:`read_in_pieces`)."""
    count = count or PIECES
    targets = [size * k // count for k in range(1, count)]
    cuts = _numbered_cuts(path, targets) if number else _cuts(path, targets)
    bounds = [(0, 0), *[c for c in cuts if c[0] < size], (size, -1)]
    pieces: list[Piece] = []
    for (start, lines), (stop, _) in itertools.pairwise(bounds):
        if stop > start:
            pieces.append(Piece(len(pieces), start, stop, lines + 1 if number else 0))
    return pieces


def _numbered_cuts(path: Path, targets: list[int]) -> list[tuple[int, int]]:
    """(offset after the first newline at or past each target, newlines before it)."""
    cuts: list[tuple[int, int]] = []
    lines_before, offset = 0, 0
    with path.open("rb") as handle:
        while targets and (block := handle.read(_BLOCK)):
            searched = 0
            while targets:
                start = max(targets[0] - offset, searched, 0)
                found = block.find(b"\n", start)
                if found < 0:
                    break
                cuts.append((offset + found + 1, lines_before + block.count(b"\n", 0, found + 1)))
                searched = found + 1
                targets = [t for t in targets if t > offset + found]
            lines_before += block.count(b"\n")
            offset += len(block)
    return cuts


def _cuts(path: Path, targets: list[int]) -> list[tuple[int, int]]:
    """(offset after the first newline at or past each target, 0), reading only from
    each target on to its newline."""
    cuts: list[tuple[int, int]] = []
    with path.open("rb") as handle:
        for target in targets:
            if cuts and cuts[-1][0] > target:
                continue  # a line longer than a piece: that cut is past this target too
            handle.seek(target)
            offset = target
            while block := handle.read(1 << 16):
                found = block.find(b"\n")
                if found >= 0:
                    cuts.append((offset + found + 1, 0))
                    break
                offset += len(block)
    return cuts


class PieceQueue:
    """Pieces handed out from both ends: the front to this process, the back to the helper."""

    def __init__(self, count: int) -> None:
        self.lock = threading.Lock()
        self.count, self.front, self.back = count, 0, count - 1

    def take_front(self) -> int | None:
        with self.lock:
            if self.front > self.back:
                return None
            self.front += 1
            return self.front - 1

    def take_back(self) -> int | None:
        with self.lock:
            if self.back < self.front:
                return None
            self.back -= 1
            return self.back + 1


# The helper: ``python -P -c _BOOTSTRAP <folder holding analysis/>``. Its stdin brings
# frames (a length, then a pickle): the job (file, read options, pieces, parent's pid),
# then the index of each piece to read, -1 for none. Its stdout takes one frame per piece
# read: (index, rows as columns, bad records' errors). Pickles are safe here: both ends
# are this code.
_BOOTSTRAP = """\
import signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
sys.path.insert(0, sys.argv[1])
from analysis.formats.text.jsonl_parts import helper_main
helper_main()
"""


def _write_frame(stream: Any, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(len(data).to_bytes(8, "little") + data)
    stream.flush()


def _read_frame(stream: Any) -> Any:
    """The next frame's object; None once the stream ends."""
    header = stream.read(8)
    if len(header) < 8:
        return None
    size = int.from_bytes(header, "little")
    data = stream.read(size)
    if len(data) < size:
        return None
    return pickle.loads(data)  # from this code at the other end


def helper_main() -> None:
    """Entry point of the helper process: read the pieces it is given, one at a time."""
    stdin, out = sys.stdin.buffer, sys.stdout.buffer
    path, options, pieces, parent = _read_frame(stdin)
    while (index := _read_frame(stdin)) is not None and index >= 0:
        if os.getppid() != parent:
            raise SystemExit(1)
        _write_frame(out, (index, *read_piece(Path(path), options, pieces[index])))


def read_piece(path: Path, options: Any, piece: Piece) -> tuple[Any, list[Any], int]:
    """One piece's rows, as columns of plain values (None when it has none), its bad
    records' errors in order (the first ends it when bad records fail the load), and
    its number of lines. Lines are numbered from ``piece.first_line``, from 1 when it is
    0 (unknown). The record loop of ``analysis.formats.load`` for a JSONL file, without
    polars, so that the helper starts in a tenth of a second: the parent makes the
    table chunk."""
    from analysis.errors import LogFormatError, MissingFieldError, ReplayError
    from analysis.formats.fields import canonical_row, row_columns
    from analysis.formats.text.jsonl import jsonl_records
    from analysis.formats.text.lean import lean_plan
    from analysis.table.limits import printable

    text, fail = printable(str(path)), options.on_bad_record != "skip"
    rows: list[dict[str, Any]] = []
    errors: list[ReplayError] = []
    lean = lean_plan(options.fields, options.extra_fields, options.limits.max_spans)
    part = (piece.start, piece.stop, piece.first_line or 1)
    records = jsonl_records(path, options.limits, part=part, lean=lean)
    lines = 0
    while not (errors and fail):
        try:
            number, record = next(records)
        except StopIteration as end:
            lines = end.value
            break
        except LogFormatError as error:  # the file cannot be read on (as a whole read)
            errors.append(error)
            break
        try:
            if isinstance(record, ReplayError):
                raise record
            row = canonical_row(
                record, fields=options.fields, where=f"{text}:{number}",
                extra=options.extra_fields, limits=options.limits,
            )  # fmt: skip
        except (LogFormatError, MissingFieldError) as error:
            errors.append(error)
            continue
        row["source"] = text
        row["record"] = number
        rows.append(row)
    return (row_columns(rows, options.extra_fields) if rows else None), errors, lines


class Helper:
    """The helper process for one file: it takes pieces from the back of ``shared``,
    one at a time; what it sends back is kept by piece."""

    def __init__(self, path: Path, options: Any) -> None:
        """Start it (its start-up overlaps the cutting of the file into pieces)."""
        self.path, self.options = path, options
        self.fail_fast = options.on_bad_record != "skip"
        self.shared = PieceQueue(0)
        self.sent: dict[int, tuple[Any, list[Any], int]] = {}
        self.frame_of: Callable[[Any], Any] = lambda columns: columns
        self.stderr = b""
        self.bytes_done = 0
        """Bytes of the pieces it has sent back (for progress; written by one thread)."""
        self.process: subprocess.Popen[bytes] | None = None
        self.threads: list[threading.Thread] = []
        with contextlib.suppress(OSError, ValueError, TypeError):  # then all are read here
            self.process = subprocess.Popen(
                [sys.executable, "-P", "-c", _BOOTSTRAP, str(Path(__file__).parents[3])],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            )  # fmt: skip

    def begin(
        self, pieces: list[Piece], shared: PieceQueue, frame_of: Callable[[Any], Any]
    ) -> None:
        """Send it the job and hand it pieces from the back of ``shared``."""
        if self.process is None:
            return
        self.shared, self.frame_of = shared, frame_of
        self.pieces = pieces
        job = (str(self.path), self.options, pieces, os.getpid())
        for target in (self._drain, lambda: self._exchange(job)):
            thread = threading.Thread(target=target, daemon=True)
            thread.start()
            self.threads.append(thread)

    def _next(self) -> int:
        index = self.shared.take_back()
        return -1 if index is None else index

    def _exchange(self, job: Any) -> None:
        """Hand out pieces, one whenever the helper sends one back, and keep what it sends."""
        assert self.process is not None and self.process.stdin and self.process.stdout
        stdin, stdout = self.process.stdin, self.process.stdout
        with contextlib.suppress(Exception):  # it died: what it sent is kept, the rest read here
            _write_frame(stdin, job)
            _write_frame(stdin, index := self._next())
            while index >= 0 and (result := _read_frame(stdout)) is not None:
                done, columns, errors, lines = result
                # A table chunk at once: compact, where the columns are Python lists.
                frame = None if columns is None else self.frame_of(columns)
                self.sent[done] = (frame, errors, lines)
                self.bytes_done += self.pieces[done].stop - self.pieces[done].start
                # A bad record that fails the load: the pieces after it are not needed.
                index = -1 if errors and self.fail_fast else self._next()
                _write_frame(stdin, index)
        with contextlib.suppress(OSError):
            stdin.close()

    def _drain(self) -> None:
        assert self.process is not None and self.process.stderr is not None
        self.stderr = self.process.stderr.read()

    def collected(
        self, waiting: Callable[[], None] = lambda: None
    ) -> dict[int, tuple[Any, list[Any], int]]:
        """What the helper sent back, once it has ended; ``waiting()`` is called every
        tenth of a second meanwhile (to show its progress)."""
        for thread in self.threads:
            while thread.is_alive():
                thread.join(0.1)
                waiting()
        return self.sent

    def problem(self) -> str:
        """Why it ended early, in a few words: its exit status and last line of stderr."""
        if self.process is None:
            return f"cannot start {sys.executable}"
        try:
            status: int | None = self.process.wait(timeout=5)  # its output has ended: it is ending
        except subprocess.TimeoutExpired:
            status = None
        lines = self.stderr.decode("utf-8", "replace").strip().splitlines()
        return f"exit status {status}" + (f": {lines[-1]}" if lines else "")

    def stop(self) -> None:
        if self.process is not None:
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait()


Progress = Callable[[int, int], None]
"""``progress(bytes read, bytes in all)``."""


class _BytesHere:
    """The bytes read of a file read in pieces: those of the pieces read here (whole, and
    of the one being read) and those the helper has sent back."""

    def __init__(self, helper: Helper, size: int, progress: Progress | None) -> None:
        self.helper, self.size, self.progress = helper, size, progress
        self.whole = 0  # bytes of the pieces read here to their end
        self.current = 0  # bytes read of the piece being read here

    def within(self, piece: Piece) -> Progress | None:
        """The progress of one piece read here (its reader counts from the piece's start,
        and says the file's size once it ends)."""
        if self.progress is None:
            return None
        length = piece.stop - piece.start

        def within(done: int, _size: int) -> None:
            if done >= _size:  # the reader's last call: the piece is read
                self.whole, self.current = self.whole + length, 0
            else:
                self.current = min(done, length)
            self.show()

        return within

    def show(self, *, finished: bool = False) -> None:
        if self.progress is None:
            return
        done = self.size if finished else self.whole + self.current + self.helper.bytes_done
        self.progress(min(done, self.size), self.size)


def read_in_pieces(
    path: Path,
    size: int,
    options: Any,
    read_here: Callable[[Piece, Progress | None], Generator[Any, None, int | None]],
    flush: Callable[[], Iterator[Any]],
    warn: Callable[[str], None],
    frame_of: Callable[[Any], Any],
    renumber: Callable[[Any, int], Any],
    progress: Progress | None = None,
) -> Iterator[Any]:
    """The table chunks of a large JSONL file read by this process and the helper:
    ``read_here(piece, progress)`` reads a piece here, numbering its lines from its
    ``first_line`` (its rows gathered into chunks, ``flush`` yields the last one), and
    returns its number of lines, or None when the file broke within it (a read error:
    nothing past it is read, as one process stops there); ``frame_of`` makes a table chunk of the rows the helper
    sends as columns; ``warn`` is told when the helper failed.

    The file is cut without counting its lines (a pass over it that both processes
    would wait for): each process counts the lines of the pieces it reads. The helper
    numbers a piece's lines from 1, so ``renumber(chunk, lines before the piece)``
    gives its chunk the file's numbers; a piece in which it met a bad record is read
    again here, so that the records skipped and the first error name the right lines.

    ``progress(bytes read, size)`` counts the bytes of both processes: the pieces read
    here as they are read, the helper's as it sends each back.
    """
    import dataclasses

    helper = Helper(path, dataclasses.replace(options, progress=None))
    here = _BytesHere(helper, size, progress)
    try:
        pieces = cut(path, size, number=False)
        shared = PieceQueue(len(pieces))
        helper.begin(pieces, shared, frame_of)
        done_here, line = 0, 1
        while (index := shared.take_front()) is not None:
            done_here += 1
            piece = dataclasses.replace(pieces[index], first_line=line)
            read = yield from read_here(piece, here.within(piece))
            if read is None:
                return
            line += read
        sent = helper.collected(here.show)
        left = 0
        for piece in pieces[done_here:]:
            numbered = dataclasses.replace(piece, first_line=line)
            if piece.index in sent and not sent[piece.index][1]:
                yield from flush()  # the rows read here come first
                frame, _, lines = sent.pop(piece.index)
                if frame is not None:
                    yield renumber(frame, line - 1)
                line += lines
            else:  # the helper died with this piece, or met a bad record in it
                left += piece.index not in sent
                read = yield from read_here(numbered, None)
                if read is None:
                    return
                line += read
        here.show(finished=True)
        if left:
            warn(
                f"{path}: the helper process failed ({helper.problem()}); this process "
                f"read the {left} of {len(pieces)} pieces of the file it left"
            )
    finally:
        helper.stop()
