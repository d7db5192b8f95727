"""Every format a log is read as, listed once: ``--format``, discovery, the load and
``inspect`` find a format here by its name.

Adding a format is a folder ``analysis/formats/<format>/`` whose ``format.py`` defines
``FORMAT`` (a :class:`analysis.formats.reading.Format`), and one line below.
"""

from __future__ import annotations

from collections.abc import Iterable

from analysis.errors import ConfigError, setting
from analysis.formats.areal.format import FORMAT as AREAL
from analysis.formats.canonical.format import IPC, PARQUET
from analysis.formats.dressage.format import FORMAT as ARTIFACTS
from analysis.formats.jsonl.format import FORMAT as JSONL
from analysis.formats.nemo_rl.format import FORMAT as NEMO_RL
from analysis.formats.peers import PeerFormat
from analysis.formats.prime_rl.format import FORMAT as PRIME_RL
from analysis.formats.reading import Format
from analysis.formats.slime_dumps.format import FORMAT as DUMPS
from analysis.formats.verl.format import FORMAT as VERL

FORMATS: tuple[Format, ...] = (
    JSONL,
    ARTIFACTS,
    DUMPS,
    PARQUET,
    IPC,
    PRIME_RL,
    AREAL,
    VERL,
    NEMO_RL,
)
"""Every format, in the order ``--format`` lists them; other systems' logs last, in the
order a record's shape is tried against theirs."""

__all__ = [
    "AREAL",
    "ARTIFACTS",
    "BY_NAME",
    "DUMPS",
    "FORMATS",
    "IPC",
    "JSONL",
    "NAMES",
    "NEMO_RL",
    "PARQUET",
    "PEERS",
    "PEER_FORMATS",
    "PRIME_RL",
    "VERL",
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
