"""Other systems' logs (prime-rl, AReaL, verl, NeMo-RL): which format a file or folder is,
its files in arrival order, and its records as canonical rows (docs/semantics.md,
"Other systems' logs"). Each system's reader is a module of its own
(``analysis.formats.<system>.reader``); this one holds what they share.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from analysis.errors import ReplayError
from analysis.formats.areal import reader as peers_areal
from analysis.formats.fields import FieldMap
from analysis.formats.nemo_rl import reader as peers_nemo_rl
from analysis.formats.peer_records import PeerItem, numbered_files, trailing_number
from analysis.formats.prime_rl import reader as peers_prime_rl
from analysis.formats.text.jsonl import jsonl_records
from analysis.formats.text.lean import lean_plan
from analysis.formats.verl import reader as peers_verl

_READERS: dict[str, ModuleType] = {
    module.NAME: module for module in (peers_prime_rl, peers_areal, peers_verl, peers_nemo_rl)
}
PEER_FORMATS: tuple[str, ...] = tuple(_READERS)
"""The ``log_format`` names of other systems' logs."""


def peer_of_record(record: Any) -> str | None:
    """The system whose record shape this is (every key its writer always writes is
    there), else None."""
    if not isinstance(record, dict):
        return None
    keys = record.keys()
    for name, module in _READERS.items():
        if module.KEYS <= keys:
            return name
    return None


_PROBED_MEMBERS = 1000
"""Members of a gzip file looked through for its first record (a file of one member per
record has it in the first; one of millions of empty members took seconds a reading)."""


def peer_of_file(path: Path) -> str | None:
    """The system whose log a JSONL file is, by its first record; None when it is no
    other system's (or cannot be read: its reader will say why)."""
    try:
        # Lean: a long first line's token lists are not kept, nor folded, to read its keys.
        lean = lean_plan(FieldMap(), fold=False)
        for _, record in jsonl_records(path, lean=lean, members=_PROBED_MEMBERS):
            return peer_of_record(record)
    except ReplayError:  # reading it again will report the problem
        return None
    return None


def peer_rows(
    log_format: str, path: Path, records: Iterable[tuple[int, Any]]
) -> Iterator[PeerItem]:
    """The canonical rows (or errors) of one file of another system's log."""
    rows: Iterator[PeerItem] = _READERS[log_format].rows(path, records)
    return rows


def peer_limits(formats: Iterable[str]) -> tuple[str, ...]:
    """What the logs of these formats carry and what they cannot tell, one line each."""
    return tuple(line for name in formats if name in _READERS for line in _READERS[name].LIMITS)


def peer_warnings(formats: Iterable[str]) -> list[str]:
    """One warning per format of these whose logs carry no weight versions (verl,
    NeMo-RL): a replay of them has nothing to act on, whatever its settings."""
    seen = dict.fromkeys(formats)
    return [
        f"{name} log: {_READERS[name].NO_VERSIONS}"
        for name in seen
        if name in _READERS and _READERS[name].NO_VERSIONS
    ]


def converted_warnings(warnings: Iterable[str], formats: Iterable[str]) -> list[str]:
    """``warnings`` of a conversion, each once, with :func:`peer_warnings`' words for a
    replay put for a convert: the table written carries no weight versions either."""
    replay_words = set(peer_warnings(formats))
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


def ordered(log_format: str, paths: list[Path]) -> list[Path]:
    """Files of one system's log in arrival order: by the step or version their names
    give (numbers compared as numbers: step 10 after step 9), the others after them."""
    if log_format == "prime-rl":
        return numbered_files(paths, peers_prime_rl.step_of)
    if log_format == "areal":
        return numbered_files(paths, peers_areal.file_order)
    if log_format == "verl":
        return numbered_files(paths, peers_verl.file_order)
    return numbered_files(paths, peers_nemo_rl.step_of)


_NAMED: dict[str, Callable[[Path], Any]] = {
    "verl": peers_verl.file_order,
    "nemo-rl": peers_nemo_rl.step_of,
}
"""How the files of a flat folder of one system's log are named (the step in the name):
others beside them (NeMo-RL's ``val_data_step{N}.jsonl``) are not that log."""


def peer_files(
    paths: list[Path], log_format: str | None
) -> tuple[str, list[Path], list[Path]] | None:
    """A folder's JSONL files as one system's log: the system (``log_format``, else the
    one whose file names and first record fit), its files in arrival order, and the
    files left out as not named as that system names them; None when they are no other
    system's log."""
    peer = log_format
    if peer is None:
        for name, step in _NAMED.items():
            named = [path for path in paths if step(path) is not None]
            if named and peer_of_file(named[0]) == name:
                peer = name
                break
        else:
            peer = peer_of_file(paths[0])
    if peer not in _READERS:
        return None
    named = [path for path in paths if peer not in _NAMED or _NAMED[peer](path) is not None]
    if not named:  # told the format, with files named otherwise: read them all
        named = paths
    return peer, ordered(peer, named), [path for path in paths if path not in named]


def peer_tree(root: Path, log_format: str | None = None) -> tuple[str, list[Path], str] | None:
    """A folder laid out as prime-rl's ``rollouts/`` or AReaL's ``rollout/`` (so named, or
    read as ``log_format`` areal): its format, the files read in arrival order, and a
    note of what was read (else None). Only names are listed: a Dressage folder of
    thousands of instance folders is not walked. A folder that may not be listed is
    none of these here: the reader of our own folders says what is wrong with it."""
    try:
        return _peer_tree(root, log_format)
    except OSError:
        return None


def _peer_tree(root: Path, log_format: str | None) -> tuple[str, list[Path], str] | None:
    one_step = root / "train/all/traces.jsonl"
    if trailing_number(root.name, "step_") is not None and one_step.is_file():
        return (
            "prime-rl",
            [one_step],
            (
                f"{root}: one step of prime-rl rollouts: read train/all/traces.jsonl; the "
                "effective and eval subsets are not read (pass their files to read them instead)"
            ),
        )
    for base in (root, root / "rollouts"):
        found = sorted(base.glob("step_*/train/all/traces.jsonl"))
        if found:
            return (
                "prime-rl",
                ordered("prime-rl", found),
                (
                    f"{base}: prime-rl rollouts: read step_*/train/all/traces.jsonl (every "
                    "episode that arrived, in completion order); the effective and eval "
                    "subsets are not read (pass their files to read them instead)"
                ),
            )
    for base in (root, root / "rollout"):
        if base.name != "rollout" and log_format != "areal":
            continue
        found = [
            path
            for path in sorted(base.glob("*/*.jsonl"))
            if peers_areal.file_order(path) is not None
        ]
        if found and peer_of_file(found[0]) == "areal":
            return (
                "areal",
                ordered("areal", found),
                (
                    f"{base}: AReaL rollout dumps: read {{tail_version}}/{{task_id}}.jsonl by "
                    "tail version, then task id"
                ),
            )
    return None
