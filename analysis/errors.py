"""Errors a person can act on: each names what is wrong, where, and what to do.

A message that tells the user to change a setting names it with :func:`setting` (a
:class:`SettingRef`) composed into a :class:`Message` by ``+``, so that the library and the
command line each say it in their own words: ``str(error)`` gives the library's keyword
(``on_bad_record=skip``) and the command line renders the same error with its flag
(``--on-bad-record skip``) through :meth:`ReplayError.render`. Nothing reads a message's
text back: an error that adds advice to another's message keeps the two apart
(:meth:`ReplayError.advised`), and a message crosses a process boundary as its parts
(:meth:`Message.plain`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import IntEnum, StrEnum
from typing import Any, Self


class ExitCode(IntEnum):
    """Every exit code of ``dressage-replay``, in one table (docs/pages/reference/exit-codes.md lists the same)."""

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


@dataclass(frozen=True, slots=True)
class SettingRef:
    """A setting a message refers to, by its library keyword: ``value`` is what to set it
    to (None: the setting itself). The library says it ``name=value``; the command line
    says its own flag for it. Composes with text into a :class:`Message` by ``+``."""

    name: str
    value: str | None = None

    def said(self, say: Callable[[str, str | None], str]) -> str:
        return say(self.name, self.value)

    def __str__(self) -> str:
        return _keyword(self.name, self.value)

    def __format__(self, spec: str) -> str:
        # Inside an f-string the reference would be lost to the command line's rendering.
        raise TypeError(f"compose {self!r} into a message with +, not in an f-string")

    def __add__(self, other: str | SettingRef) -> Message:
        if not isinstance(other, str | SettingRef):
            return NotImplemented
        return Message(self, other)

    def __radd__(self, other: str) -> Message:
        if not isinstance(other, str):
            return NotImplemented
        return Message(other, self)


Part = str | SettingRef
"""A piece of a :class:`Message`: text, or a setting it refers to."""

PlainPart = str | tuple[str, str | None]
"""A part as plain data (text, or a setting's (keyword, value)), to cross a process
boundary by :mod:`marshal` (:meth:`Message.plain`, :meth:`Message.from_plain`)."""


class Message(str):
    """Text for a person (an error, a warning, a note) made of text and the settings it
    refers to (:class:`SettingRef`). As a ``str`` it reads in the library's words
    (``on_bad_record=skip``); :meth:`render` says each setting as its reader wants (the
    command line: its flag). Messages compose by ``+`` with text, settings and each other,
    keeping their parts; an f-string or ``str.join`` would keep only the library's words."""

    _parts: tuple[Part, ...]

    def __new__(cls, *parts: Part) -> Self:
        joined: list[Part] = []
        for part in parts:
            pieces = part._parts if isinstance(part, Message) else (part,)
            for piece in pieces:
                if isinstance(piece, str):
                    if not piece:
                        continue
                    if joined and isinstance(joined[-1], str):
                        joined[-1] += piece
                        continue
                    joined.append(str(piece))
                else:
                    joined.append(piece)
        text = super().__new__(cls, "".join(map(str, joined)))
        text._parts = tuple(joined)
        return text

    @property
    def parts(self) -> tuple[Part, ...]:
        """The text and the settings, in order (adjacent text joined, none empty)."""
        return self._parts

    @property
    def settings(self) -> tuple[SettingRef, ...]:
        """The settings the message refers to, in order."""
        return tuple(part for part in self._parts if isinstance(part, SettingRef))

    def render(self, say: Callable[[str, str | None], str]) -> str:
        """The message with each setting said by ``say(keyword, value or None)``."""
        return "".join(part if isinstance(part, str) else part.said(say) for part in self._parts)

    def plain(self) -> tuple[PlainPart, ...]:
        """The parts as plain data (for :mod:`marshal`); :meth:`from_plain` rebuilds it."""
        return tuple(
            part if isinstance(part, str) else (part.name, part.value) for part in self._parts
        )

    @classmethod
    def from_plain(cls, parts: Iterable[PlainPart]) -> Message:
        return cls(*(part if isinstance(part, str) else SettingRef(*part) for part in parts))

    def __add__(self, other: str | SettingRef) -> Message:
        if not isinstance(other, str | SettingRef):
            return NotImplemented
        return Message(self, other)

    def __radd__(self, other: str) -> Message:
        if not isinstance(other, str):
            return NotImplemented
        return Message(other, self)

    def __reduce__(self) -> tuple[Any, ...]:
        return Message, self._parts


class Explained(Message):
    """A message said in one short line, with the detail behind it (:attr:`detail`): the
    command line shows the detail with ``--verbose`` and ``--json`` carries it; composed
    with more text it is a plain :class:`Message` again."""

    detail: str

    def __new__(cls, *parts: Part, detail: str = "") -> Explained:
        text = super().__new__(cls, *parts)
        text.detail = detail
        return text

    def __reduce__(self) -> tuple[Any, ...]:
        return _explained, (self._parts, self.detail)


def _explained(parts: tuple[Part, ...], detail: str) -> Explained:
    return Explained(*parts, detail=detail)


def detail_of(text: str) -> str:
    """The detail behind a message said in short (:class:`Explained`); "" for any other."""
    return text.detail if isinstance(text, Explained) else ""


def render(text: str, say: Callable[[str, str | None], str]) -> str:
    """``text`` with each setting it refers to (if it is a :class:`Message`) said by
    ``say(keyword, value or None)``."""
    return text.render(say) if isinstance(text, Message) else text


OFF = "none"
"""The value of a setting that turns it off, as the command line says it (``--max-preempts
none``); Python says ``None``."""


def _keyword(name: str, value: str | None) -> str:
    if value is None:
        return name
    return f"{name}=None" if value == OFF else f"{name}={value}"


def setting(name: str, value: object = None) -> SettingRef:
    """A reference to a setting inside a message, by its library keyword; compose it with
    text by ``+`` (not inside an f-string, which keeps only the library's words).

    ``value`` is what to set it to (None: the setting itself). ``str()`` of the error
    says ``name=value``; the command line says its own flag for it.

    Examples
    --------
    >>> str(ConfigError("pass " + setting('batch_groups', 'B')))
    'pass batch_groups=B'
    >>> ConfigError("pass " + setting('batch_groups', 'B')).render(lambda n, v: f"--x {v}")
    'pass --x B'
    """
    return SettingRef(name, None if value is None else f"{value}" or None)


class ReplayError(Exception):
    """Base of every error dressage-replay raises on purpose; carries its exit code."""

    exit_code: int = ExitCode.INTERNAL
    skip_reason: SkipReason = SkipReason.BAD_RECORD
    """What a load that skips bad input counts this error as."""
    _base: Message | None = None

    @classmethod
    def advised(cls, base: str, advice: str) -> Self:
        """This error saying ``base`` (what is wrong) and then ``advice`` (what to do,
        with its own separator), kept apart: :attr:`base` is the message without it."""
        error = cls(Message(base, advice))
        error._base = Message(base)
        return error

    @property
    def message(self) -> Message:
        """The message, with its setting references (to build on it)."""
        if not self.args:
            return Message()
        first = self.args[0]
        return first if isinstance(first, Message) else Message(str(first))

    @property
    def base(self) -> Message:
        """The message without the advice it ends with, if made by :meth:`advised`."""
        return self.message if self._base is None else self._base

    @property
    def settings(self) -> list[tuple[str, str | None]]:
        """The settings the message refers to, as (keyword, value or None), in order."""
        return [(ref.name, ref.value) for ref in self.message.settings]

    def render(self, say: Callable[[str, str | None], str]) -> str:
        """The message with each setting said by ``say(keyword, value or None)``."""
        return self.message.render(say)

    def __str__(self) -> str:
        return str.__str__(self.message)


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
