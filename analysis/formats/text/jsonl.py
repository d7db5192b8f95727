"""JSON and JSONL text: parsing with orjson, errors that say where, and reading
JSONL files (plain or gzipped) record by record."""

from __future__ import annotations

import contextlib
import io
import json
import os
import stat
import sys
import threading
import zlib
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any, BinaryIO, cast

import orjson

from analysis.errors import DamagedFileError, InputNotFoundError, LogFormatError
from analysis.formats.text import lean as lean_lines
from analysis.table.limits import (
    DEFAULT_LIMITS,
    INFLATION_FLOOR,
    LimitError,
    Limits,
    is_pipe,
    over_limit,
)


def parse_json(data: bytes) -> Any:
    """orjson for speed; the standard parser for what it refuses but Python writes (NaN)."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        pass
    try:
        value = json.loads(data)
    except UnicodeDecodeError as exc:
        raise json.JSONDecodeError(f"not UTF-8 ({exc.reason})", "", exc.start) from None
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply", "", 0) from None
    except json.JSONDecodeError:
        raise
    except ValueError:  # an integer of more than 4,300 digits (CPython's limit)
        digits = f"{sys.get_int_max_str_digits():,}"
        raise json.JSONDecodeError(f"an integer of more than {digits} digits", "", 0) from None
    if lean_lines.lone_surrogate(value):  # orjson refuses them; text that no table or file takes
        raise json.JSONDecodeError("a \\u escape of half a character (a lone surrogate)", "", 0)
    return value


def json_problem(error: json.JSONDecodeError) -> str:
    """What is wrong with a JSON text and where, for a message: "Expecting value, column
    7"; a message that ends in "at" reads on: "Unterminated string starting at column 9"."""
    return f"{error.msg}{'' if error.msg.endswith(' at') else ','} column {error.colno}"


def read_json_file(path: Path, limits: Limits = DEFAULT_LIMITS) -> Any:
    """One JSON document, refused past ``max_record_bytes`` without being read whole."""
    try:
        with path.open("rb") as handle:
            data = handle.read(limits.max_record_bytes + 1)
    except OSError as exc:
        raise InputNotFoundError(f"{path}: cannot read ({exc.strerror})") from exc
    if len(data) > limits.max_record_bytes:
        raise _too_long(path, "a JSON document", limits)
    try:
        return parse_json(data)
    except json.JSONDecodeError as exc:
        raise LogFormatError(f"{path}:{exc.lineno}: not valid JSON ({json_problem(exc)})") from exc


def _too_long(where: object, what: str, limits: Limits) -> LimitError:
    return over_limit(
        where,
        f"{what} of more than {limits.max_record_bytes:,} bytes",
        "max_record_bytes",
        limits.max_record_bytes,
    )


class _Counted:
    """A binary stream that counts the bytes read from it (a pipe has no position)."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream, self.count = stream, 0

    def read(self, size: int = -1) -> bytes:
        # In small pieces: the inflation ratio is then seen after a few lines of a bomb
        # (128 KiB at a time, 4 GB of newlines would be 13 million lines to it).
        data = self.stream.read(min(size, 1 << 13) if size >= 0 else 1 << 13)
        self.count += len(data)
        return data


_UNZIPPED_BUFFER = 1 << 17
"""Bytes inflated at a time into the buffer lines are read from."""


class _Gunzip(io.RawIOBase):
    """The inflated bytes of a gzip stream of any number of members (concatenated gzip
    files), read through ``zlib`` in one tight loop: Python's ``gzip`` module spends
    some 70 microseconds on each member (200,000 one-line members took 15 s). Each
    member is checked by zlib (header, CRC and length); zero bytes between members are
    padding, as to ``gzip``; a stream that ends within a member raises ``EOFError`` once
    the bytes inflated before the cut have been read."""

    def __init__(self, source: _Counted) -> None:
        self.source, self.pending, self.at = source, b"", 0
        self.member: Any = None  # the zlib decompressor of the member being read
        self.feed, self.left = _FIRST_FEED, -1  # left: members to read, -1 for all
        self.failure: Exception | None = None  # a damaged or cut stream, once seen

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self.failure is not None:
            raise self.failure
        done = self._inflate(memoryview(buffer).cast("B"))
        if self.failure is not None and not done:
            raise self.failure
        return done

    def _inflate(self, out: memoryview) -> int:
        """Fill ``out`` (or what is left of the stream); how many bytes. A damaged or cut
        stream sets :attr:`failure`, raised once what came before it is read."""
        want, done = len(out), 0
        # In locals: the loop turns once a member (millions of them in a hostile file).
        pending, at, member, feed, left = self.pending, self.at, self.member, self.feed, self.left
        view, start = memoryview(pending), zlib.decompressobj
        while done < want:
            if at >= len(pending):
                pending, at = self.source.read(_LAST_FEED), 0
                view = memoryview(pending)
                if not pending:
                    if member is not None:
                        self.failure = EOFError(
                            "Compressed file ended before the end-of-stream marker was reached"
                        )
                    break
            if member is None:
                if pending[at] == 0:  # zero bytes between members are padding
                    at = len(pending) - len(pending[at:].lstrip(b"\0"))
                    continue
                if not left:
                    break  # (the members wanted are read: the stream ends there)
                member, feed, left = start(zlib.MAX_WBITS | 16), _FIRST_FEED, left - 1
            # A few bytes at a time after a member starts, more as it goes on: zlib
            # copies what a member leaves of its input (a copy per member of a
            # megabyte made a file of small members quadratic).
            # (zlib allocates the most it may return up to 32 KiB: once a member, 128 KiB
            # cost a microsecond more).
            given = view[at : at + feed]
            try:
                data = member.decompress(given, min(want - done, feed << 7))
            except zlib.error as exc:
                self.failure = exc
                break
            done += len(data)
            out[done - len(data) : done] = data
            if member.eof:
                at += len(given) - len(member.unused_data)
                member = None
            else:
                at += len(given) - len(member.unconsumed_tail)
                feed = min(2 * feed, _LAST_FEED)
        self.pending, self.at, self.member, self.feed, self.left = pending, at, member, feed, left
        return done


_FIRST_FEED, _LAST_FEED = 1 << 8, 1 << 13
"""Compressed bytes given to zlib at once: at a member's start, at most."""


Progress = Callable[[int, int], None]


def jsonl_records(
    path: Path,
    limits: Limits = DEFAULT_LIMITS,
    *,
    progress: Progress | None = None,
    part: tuple[int, int, int] | None = None,
    lean: lean_lines.LeanPlan | None = None,
    members: int | None = None,
) -> Generator[tuple[int, Any], None, int]:
    """Yield (line number, parsed object or the LogFormatError of an unparsable line);
    return the number of lines read (blank ones included).

    Plain or gzipped, told apart by the first bytes, read once (a pipe or a FIFO can be
    read only once). A line past ``max_record_bytes`` is a bad record, skipped unread
    to its end; a gzip stream that inflates past ``max_inflation`` is refused.
    ``progress(bytes read, bytes in all)`` is called as the file is read (the
    compressed bytes of a gzip file; not for a pipe, whose size is unknown).
    ``part`` is (start, stop, number of its first line): the lines of the bytes from
    ``start`` (where a line starts) up to ``stop`` (just after a line ends) of an
    uncompressed file, numbered as in the whole file. With ``lean`` (the plan of a field
    map), a line of :data:`analysis.formats.text.lean.LEAN_MIN_BYTES` or more has its flat token
    lists folded as they are parsed (:func:`analysis.formats.text.lean.lean_record`): the same
    canonical row, and the same errors, from a fraction of the memory. ``members`` reads
    no more than that many members of a gzip file (a probe's bound: the first record of a
    file of millions of empty members is not worth reading them all twice)."""
    try:
        # Lines of token-level logs run to megabytes: a large buffer saves re-copying them.
        with _open(path) as raw:
            lines = _Lines(path, raw, limits, progress)
            lines.lean = lean
            if members is not None:
                lines.gunzip.left = members
            if part is not None:
                lines.within(*part)
            return (yield from lines.records())
    except (OSError, EOFError, UnicodeDecodeError, zlib.error) as exc:
        if isinstance(exc, FileNotFoundError):
            raise InputNotFoundError(f"{path}: no such file") from exc
        raise DamagedFileError(f"{path}: cannot be read as (gzipped) JSONL ({exc})") from exc


PIPE_WRITER_SECONDS = 5.0
"""How long a pipe or FIFO is waited on for a writer to open it (``mkfifo`` with no
program writing it yet); past it, it is an input that cannot be read (exit 3). A writer
that has opened it may take as long as it likes to write."""


def _open(path: Path, writer_seconds: float = PIPE_WRITER_SECONDS) -> BinaryIO:
    """The file, opened to be read once. A FIFO is opened in a helper thread, where
    ``open()`` blocks until a writer opens it, and waited on half a second at a time (the
    main thread, blocked in ``open()``, would not see a Ctrl-C); with no writer after
    ``writer_seconds``, the thread is released (by opening the FIFO to write, and closing
    it) and the input refused."""
    if not is_pipe(path):
        return open(path, "rb", buffering=1 << 22)
    opened: list[int | BaseException] = []

    def reader() -> None:
        try:
            opened.append(os.open(path, os.O_RDONLY))
        except BaseException as exc:  # handed to the main thread
            opened.append(exc)

    thread = threading.Thread(target=reader, name="fifo-open", daemon=True)
    thread.start()
    waited = 0.0
    try:
        while thread.is_alive() and waited < writer_seconds:
            thread.join(min(0.5, writer_seconds - waited))
            waited += 0.5
    finally:
        if thread.is_alive():  # no writer (or Ctrl-C): release the thread's open()
            with contextlib.suppress(OSError):
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            thread.join(5)
            for fd in opened:
                if isinstance(fd, int):
                    os.close(fd)
            opened.clear()
    if not opened:
        raise InputNotFoundError(
            f"{path}: a pipe or FIFO that no program opened to write within "
            f"{writer_seconds:g} s; start the program that writes it first, or give the log "
            "file itself"
        )
    fd = opened[0]
    if isinstance(fd, BaseException):
        raise fd
    return open(fd, "rb", buffering=1 << 22)


_LONG_LINE_PIECE = 16 << 20
"""A line longer than this is read this many bytes at a time."""

_CHECK_EVERY = 1 << 18
"""Bytes of lines read between two checks of the inflation ratio (and progress calls)."""


class _Lines:
    """The lines of one JSONL file, within the limits."""

    def __init__(
        self, path: Path, raw: BinaryIO, limits: Limits, progress: Progress | None
    ) -> None:
        self.path, self.limits, self.progress = path, limits, progress
        self.counted = _Counted(raw)
        self.compressed = cast(io.BufferedReader, raw).peek(2)[:2] == b"\x1f\x8b"
        self.readline: Callable[[int], bytes] = raw.readline
        self.stream: io.BufferedReader[Any] = cast(io.BufferedReader, raw)
        self.gunzip = _Gunzip(self.counted)
        if self.compressed:
            unzipped = io.BufferedReader(self.gunzip, _UNZIPPED_BUFFER)
            self.readline, self.stream = unzipped.readline, unzipped
        status = os.fstat(raw.fileno())
        self.size = status.st_size if stat.S_ISREG(status.st_mode) else 0  # not a pipe's
        self.read, self.next_check = 0, _CHECK_EVERY
        self.raw, self.first, self.length = raw, 1, -1
        self.lean: lean_lines.LeanPlan | None = None

    def within(self, start: int, stop: int, first: int) -> None:
        """Read only the lines of bytes ``start`` to ``stop`` of a plain file (numbered
        from ``first``): one piece of a file read by several processes."""
        self.raw.seek(start)
        self.first, self.length = first, stop - start

    def records(self) -> Generator[tuple[int, Any], None, int]:
        """The lines' records (see :func:`jsonl_records`); returns how many lines."""
        path, most = self.path, self.limits.max_record_bytes
        readline = self.readline
        number = self.first - 1
        while self.length < 0 or self.read < self.length:
            if not (line := self.readline_within(most + 1)):
                break
            number += 1
            self.read += len(line)
            if self.read >= self.next_check:
                self.check()
            if len(line) > most and not line.endswith(b"\n"):
                yield number, _too_long(f"{path}:{number}", "a line", self.limits)
                self.skip_rest(readline)
                continue
            if line.isspace():  # (blank; strip() would copy a long line)
                number += self.skip_blank()
                continue
            try:
                yield number, self.parse(line)
            except json.JSONDecodeError as exc:
                # Yielded, not raised, so that --on-bad-record skip can go on reading.
                yield number, _bad_line(path, number, line, exc)
        if self.progress is not None and self.size:
            self.progress(self.size, self.size)
        return number - self.first + 1

    def readline_within(self, size: int) -> bytes:
        """``readline(size)``; a line longer than :data:`_LONG_LINE_PIECE` is read in pieces
        of that size into one growing buffer (a long readline holds its line twice: the
        pieces it read, and them joined)."""
        line = self.readline(min(size, _LONG_LINE_PIECE))
        if len(line) < _LONG_LINE_PIECE or line.endswith(b"\n"):
            return line
        whole = bytearray(line)
        del line
        while len(whole) < size and not whole.endswith(b"\n"):
            if not (piece := self.readline(min(size - len(whole), _LONG_LINE_PIECE))):
                break
            whole += piece
        return whole  # type: ignore[return-value]  # (read as bytes are: find, slices, orjson)

    def parse(self, line: bytes) -> Any:
        """A line's record: lean when it is large, else (or when it is not as the lean
        path expects) parsed whole."""
        if self.lean is not None and len(line) >= lean_lines.LEAN_MIN_BYTES:
            record = lean_lines.lean_record(line, self.lean)
            if record is not lean_lines.NOT_LEAN:
                return record
        return parse_json(line)

    def skip_blank(self) -> int:
        """Read on past the blank lines that follow a blank line, a buffer at a time (one
        at a time, a file of newlines was read at 3.5 MB/s); how many."""
        skipped = 0
        while True:
            ahead = self.stream.peek(1)[: min(1 << 16, self.limits.max_record_bytes)]
            if self.length >= 0:
                ahead = ahead[: self.length - self.read]
            blank = ahead[: len(ahead) - len(ahead.lstrip(b" \t\r\n"))]
            blank = blank[: blank.rfind(b"\n") + 1]  # whole lines only
            if not blank:
                return skipped
            self.stream.read(len(blank))
            skipped += blank.count(b"\n")
            self.read += len(blank)
            if self.read >= self.next_check:
                self.check()

    def skip_rest(self, readline: Callable[[int], bytes]) -> None:
        """Read on to the end of a line too long to hold, a bounded piece at a time."""
        while piece := readline(_CHECK_EVERY):
            self.read += len(piece)
            if self.read >= self.next_check:
                self.check()
            if piece.endswith(b"\n"):
                return

    def check(self) -> None:
        """Refuse a gzip stream inflating past the limit; say how far the file is read."""
        self.next_check = self.read + _CHECK_EVERY
        if not self.compressed:
            self.counted.count = self.read
        taken = self.counted.count
        ratio = self.limits.max_inflation
        if self.compressed and self.read >= INFLATION_FLOOR and self.read > ratio * taken:
            raise over_limit(
                self.path,
                f"a gzip stream that inflates more than {ratio} times ({taken:,} bytes "
                f"read gave {self.read:,})",
                "max_inflation",
                ratio,
            )
        if self.progress is not None and self.size:
            self.progress(min(taken, self.size), self.size)


def _bad_line(path: Path, number: int, line: bytes, exc: json.JSONDecodeError) -> LogFormatError:
    """A line that is not JSON, saying where (past the line's own text: the record is cut
    short, or spans lines)."""
    text = line.rstrip(b"\r\n").decode("utf-8", "replace")
    at = (
        json_problem(exc)
        if exc.lineno == 1 and exc.pos < len(text)
        else "the line ends before the record does ("
        + (json_problem(exc) if exc.lineno == 1 else exc.msg)
        + ")"
    )
    return LogFormatError(f"{path}:{number}: not valid JSON ({at})")
