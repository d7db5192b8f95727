"""Dressage's trajectory folders, one at a time: a completed session
(``traj_payload/<instance>/<session>/``: ``session.json``, ``samples/<segment>.json``) or a failed one
(``traj_err/<instance>/<session>/error.json``), read into one record each, with its failure
classified from the error itself (docs/semantics.md §12.1)."""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

from analysis.errors import (
    InputNotFoundError,
    LogFormatError,
    MissingFieldError,
    short_repr,
)
from analysis.formats.dressage.records import as_count, as_time, optional_int
from analysis.formats.text.jsonl import read_json_file
from analysis.table.labels import real_label
from analysis.table.limits import DEFAULT_LIMITS, Limits, printable

PAYLOAD, ERRORS = "traj_payload", "traj_err"
"""A run's trees of completed and of failed trajectories."""

SPAN_MARKER = "partial_rollout_staleness_exceeded"
"""The proxy's error for a trajectory whose version span exceeds the limit (HTTP 502)."""


_MAX_PREEMPTS = re.compile(r'max_preempts\\*"\s*:\s*(\d{1,9})\b')


def named_max_preempts(text: str) -> set[int]:
    """The ``max_preempts`` values a span rejection's body names (the proxy's 502 JSON,
    escaped once or twice as it is nested in a log line or an error.json)."""
    if SPAN_MARKER not in text:
        return set()
    return {int(found) for found in _MAX_PREEMPTS.findall(text)}


FAIL_KINDS = ("span", "backend_timeout", "agent_failed_state", "other")


@dataclass(slots=True)
class Trajectory:
    """One session folder while the run is read (mutable: dumps add sample indices)."""

    trajectory_id: str
    instance_id: str
    start_rollout_id: int | None
    retry_count: int
    finished_at: float
    completed: bool
    fail_kind: str | None = None
    end_version: str | None = None
    span: int | None = None
    segments: int = 0
    response_tokens: int | None = None
    span_marker: bool = False
    async_group_id: int | None = None
    max_preempts: tuple[int, ...] = ()
    """The ``max_preempts`` its span rejection names (failed trajectories only)."""
    sample_index: int | None = None
    group_index: int | None = None
    attempt_id: str = ""
    sample_position: int = 0
    retry_link: str | None = None
    """The session of the earlier attempt this retry's sample replaces
    (``last_retry_session_id`` / ``last_failed_session_id``): a retry of the same draw."""
    start_version: str | None = None
    """``dressage_start_token_version``: the weights its first token was generated with."""
    draw: int | None = None
    """Without a start rollout: the ordinal of its prompt's draw (identity.py)."""
    turn_tokens: tuple[int, ...] = ()
    """Response tokens per turn (each run of real labels of ``full_versions`` between
    context tokens, over the segments in order); empty when the files do not say."""
    tail_tokens: int | None = None
    """Response tokens generated after the last switch of version *within* a turn, when
    that switch is in the last turn (the weights changed while it generated): the time
    since that version's update divided by these is the time per token (the run model)."""


def classify_failure(error: dict[str, Any]) -> tuple[str, list[str]]:
    """Failure kind of an ``error.json`` and, for a span rejection, the versions it names.

    Read from ``error`` and ``http``, never from ``sample.metadata.blackbox_agent_*``:
    those are carried over from an earlier attempt and can name another failure.
    """
    response = _object(_object(error.get("http")).get("response"))
    body = str(response.get("body") or "")
    detail = _object(error.get("error"))
    if SPAN_MARKER in body or _mentions_marker(detail):
        found = re.search(r'\\*"versions\\*":\s*\[([^\]]*)\]', body)
        versions = re.findall(r'\\*"([^"\\]+)\\*"', found.group(1)) if found else []
        return "span", versions
    message = f"{detail.get('message') or ''} {detail.get('summary') or ''}".lower()
    if "backend timeout" in message or "504" in message:
        return "backend_timeout", []
    if "failed state" in message:
        return "agent_failed_state", []
    return "other", []


def unreadable(path: Path, exc: OSError, what: str = "cannot read") -> InputNotFoundError:
    """The error of a file or folder of a run that is there but cannot be read (exit 3)."""
    return InputNotFoundError(
        f"{printable(str(path))}: {what} ({exc.strerror}); check its permissions, or move "
        "it out of the run"
    )


def is_kind(path: Path, kind: str) -> bool:
    """Whether ``path`` is a regular file (``file``) or a folder (``dir``); absent is
    False, but one that cannot be looked at (a folder above it that may not be searched)
    is an error, not taken as missing (issue 34)."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as exc:
        raise unreadable(path, exc, "cannot look at it") from exc
    return stat.S_ISDIR(mode) if kind == "dir" else stat.S_ISREG(mode)


def files_in(folder: Path, suffix: str) -> list[Path]:
    """The files of ``folder`` whose names end with ``suffix``, in name order; none when
    it is absent, an error when it is there but cannot be listed (it was taken as missing)."""
    try:
        with os.scandir(folder) as listing:
            return sorted(Path(entry.path) for entry in listing if entry.name.endswith(suffix))
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        raise unreadable(folder, exc, "cannot list the folder") from exc


def subfolders(folder: Path) -> list[Path]:
    try:
        with os.scandir(folder) as listing:
            return sorted(Path(entry.path) for entry in listing if entry.is_dir())
    except OSError as exc:
        raise unreadable(folder, exc, "cannot list the folder") from exc


def _sessions(root: Path, kind: str) -> Iterable[Path]:
    """Session folders ``<kind>/<instance>/<session>/``."""
    top = root / kind
    if not is_kind(top, "dir"):
        return
    for instance in subfolders(top):
        yield from subfolders(instance)


def _named(root: Path, folders: list[Path]) -> str:
    """A count of folders and the first few of them, for a warning."""
    shown = ", ".join(str(folder.relative_to(root)) for folder in folders[:3])
    return f"{len(folders)} session folder(s) ({shown}{', ...' if len(folders) > 3 else ''})"


def read_trajectories(
    root: Path, warnings: list[str], limits: Limits = DEFAULT_LIMITS
) -> list[Trajectory]:
    """Every trajectory folder of the run, read as far as it goes (each JSON file within
    ``limits``); a warning names the folders that lack a file (so that a trajectory is
    never dropped or guessed unsaid)."""
    found: list[Trajectory] = []
    no_session: list[Path] = []
    no_samples: list[Path] = []
    empty: list[Path] = []
    for folder in _sessions(root, PAYLOAD):
        has_session = is_kind(folder / "session.json", "file")
        has_samples = bool(_sample_files(folder))
        if not (has_session or has_samples):
            empty.append(folder)
            continue
        found.append(_read_payload_session(folder, limits))
        if not has_session:
            no_session.append(folder)
        elif not has_samples:
            no_samples.append(folder)
    no_error: list[Path] = []
    for folder in _sessions(root, ERRORS):
        if is_kind(folder / "error.json", "file"):
            found.append(_read_error_session(folder, limits))
        else:
            no_error.append(folder)
    if no_session:
        warnings.append(
            f"{_named(root, no_session)} without session.json: read from their samples/ "
            "(finish time from metadata.proxy_extra_info.timestamp, versions from "
            "metadata.full_versions)"
        )
    if no_samples:
        warnings.append(
            f"{_named(root, no_samples)} without samples/: their attempt (start rollout, retry "
            "count) is unknown, so each is put in the attempt <instance>/s?/r0"
        )
    if empty:
        warnings.append(f"{_named(root, empty)} with neither session.json nor samples/: left out")
    if no_error:
        warnings.append(
            f"{_named(root, no_error)} of {ERRORS}/ without error.json: left out (their failed "
            "trajectories, and the attempts they belong to, cannot be known)"
        )
    return found


def _sample_files(folder: Path) -> list[Path]:
    """``samples/<segment>.json`` of a session, in segment order."""
    return sorted(
        files_in(folder / "samples", ".json"), key=lambda p: int(re.sub(r"\D", "", p.stem) or 0)
    )


_FIX = (
    "correct the file, or move its session folder out of the run (its trajectory is then left out)"
)


def _labels(value: Any, where: str) -> list[str]:
    """The real labels of a ``full_versions`` list (absent: none)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise LogFormatError(
            f"{where} must be a list of versions (found {short_repr(value)}); {_FIX}"
        )
    try:
        return [real for label in value if (real := real_label(label)) is not None]
    except ValueError as exc:
        raise LogFormatError(f"{where}: {exc}; {_FIX}") from None


def _time(value: Any, where: str) -> float | None:
    """A finish time as Unix seconds (a number, text of one, or an ISO 8601 date), read as
    the simple loop reads completion times."""
    try:
        return as_time(value, where)
    except LogFormatError as exc:
        raise LogFormatError(exc.message + f"; {_FIX}") from None


def _int_field(value: Any, where: str) -> int | None:
    """An integer field (absent: None); text or a fraction is a damaged file."""
    if value is None:
        return None
    number = attempt_number(value)
    if number is None:
        raise LogFormatError(f"{where} must be an integer (found {short_repr(value)}); {_FIX}")
    return number


def _read_payload_session(folder: Path, limits: Limits) -> Trajectory:
    """A completed trajectory: ``session.json`` (segments, token versions, finish time) and
    ``samples/<segment>.json`` (the attempt key and the tracker's end version); a session
    with only one of them is read from that one."""
    path = folder / "session.json"
    segments: list[dict[str, Any]] = []
    if is_kind(path, "file"):
        session = read_json_file(path, limits)
        data = session.get("data") if isinstance(session, dict) else None
        if not isinstance(data, list) or not all(isinstance(seg, dict) for seg in data):
            raise LogFormatError(
                f"{path}: expected an object with a `data` list of segment objects; {_FIX}"
            )
        segments = data
    stamps: list[float] = []
    versions: dict[str, None] = {}
    for i, seg in enumerate(segments):
        info = _object(seg.get("extra_info"))
        if (
            stamp := _time(info.get("timestamp"), f"{path}: data[{i}].extra_info.timestamp")
        ) is not None:
            stamps.append(stamp)
        versions.update(
            dict.fromkeys(_labels(seg.get("full_versions"), f"{path}: data[{i}].full_versions"))
        )
    turn_tokens, tail_tokens = turn_profile(segments)
    lengths = [seg.get("aligned_response_length") for seg in segments]
    counts: list[int] = [n for n in lengths if _is_count(n)]
    sample_files = _sample_files(folder)
    metadata: dict[str, Any] = {}
    end_version: str | None = None
    marker, best_segment = False, -1
    sample_stamps: list[float] = []
    sample_versions: dict[str, None] = {}
    for sample_path in sample_files:
        sample = read_json_file(sample_path, limits)
        if not isinstance(sample, dict):
            raise LogFormatError(
                f"{sample_path}: expected a sample object (found {type(sample).__name__}); {_FIX}"
            )
        meta = _object(sample.get("metadata"))
        marker = marker or _mentions_marker(meta)
        metadata = metadata or meta
        where = f"{sample_path}: segment_index"
        segment = _int_field(sample.get("segment_index", meta.get("segment_index")), where) or 0
        if segment >= best_segment:  # the tracker reads the last segment's end version
            best_segment = segment
            end_version = _label(
                meta.get("dressage_end_token_version"),
                f"{sample_path}: metadata.dressage_end_token_version",
            )
        where = f"{sample_path}: metadata.proxy_extra_info.timestamp"
        if (
            stamp := _time(_object(meta.get("proxy_extra_info")).get("timestamp"), where)
        ) is not None:
            sample_stamps.append(stamp)
        where = f"{sample_path}: metadata.full_versions"
        sample_versions.update(dict.fromkeys(_labels(meta.get("full_versions"), where)))
    if end_version is None:
        end_version = _last_trainable_version(segments)
    stamps = stamps or sample_stamps
    if not stamps:
        raise MissingFieldError(
            f"{folder}: no finish time (data[].extra_info.timestamp of session.json, or "
            "metadata.proxy_extra_info.timestamp in samples/); the replay orders completions "
            f"by it; {_FIX}"
        )
    first = segments[0] if segments else {}
    instance = (
        metadata.get("instance_id") or first.get("instance_id") or printable(folder.parent.name)
    )
    return Trajectory(
        trajectory_id=printable(folder.name),
        instance_id=str(instance),
        start_rollout_id=attempt_number(metadata.get("dressage_start_rollout_id")),
        retry_count=attempt_number(metadata.get("dressage_retry_count")) or 0,
        finished_at=max(stamps),
        completed=True,
        end_version=end_version,
        span=len(versions or sample_versions),
        segments=len(segments) or len(sample_files),
        response_tokens=sum(counts) if lengths and len(counts) == len(lengths) else None,
        span_marker=marker,
        retry_link=_link(metadata),
        start_version=_optional_label(metadata.get("dressage_start_token_version")),
        turn_tokens=turn_tokens,
        tail_tokens=tail_tokens,
    )


def turn_profile(segments: list[dict[str, Any]]) -> tuple[tuple[int, ...], int | None]:
    """Response tokens per turn and the tokens after the last mid-turn version switch
    (:attr:`Trajectory.tail_tokens`), from the segments' ``full_versions`` (``-1`` and the
    other non-real labels mark context and tool tokens). Labels already checked by the
    caller; a segment without a list counts as none."""
    turns: list[int] = []
    tail: int | None = None  # tokens since the last mid-turn switch, while in its turn
    run, previous = 0, None
    for seg in segments:
        labels = seg.get("full_versions")
        for value in labels if isinstance(labels, list) else ():
            label = real_label(value)
            if label is None:  # context or tool token: a turn ends here
                if run:
                    turns.append(run)
                run, previous = 0, None
                continue
            if run == 0 and turns:
                tail = None  # a new turn after the switch's turn
            if previous is not None and label != previous:
                tail = 0
            if tail is not None:
                tail += 1
            run, previous = run + 1, label
        if run:  # a segment ends a turn
            turns.append(run)
            run, previous = 0, None
    return tuple(turns), tail


def _link(metadata: dict[str, Any]) -> str | None:
    """The earlier session a retried sample names (its previous attempt's trajectory)."""
    value = metadata.get("last_retry_session_id") or metadata.get("last_failed_session_id")
    return value if isinstance(value, str) and value else None


def _optional_label(value: Any) -> str | None:
    try:
        return real_label(value)
    except ValueError:
        return None


def _is_count(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**62


def _label(value: Any, where: str) -> str | None:
    try:
        return real_label(value)
    except ValueError as exc:
        raise LogFormatError(f"{where}: {exc}; {_FIX}") from None


def _last_trainable_version(segments: list[dict[str, Any]]) -> str | None:
    """Fallback end version: the last loss-masked token's real version, last segment first
    (labels already checked by :func:`_labels`)."""
    for seg in reversed(segments):
        labels, mask = seg.get("full_versions") or [], seg.get("full_loss_mask")
        mask = mask if isinstance(mask, list) else []
        for label, on in zip(
            reversed(labels[: len(mask)]), reversed(mask[: len(labels)]), strict=True
        ):
            if on and (real := real_label(label)) is not None:
                return real
    return None


def _read_error_session(folder: Path, limits: Limits) -> Trajectory:
    """A failed trajectory: ``error.json`` (failure, key, and the ids the payload lacks)."""
    path = folder / "error.json"
    error = read_json_file(path, limits)
    if not isinstance(error, dict):
        raise LogFormatError(
            f"{path}: expected an error object (found {type(error).__name__}); {_FIX}"
        )
    finished_at = _time(error.get("timestamp"), f"{path}: timestamp")
    if finished_at is None:
        raise MissingFieldError(
            f"{path}: no `timestamp`; the replay orders completions by it; {_FIX}"
        )
    sample = _object(error.get("sample"))
    meta = _object(sample.get("metadata"))
    kind, versions = classify_failure(error)
    real = list(dict.fromkeys(v for v in map(real_label, versions) if v is not None))
    return Trajectory(
        trajectory_id=str(error.get("session_id") or printable(folder.name)),
        instance_id=str(
            error.get("instance_id") or meta.get("instance_id") or printable(folder.parent.name)
        ),
        start_rollout_id=attempt_number(meta.get("dressage_start_rollout_id")),
        retry_count=attempt_number(meta.get("dressage_retry_count")) or 0,
        finished_at=finished_at,
        completed=False,
        fail_kind=kind,
        span=len(real) if real else None,
        span_marker=kind == "span" or _mentions_marker(meta),
        async_group_id=optional_int(meta.get("dressage_async_group_id")),
        max_preempts=tuple(
            sorted(
                named_max_preempts(
                    str(_object(_object(error.get("http")).get("response")).get("body") or "")
                )
            )
        ),
        sample_index=optional_int(sample.get("index")),
        group_index=optional_int(sample.get("group_index")),
        retry_link=_link(meta),
    )


def _mentions_marker(value: Any) -> bool:
    """Whether a section of a file mentions the span rejection anywhere (a retry carries
    the failure history of the attempt before it)."""
    return SPAN_MARKER in json.dumps(value, default=str)


def attempt_number(value: Any) -> int | None:
    """``dressage_start_rollout_id`` / ``dressage_retry_count`` read as the simple loop reads
    them (:func:`~analysis.formats.dressage.records.as_count`), within 64 bits; else None."""
    number = as_count(value)
    return number if number is not None and number < 2**63 else None


def _object(value: Any) -> dict[str, Any]:
    """``value`` if it is a JSON object, else an empty one (absent or null sections)."""
    return value if isinstance(value, dict) else {}
