"""JSON and JSONL text: parsing with orjson, errors that say where, and reading
JSONL files (plain or gzipped) record by record."""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from analysis.errors import DamagedFileError, InputNotFoundError, LogFormatError


def parse_json(data: bytes) -> Any:
    """orjson for speed; the standard parser for what it refuses but Python writes (NaN)."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(data)
    except UnicodeDecodeError as exc:
        raise json.JSONDecodeError(f"not UTF-8 ({exc.reason})", "", exc.start) from None
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply", "", 0) from None


def json_problem(error: json.JSONDecodeError) -> str:
    """What is wrong with a JSON text and where, for a message: "Expecting value, column
    7"; a message that ends in "at" reads on: "Unterminated string starting at column 9"."""
    return f"{error.msg}{'' if error.msg.endswith(' at') else ','} column {error.colno}"


def read_json_file(path: Path) -> Any:
    try:
        with path.open("rb") as handle:
            return parse_json(handle.read())
    except json.JSONDecodeError as exc:
        raise LogFormatError(f"{path}:{exc.lineno}: not valid JSON ({json_problem(exc)})") from exc
    except OSError as exc:
        raise InputNotFoundError(f"{path}: cannot read ({exc.strerror})") from exc


def jsonl_records(
    path: Path, part: tuple[int, int, int] | None = None
) -> Iterator[tuple[int, Any]]:
    """Yield (line number, parsed object or the LogFormatError of an unparsable line).

    ``part`` is (start, stop, number of its first line): the lines of the bytes from
    ``start`` (where a line starts) up to ``stop`` (just after a line ends) of an
    uncompressed file, numbered as in the whole file."""
    try:
        with path.open("rb") as probe:
            compressed = probe.read(2) == b"\x1f\x8b"
        # Lines of token-level logs run to megabytes: a large buffer saves re-copying them.
        with gzip.open(path, "rb") if compressed else open(path, "rb", buffering=1 << 22) as handle:
            lines: Iterator[bytes] = handle
            first = 1
            if part is not None:
                start, stop, first = part
                handle.seek(start)
                lines = _lines_within(handle, stop - start)
            yield from _parsed_lines(path, lines, first)
    except (OSError, EOFError, UnicodeDecodeError, zlib.error) as exc:
        if isinstance(exc, FileNotFoundError):
            raise InputNotFoundError(f"{path}: no such file") from exc
        raise DamagedFileError(f"{path}: cannot be read as (gzipped) JSONL ({exc})") from exc


def _lines_within(handle: Any, length: int) -> Iterator[bytes]:
    """The lines of the next ``length`` bytes of ``handle`` (which end where a line does)."""
    for line in handle:
        yield line
        length -= len(line)
        if length <= 0:
            return


def _parsed_lines(path: Path, lines: Iterator[bytes], first: int) -> Iterator[tuple[int, Any]]:
    for number, line in enumerate(lines, start=first):
        if not line.strip():
            continue
        try:
            yield number, parse_json(line)
        except json.JSONDecodeError as exc:
            # Yielded, not raised, so that --on-bad-record skip can go on reading.
            # Past the line's own text: the record is cut short (or spans lines).
            text = line.rstrip(b"\r\n").decode("utf-8", "replace")
            at = (
                json_problem(exc)
                if exc.lineno == 1 and exc.pos < len(text)
                else "the line ends before the record does ("
                + (json_problem(exc) if exc.lineno == 1 else exc.msg)
                + ")"
            )
            yield number, LogFormatError(f"{path}:{number}: not valid JSON ({at})")
