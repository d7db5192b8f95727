"""What the readers of other systems' logs share: an empty canonical row, checked
look-ups that fail with one-line errors naming the record, and the step a file name or
folder name gives (docs/semantics.md, "Other systems' logs").

Like :mod:`analysis.formats.fields`, this module imports no polars.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from analysis.errors import LogFormatError, MissingFieldError, ReplayError, setting, short_repr
from analysis.table.labels import Span
from analysis.table.schema import CANONICAL_COLUMNS, MAX_TOKENS

PeerItem = tuple[int, Any, dict[str, Any] | ReplayError]
"""What a peer reader yields per line: (line number, raw record, canonical row or the
error that line deserves)."""


def empty_row() -> dict[str, Any]:
    """A canonical row with every column empty (no end version, one segment)."""
    row: dict[str, Any] = dict.fromkeys(CANONICAL_COLUMNS)
    row["segment_index"] = 0
    row["end_version_derived"] = False
    return row


def an_object(record: Any, where: str, what: str) -> dict[str, Any]:
    """The record itself, if it is a JSON object."""
    if isinstance(record, ReplayError):
        raise record
    if not isinstance(record, dict):
        raise LogFormatError(
            f"{where}: {what} must be a JSON object (found {type(record).__name__})"
        )
    return record


def at(record: dict[str, Any], path: str) -> Any:
    """The value at a dotted path, None when a step of it is missing or not an object."""
    value: Any = record
    for part in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def required(record: dict[str, Any], path: str, where: str, what: str) -> Any:
    """The value at ``path``, or a missing-field error naming the record and the field."""
    value = at(record, path)
    if value is None:
        raise MissingFieldError.advised(
            f"{where}: {what} has no {path} (found fields {_fields(record)})",
            "; fix the record or pass "
            + setting("on_bad_record", "skip")
            + " to leave such records out",
        )
    return value


def _fields(record: dict[str, Any]) -> str:
    names = list(record)
    return ", ".join(names[:20]) + (" ..." if len(names) > 20 else "")


def required_whole(record: dict[str, Any], path: str, where: str, what: str) -> int:
    """A whole-number field that must be there."""
    return cast(int, whole(required(record, path, where, what), where, path))


def whole(value: Any, where: str, what: str) -> int | None:
    """An integer field (None stays None): a bool, a fraction or text is a bad record."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not -(2**63) <= value < 2**63:
        raise LogFormatError(f"{where}: {what} must be a whole number (found {short_repr(value)})")
    return value


def count(value: Any, where: str, what: str) -> int | None:
    """A token count: a whole number from 0 to MAX_TOKENS."""
    number = whole(value, where, what)
    if number is not None and not 0 <= number <= MAX_TOKENS:
        raise LogFormatError(
            f"{where}: {what} must be between 0 and {MAX_TOKENS:,} (found {number:,})"
        )
    return number


def number(value: Any) -> float | None:
    """A reward: a finite number, else None (as §8.3 reads slime's rewards)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        result = float(value)
    except OverflowError:
        return None
    return result if math.isfinite(result) else None


def one(value: Any) -> Any:
    """A field of a batch of one (``[x]``) as ``x``; anything else as it is."""
    return value[0] if isinstance(value, list) and len(value) == 1 else value


def start_end_spans(start: int, end: int) -> list[Span]:
    """A trajectory known only by its first and last weight version: the runs
    ``[0, 1) start`` and, when the end differs, ``[1, 2) end``, indexed by position (as
    slime's per-call ``weight_versions`` are, docs/semantics.md §1.1), not by token."""
    if end == start:
        return [(0, 1, str(start))]
    return [(0, 1, str(start)), (1, 2, str(end))]


_NUMBER = re.compile(r"\d+")


def trailing_number(name: str, prefix: str = "") -> int | None:
    """The whole number a name holds after ``prefix`` (``step_12`` -> 12), else None."""
    if not name.startswith(prefix):
        return None
    rest = name[len(prefix) :]
    return int(rest) if _NUMBER.fullmatch(rest) else None


def numbered_files(paths: list[Path], key: Callable[[Path], Any]) -> list[Path]:
    """Paths in the order of the numbers ``key`` finds in them (a number, or a tuple of
    them; None last), then by path."""

    def order(path: Path) -> tuple[int, Any, str]:
        found = key(path)
        return (0, found, str(path)) if found is not None else (1, 0, str(path))

    return sorted(paths, key=order)
