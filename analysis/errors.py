"""Errors a person can act on: each names what is wrong, where, and what to do.

A message that tells the user to change a setting names it with :func:`setting`, so that
the library and the command line each say it in their own words: ``str(error)`` gives the
library's keyword (``on_bad_record='skip'``) and the command line renders the same error
with its flag (``--on-bad-record skip``) through :meth:`ReplayError.render`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from enum import IntEnum, StrEnum
from typing import Any


class ExitCode(IntEnum):
    """Every exit code of ``dressage-replay``, in one table (the README lists the same)."""

    OK = 0
    INTERNAL = 1
    """A bug: an error nobody raised on purpose."""
    USAGE = 2
    """Options or arguments of the wrong shape."""
    INPUT_NOT_FOUND = 3
    UNKNOWN_FORMAT = 4
    LOG_FORMAT = 5
    MISSING_FIELD = 6
    CONFIG = 7
    OUTPUT = 8
    DISAGREES = 9
    """``verify``: the replay disagrees with what the run's own files say happened."""
    OUT_OF_MEMORY = 10
    """The process ran out of memory (a ``MemoryError``): the work needs more than it got."""
    INTERRUPTED = 130
    """Ctrl-C (128 + SIGINT)."""
    STDOUT_GONE = 141
    """The reader of standard output went away (128 + SIGPIPE), as after ``| head``."""
    TERMINATED = 143
    """SIGTERM (128 + 15), sent by ``kill``, ``timeout`` or a job scheduler."""


EXIT_INTERRUPTED = ExitCode.INTERRUPTED


class SkipReason(StrEnum):
    """Why a load skipped something (``on_bad_record="skip"``), as the keys of ``skipped``
    in ``--json`` name it; each error class says which is its own (:attr:`ReplayError.skip_reason`)."""

    BAD_RECORD = "bad record"
    DAMAGED_FILE = "damaged file"
    MISSING_FIELD = "missing field"
    UNREADABLE_FILE = "unreadable file"

    @property
    def nouns(self) -> tuple[str, str]:
        """The thing skipped, singular and plural, for the warning."""
        return _SKIP_NOUNS[self]


_SKIP_NOUNS = {
    SkipReason.BAD_RECORD: ("bad record", "bad records"),
    SkipReason.DAMAGED_FILE: ("damaged file", "damaged files"),
    SkipReason.MISSING_FIELD: ("record missing a field", "records missing a field"),
    SkipReason.UNREADABLE_FILE: ("unreadable file", "unreadable files"),
}

_SETTING = re.compile("\x00([a-z_]+)\x01([^\x00]*)\x00")


class Message(str):
    """Text for a person (a warning, a note) that may refer to settings: it reads in the
    library's words, and :attr:`raw` keeps the references for the command line to render."""

    raw: str

    def __new__(cls, raw: str) -> Message:
        text = super().__new__(cls, render(raw, _keyword))
        text.raw = raw
        return text


def render(text: str, say: Callable[[str, str | None], str]) -> str:
    """``text`` (a message, or a :class:`Message`'s raw text) with each setting it refers to
    said by ``say(keyword, value or None)``."""
    raw = getattr(text, "raw", text)
    return _SETTING.sub(lambda m: say(m.group(1), m.group(2) or None), raw)


def _keyword(name: str, value: str | None) -> str:
    return name if value is None else f"{name}={value}"


def setting(name: str, value: object = None) -> str:
    """A reference to a setting inside an error message, by its library keyword.

    ``value`` is what to set it to (None: the setting itself). ``str()`` of the error
    says ``name=value``; the command line says its own flag for it.

    Examples
    --------
    >>> str(ConfigError(f"pass {setting('batch_groups', 'B')}"))
    'pass batch_groups=B'
    >>> ConfigError(f"pass {setting('batch_groups', 'B')}").render(lambda n, v: f"--x {v}")
    'pass --x B'
    """
    return f"\x00{name}\x01{'' if value is None else value}\x00"


class ReplayError(Exception):
    """Base of every error dressage-replay raises on purpose; carries its exit code."""

    exit_code: int = ExitCode.INTERNAL
    skip_reason: SkipReason = SkipReason.BAD_RECORD
    """What a load that skips bad input counts this error as."""

    @property
    def raw(self) -> str:
        """The message with its setting references unrendered (to build on it)."""
        return getattr(self.args[0], "raw", str(self.args[0])) if self.args else ""

    @property
    def settings(self) -> list[tuple[str, str | None]]:
        """The settings the message refers to, as (keyword, value or None), in order."""
        return [(name, value or None) for name, value in _SETTING.findall(self.raw)]

    def render(self, say: Callable[[str, str | None], str]) -> str:
        """The message with each setting said by ``say(keyword, value or None)``."""
        return render(self.raw, say)

    def __str__(self) -> str:
        return self.render(_keyword)


class InputNotFoundError(ReplayError):
    """An input path does not exist or cannot be read."""

    exit_code = ExitCode.INPUT_NOT_FOUND
    skip_reason = SkipReason.UNREADABLE_FILE


class UnknownFormatError(ReplayError):
    """An input is not in any format dressage-replay reads."""

    exit_code = ExitCode.UNKNOWN_FORMAT


class LogFormatError(ReplayError):
    """A record is malformed (invalid JSON, wrong type, inconsistent token versions)."""

    exit_code = ExitCode.LOG_FORMAT


class DamagedFileError(LogFormatError):
    """A whole file cannot be read in its format (a truncated gzip, a damaged archive or
    Parquet file): no record in it is at fault, the file is."""

    skip_reason = SkipReason.DAMAGED_FILE


class UnsafePickleError(LogFormatError):
    """A pickle needs more than plain containers and scalars; only ``trust_pickle`` loads it."""


class MissingFieldError(ReplayError):
    """The log lacks a field the command needs."""

    exit_code = ExitCode.MISSING_FIELD
    skip_reason = SkipReason.MISSING_FIELD


class ConfigError(ReplayError):
    """A setting is invalid (negative keep_versions, uninferable batch size, ...)."""

    exit_code = ExitCode.CONFIG


class SettingSyntaxError(ConfigError):
    """A setting written in a shape that does not parse (a K list, a field mapping): a usage
    error on the command line, where a value out of range is a plain :class:`ConfigError`."""


class NoRoomError(ReplayError):
    """An input that needs more memory than the process can have, told before it is read."""

    exit_code = ExitCode.OUT_OF_MEMORY


class OutputError(ReplayError):
    """An output cannot be written, or would overwrite an input."""

    exit_code = ExitCode.OUTPUT


def counted(count: int, noun: str, nouns: str | None = None) -> str:
    """``count`` with its noun in the right number, for messages: "1 file", "2 files"."""
    return f"{count:,} {noun if count == 1 else nouns or noun + 's'}"


def short_repr(value: Any) -> str:
    """A value for an error message, cut so that a huge one cannot flood the terminal."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
