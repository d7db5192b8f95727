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
        made += [fmt for fmt in module.FORMATS if isinstance(fmt, Format)]
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
    return [
        f"{name} log: {BY_NAME[name].no_versions}"
        for name in dict.fromkeys(names)
        if name in BY_NAME and BY_NAME[name].no_versions
    ]


def converted_warnings(warnings: Iterable[str], names: Iterable[str]) -> list[str]:
    """``warnings`` of a conversion, each once, with :func:`peer_warnings`' words for a
    replay put for a convert: the table written carries no weight versions either."""
    replay_words = set(peer_warnings(names))
    out: list[str] = []
    for warning in warnings:
        if warning in replay_words:
            name = warning.split(" log: ", 1)[0]
            warning = (
                f"{name} log: no weight versions, so the table written has none either: "
                "staleness cannot be computed from it, only steps (inspecting it says what "
                "the log can tell)"
            )
        if warning not in out:
            out.append(warning)
    return out
