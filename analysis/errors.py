"""Errors a person can act on: each names what is wrong, where, and what to do."""

from __future__ import annotations


class ReplayError(Exception):
    """Base of every error dressage-replay raises on purpose; carries its exit code."""

    exit_code = 1


class InputNotFoundError(ReplayError):
    """An input path does not exist or cannot be read."""

    exit_code = 3


class UnknownFormatError(ReplayError):
    """An input is not in any format dressage-replay reads."""

    exit_code = 4


class LogFormatError(ReplayError):
    """A record is malformed (invalid JSON, wrong type, inconsistent token versions)."""

    exit_code = 5


class DamagedFileError(LogFormatError):
    """A whole file cannot be read in its format (a truncated gzip, a damaged archive or
    Parquet file): no record in it is at fault, the file is."""


class UnsafePickleError(LogFormatError):
    """A pickle needs more than plain containers and scalars; only --trust-pickle loads it."""


class MissingFieldError(ReplayError):
    """The log lacks a field the command needs."""

    exit_code = 6


class ConfigError(ReplayError):
    """A setting is invalid (negative keep_versions, uninferable batch size, ...)."""

    exit_code = 7


class OutputError(ReplayError):
    """An output cannot be written, or would overwrite an input."""

    exit_code = 8


EXIT_INTERRUPTED = 130
"""Exit code after Ctrl-C (128 + SIGINT)."""


def counted(count: int, noun: str, nouns: str | None = None) -> str:
    """``count`` with its noun in the right number, for messages: "1 file", "2 files"."""
    return f"{count:,} {noun if count == 1 else nouns or noun + 's'}"
