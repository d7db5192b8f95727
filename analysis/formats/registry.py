"""Every format a log is read as, listed once: ``--format``, discovery, the load and
``inspect`` find a format here by its name.

The formats are made from the folders :data:`analysis.formats.FOLDERS` lists (adding a
format is its folder and one entry there).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable

from analysis.errors import ConfigError, setting
from analysis.formats import FOLDERS
from analysis.formats.peers import PeerFormat
from analysis.formats.reading import Format


def _formats() -> tuple[Format, ...]:
    made: list[Format] = []
    for folder in FOLDERS:
        module = importlib.import_module(f"analysis.formats.{folder}.format")
        for fmt in module.FORMATS:
            if not isinstance(fmt, Format):
                raise TypeError(f"{module.__name__}.FORMATS holds {fmt!r}, not a Format")
            made.append(fmt)
    return tuple(made)


FORMATS: tuple[Format, ...] = _formats()
"""Every format, made from the folders of :data:`analysis.formats.FOLDERS`, in their order."""

__all__ = [
    "BY_NAME",
    "FORMATS",
    "NAMES",
    "PEERS",
    "PEER_FORMATS",
    "converted_warnings",
    "named",
    "peer_limits",
    "peer_warnings",
]

BY_NAME: dict[str, Format] = {fmt.name: fmt for fmt in FORMATS}
NAMES: tuple[str, ...] = tuple(BY_NAME)
PEERS: tuple[PeerFormat, ...] = tuple(fmt for fmt in FORMATS if isinstance(fmt, PeerFormat))
PEER_FORMATS: tuple[str, ...] = tuple(fmt.name for fmt in PEERS)
"""The ``log_format`` names of other systems' logs."""


def named(name: str | None) -> Format | None:
    """The format of a ``log_format`` value (None: found from each file)."""
    if name is None:
        return None
    if name not in BY_NAME:
        raise ConfigError(
            setting("log_format") + f": expected one of {', '.join(NAMES)} (found {name!r})"
        )
    return BY_NAME[name]


def peer_limits(names: Iterable[str]) -> tuple[str, ...]:
    """What the logs of these formats carry and what they cannot tell, one line each."""
    return tuple(line for name in names if name in BY_NAME for line in BY_NAME[name].cannot_tell)


def peer_warnings(names: Iterable[str]) -> list[str]:
    """One warning per format of these whose logs carry no weight versions (verl,
    NeMo-RL): a replay of them has nothing to act on, whatever its settings."""
    found = (BY_NAME[name] for name in dict.fromkeys(names) if name in BY_NAME)
    return [warning for fmt in found if (warning := fmt.versionless()) is not None]


def converted_warnings(warnings: Iterable[str], names: Iterable[str]) -> list[str]:
    """``warnings`` of a conversion, each once, with :func:`peer_warnings`' words for a
    replay put for a convert: the table written carries no weight versions either."""
    converted = {
        warning: (
            f"{fmt.name} log: no weight versions, so the table written has none either: "
            "staleness cannot be computed from it, only steps (inspecting it says what "
            "the log can tell)"
        )
        for fmt in (BY_NAME[name] for name in names if name in BY_NAME)
        if (warning := fmt.versionless()) is not None
    }
    out: list[str] = []
    for warning in warnings:
        warning = converted.get(warning, warning)
        if warning not in out:
            out.append(warning)
    return out
