"""Read a Dressage run folder (``traj_payload/``, ``traj_err/``, ``rollout_data/``, the log,
the metrics and the prompts) into tables that a replay of Dressage's collector loop needs.

One row per trajectory (session folder), trajectories grouped into *attempts* by
(instance id, start rollout id, retry count), the rollout calls of the log, the groups
each step's dump holds, and the metrics Dressage returned. Only the trajectory folders
are required; every other file is optional and its absence is reported in ``warnings``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

import polars as pl

from analysis.errors import (
    InputNotFoundError,
    LogFormatError,
    MissingFieldError,
    UnknownFormatError,
    short_repr,
)
from analysis.io.dressage_log import (
    KEPT_SCHEMA,
    USED_METRICS,
    DressageLog,
    calls_frame,
    events_frame,
    optional_int,
    read_dressage_log,
    read_dump_rows,
    read_metrics,
    read_prompt_order,
)
from analysis.io.dressage_records import as_count, as_time
from analysis.io.jsonl import read_json_file
from analysis.labels import real_label

PAYLOAD, ERRORS, DUMPS = "traj_payload", "traj_err", "rollout_data"
METRICS_CSV = "dressage_metrics.csv"
"""The per-step metrics exported from a dashboard as CSV, read when there is no JSONL."""
LOG, METRICS, PROMPTS, ROLLOUTS = (
    "dressage_log.txt",
    "dressage_metrics.jsonl",
    "prompts.jsonl",
    "rollouts.jsonl",
)
SPAN_MARKER = "partial_rollout_staleness_exceeded"
"""The proxy's error for a trajectory whose version span exceeds the limit (HTTP 502)."""

FAIL_KINDS = ("span", "backend_timeout", "agent_failed_state", "other")

TRAJECTORY_SCHEMA: dict[str, Any] = {
    "trajectory_id": pl.String,
    "attempt_id": pl.String,
    "instance_id": pl.String,
    "start_rollout_id": pl.Int64,
    "retry_count": pl.Int64,
    "finished_at": pl.Float64,
    "completed": pl.Boolean,
    "end_version": pl.String,
    "span": pl.Int64,
    "fail_kind": pl.String,
    "sample_index": pl.Int64,
    "sample_position": pl.Int64,
    "group_index": pl.Int64,
    "async_group_id": pl.Int64,
    "span_marker": pl.Boolean,
    "segments": pl.Int64,
    "response_tokens": pl.Int64,
}
ATTEMPT_SCHEMA: dict[str, Any] = {
    "attempt_id": pl.String,
    "instance_id": pl.String,
    "start_rollout_id": pl.Int64,
    "retry_count": pl.Int64,
    "completed_at": pl.Float64,
    "retry_of": pl.String,
    "draw": pl.Int64,
    "fail_kind": pl.String,
    "span_verdict": pl.Boolean,
    "async_group_id": pl.Int64,
    "trajectories": pl.Int64,
    "order_known": pl.Boolean,
}


@dataclass(frozen=True)
class RunLog:
    """Everything a Dressage run left on disk, as tables (see the module docstring).

    ``trajectories`` is in attempt order, then sample order (``sample_position``);
    ``calls`` is empty without a log; ``kept`` holds one row per session of each dump,
    in dump order; ``log_events`` one row per drop / retry / exhausted / final-drain line.
    """

    root: Path
    trajectories: pl.DataFrame
    attempts: pl.DataFrame
    calls: pl.DataFrame
    kept: pl.DataFrame
    metrics: pl.DataFrame
    log_events: pl.DataFrame
    samples_per_prompt: int | None
    target_groups: int | None
    final_rollout_id: int | None
    zone_offset_s: float
    sources: tuple[str, ...]
    warnings: tuple[str, ...] = ()


@dataclass(slots=True)
class _Trajectory:
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
    sample_index: int | None = None
    group_index: int | None = None
    attempt_id: str = ""
    sample_position: int = 0


def find_run_root(path: Path) -> Path | None:
    """The folder holding ``traj_payload/`` or ``traj_err/``: ``path`` itself, its parent
    when pointed at one of those, or its only subfolder that holds them (an artifact
    tree with its ``<run>`` level)."""

    def holds(folder: Path) -> bool:
        return (folder / PAYLOAD).is_dir() or (folder / ERRORS).is_dir()

    if not path.is_dir():
        return None
    if path.name in (PAYLOAD, ERRORS):
        return path.parent
    if holds(path):
        return path
    inner = [child for child in _subfolders(path) if holds(child)]
    return inner[0] if len(inner) == 1 else None


def is_run_folder(path: str | Path) -> bool:
    """Whether ``path`` is (or holds exactly one) Dressage run folder; False for a path
    that cannot be looked at (reading it says why, in the loader's words)."""
    try:
        return find_run_root(Path(path)) is not None
    except OSError:
        return False


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


def read_run(path: str | Path, *, trajectories_only: bool = False) -> RunLog:
    """Read a Dressage run folder into a :class:`RunLog`.

    ``trajectories_only`` reads just the trajectory folders (trajectories and attempts),
    for a caller that does not replay the loop.
    """
    given = Path(path)
    if not given.exists():
        raise InputNotFoundError(f"{given}: no such file or directory; check the path")
    root = find_run_root(given)
    if root is None:
        raise UnknownFormatError(
            f"{given}: not a Dressage run folder (no traj_payload/ or traj_err/ in it or in "
            "exactly one of its subfolders); point at the folder that holds traj_payload/"
        )
    warnings: list[str] = []
    sources = [name for name in (PAYLOAD, ERRORS) if (root / name).is_dir()]
    trajectories = _read_trajectories(root, warnings)
    if not trajectories:
        raise MissingFieldError(
            f"{root}: no trajectory folder ({PAYLOAD}/<instance>/<session>/ with session.json "
            f"or samples/, or {ERRORS}/<instance>/<session>/error.json); point at a run folder "
            "that holds them"
        )
    prompts: list[str] | None = None
    dumps: list[dict[str, Any]] = []
    log: DressageLog | None = None
    metrics: list[dict[str, Any]] = []
    if not trajectories_only:
        dumps, dump_source = read_dump_rows(root)
        if dump_source:
            sources.append(dump_source)
        else:
            warnings.append(
                "no rollout_data/*.pt or rollouts.jsonl: kept groups cannot be checked and "
                "the sample order of kept attempts is guessed"
            )
        if (root / PROMPTS).is_file():
            sources.append(PROMPTS)
            prompts = read_prompt_order(root / PROMPTS)
        else:
            warnings.append("no prompts.jsonl: draw ordinals fall back to instance-id order")
        metrics_file = next(
            (root / name for name in (METRICS, METRICS_CSV) if (root / name).is_file()), None
        )
        if metrics_file is not None:
            sources.append(metrics_file.name)
            metrics = read_metrics(metrics_file)
            _warn_repeated_steps(metrics, metrics_file.name, warnings)
        else:
            warnings.append("no dressage_metrics.jsonl: the per-step metrics cannot be checked")
        if (root / LOG).is_file():
            sources.append(LOG)
            log = read_dressage_log(
                root / LOG,
                error_times={
                    t.trajectory_id: t.finished_at for t in trajectories if not t.completed
                },
                first_finish=min(t.finished_at for t in trajectories),
            )
        else:
            warnings.append(
                "no dressage_log.txt: rollout call starts are inferred from the dumps and "
                "metrics, and the log's drop / retry lines cannot be checked"
            )
    _enrich_from_dumps(trajectories, dumps)
    samples_per_prompt = _samples_per_prompt(log, metrics, trajectories)
    attempts = _build_attempts(trajectories, prompts, warnings)
    if ERRORS not in sources and not trajectories_only:
        _mark_incomplete(attempts, samples_per_prompt, warnings)
    return RunLog(
        root=root,
        trajectories=_trajectory_frame(trajectories),
        attempts=pl.DataFrame(attempts, schema=ATTEMPT_SCHEMA, orient="row"),
        calls=calls_frame(log),
        kept=pl.DataFrame(dumps, schema=KEPT_SCHEMA),
        metrics=_metrics_frame(metrics),
        log_events=events_frame(log),
        samples_per_prompt=samples_per_prompt,
        target_groups=_target_groups(log, metrics, dumps),
        final_rollout_id=log.final_rollout_id if log else None,
        zone_offset_s=log.zone_offset_s if log else 0.0,
        sources=tuple(sources),
        warnings=tuple(warnings),
    )


# --------------------------------------------------------------------------- trajectories


def _subfolders(folder: Path) -> list[Path]:
    try:
        with os.scandir(folder) as listing:
            return sorted(Path(entry.path) for entry in listing if entry.is_dir())
    except OSError as exc:
        raise InputNotFoundError(f"{folder}: cannot list the folder ({exc.strerror})") from exc


def _sessions(root: Path, kind: str) -> Iterable[Path]:
    """Session folders ``<kind>/<instance>/<session>/``."""
    top = root / kind
    if not top.is_dir():
        return
    for instance in _subfolders(top):
        yield from _subfolders(instance)


def _named(root: Path, folders: list[Path]) -> str:
    """A count of folders and the first few of them, for a warning."""
    shown = ", ".join(str(folder.relative_to(root)) for folder in folders[:3])
    return f"{len(folders)} session folder(s) ({shown}{', ...' if len(folders) > 3 else ''})"


def _read_trajectories(root: Path, warnings: list[str]) -> list[_Trajectory]:
    """Every trajectory folder of the run, read as far as it goes; a warning names the
    folders that lack a file (so that a trajectory is never dropped or guessed unsaid)."""
    found: list[_Trajectory] = []
    no_session: list[Path] = []
    no_samples: list[Path] = []
    empty: list[Path] = []
    for folder in _sessions(root, PAYLOAD):
        has_session, has_samples = (folder / "session.json").is_file(), bool(_sample_files(folder))
        if not (has_session or has_samples):
            empty.append(folder)
            continue
        found.append(_read_payload_session(folder))
        if not has_session:
            no_session.append(folder)
        elif not has_samples:
            no_samples.append(folder)
    no_error: list[Path] = []
    for folder in _sessions(root, ERRORS):
        if (folder / "error.json").is_file():
            found.append(_read_error_session(folder))
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
        (folder / "samples").glob("*.json"), key=lambda p: int(re.sub(r"\D", "", p.stem) or 0)
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
        raise LogFormatError(f"{exc.raw}; {_FIX}") from None


def _int_field(value: Any, where: str) -> int | None:
    """An integer field (absent: None); text or a fraction is a damaged file."""
    if value is None:
        return None
    number = attempt_number(value)
    if number is None:
        raise LogFormatError(f"{where} must be an integer (found {short_repr(value)}); {_FIX}")
    return number


def _read_payload_session(folder: Path) -> _Trajectory:
    """A completed trajectory: ``session.json`` (segments, token versions, finish time) and
    ``samples/<segment>.json`` (the attempt key and the tracker's end version); a session
    with only one of them is read from that one."""
    path = folder / "session.json"
    segments: list[dict[str, Any]] = []
    if path.is_file():
        session = read_json_file(path)
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
    lengths = [seg.get("aligned_response_length") for seg in segments]
    counts: list[int] = [n for n in lengths if _is_count(n)]
    sample_files = _sample_files(folder)
    metadata: dict[str, Any] = {}
    end_version: str | None = None
    marker, best_segment = False, -1
    sample_stamps: list[float] = []
    sample_versions: dict[str, None] = {}
    for sample_path in sample_files:
        sample = read_json_file(sample_path)
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
    instance = metadata.get("instance_id") or first.get("instance_id") or folder.parent.name
    return _Trajectory(
        trajectory_id=folder.name,
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
    )


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


def _read_error_session(folder: Path) -> _Trajectory:
    """A failed trajectory: ``error.json`` (failure, key, and the ids the payload lacks)."""
    path = folder / "error.json"
    error = read_json_file(path)
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
    return _Trajectory(
        trajectory_id=str(error.get("session_id") or folder.name),
        instance_id=str(error.get("instance_id") or meta.get("instance_id") or folder.parent.name),
        start_rollout_id=attempt_number(meta.get("dressage_start_rollout_id")),
        retry_count=attempt_number(meta.get("dressage_retry_count")) or 0,
        finished_at=finished_at,
        completed=False,
        fail_kind=kind,
        span=len(real) if real else None,
        span_marker=kind == "span" or _mentions_marker(meta),
        async_group_id=optional_int(meta.get("dressage_async_group_id")),
        sample_index=optional_int(sample.get("index")),
        group_index=optional_int(sample.get("group_index")),
    )


def _mentions_marker(value: Any) -> bool:
    """Whether a section of a file mentions the span rejection anywhere (a retry carries
    the failure history of the attempt before it)."""
    return SPAN_MARKER in json.dumps(value, default=str)


def attempt_number(value: Any) -> int | None:
    """``dressage_start_rollout_id`` / ``dressage_retry_count`` read as the simple loop reads
    them (:func:`~analysis.io.dressage_records.as_count`), within 64 bits; else None."""
    number = as_count(value)
    return number if number is not None and number < 2**63 else None


def _object(value: Any) -> dict[str, Any]:
    """``value`` if it is a JSON object, else an empty one (absent or null sections)."""
    return value if isinstance(value, dict) else {}


def _enrich_from_dumps(trajectories: list[_Trajectory], dumps: list[dict[str, Any]]) -> None:
    """Dumps name what artifacts lack for kept trajectories: sample index, async group id."""
    by_id = {t.trajectory_id: t for t in trajectories}
    for row in dumps:
        if (found := by_id.get(row["trajectory_id"])) is not None:
            found.sample_index = row["sample_index"]
            found.async_group_id = row["async_group_id"]
            found.group_index = row["group_index"]


# --------------------------------------------------------------------------- attempts


def attempt_label(instance_id: str, start_rollout_id: int | None, retry_count: int) -> str:
    """The attempt id written to outputs: ``<instance>/s<start rollout>/r<retry count>``."""
    start = "?" if start_rollout_id is None else start_rollout_id
    return f"{instance_id}/s{start}/r{retry_count}"


def _sample_order(members: list[_Trajectory]) -> tuple[list[_Trajectory], bool]:
    """Sample order of an attempt: by slime index where known; the rest after, in ascending
    numeric end version (a neutral guess: it matters only when one attempt brings two new
    labels at once)."""

    def by_version(t: _Trajectory) -> tuple[int, float, str]:
        try:
            return (0, float(t.end_version or ""), t.trajectory_id)
        except ValueError:
            return (1, 0.0, str(t.end_version))

    known = sorted(
        (t for t in members if t.sample_index is not None), key=lambda t: t.sample_index or 0
    )
    unknown = sorted((t for t in members if t.sample_index is None), key=by_version)
    return known + unknown, not unknown


def _build_attempts(
    trajectories: list[_Trajectory], prompts: list[str] | None, warnings: list[str]
) -> list[dict[str, Any]]:
    """Group trajectories into attempts (rows of ``ATTEMPT_SCHEMA``) and give each
    trajectory its attempt id and sample position; reorders ``trajectories`` to match."""
    buckets: dict[tuple[str, int | None, int], list[_Trajectory]] = {}
    for t in trajectories:
        buckets.setdefault((t.instance_id, t.start_rollout_id, t.retry_count), []).append(t)
    attempts: dict[tuple[str, int | None, int], dict[str, Any]] = {}
    ordered: list[_Trajectory] = []
    for key, members in buckets.items():
        label = attempt_label(*key)
        in_order, known = _sample_order(members)
        for position, t in enumerate(in_order):
            t.attempt_id, t.sample_position = label, position
        ordered += in_order
        group_ids = sorted({t.async_group_id for t in members if t.async_group_id is not None})
        if len(group_ids) > 1:
            warnings.append(
                f"attempt {label} holds trajectories of async groups {group_ids}: two draws of "
                "one prompt in one rollout call are merged"
            )
        kinds = [t.fail_kind for t in members if t.fail_kind is not None]
        indices = [t.group_index for t in members if t.group_index is not None]
        attempts[key] = {
            "attempt_id": label,
            "instance_id": key[0],
            "start_rollout_id": key[1],
            "retry_count": key[2],
            "completed_at": max(t.finished_at for t in members),
            "retry_of": attempt_label(key[0], key[1], key[2] - 1)
            if (key[0], key[1], key[2] - 1) in buckets
            else None,
            "draw": min(indices) if indices else None,
            "fail_kind": ("span" if "span" in kinds else kinds[0]) if kinds else None,
            "span_verdict": any(t.span_marker for t in members),
            "async_group_id": group_ids[0] if group_ids else None,
            "trajectories": len(members),
            "order_known": known,
        }
    _assign_draws(attempts, prompts)
    trajectories[:] = ordered
    return list(attempts.values())


def _assign_draws(
    attempts: dict[tuple[str, int | None, int], dict[str, Any]], prompts: list[str] | None
) -> None:
    """Dataset draw ordinal (slime ``group_index``) of every attempt whose files lack it.

    Prompts are drawn in ``prompts.jsonl`` order, epoch after epoch: an instance's k-th
    first attempt (by start rollout) has ordinal k * P + its position. Retries keep
    their draw; a known ``group_index`` wins.
    """
    order = prompts or sorted({key[0] for key in attempts})
    position = {instance: i for i, instance in enumerate(order)}
    firsts: dict[str, list[tuple[str, int | None, int]]] = {}
    for key, row in attempts.items():
        if row["retry_of"] is None:
            firsts.setdefault(key[0], []).append(key)
    for instance, keys in firsts.items():
        keys.sort(key=lambda k: (-1 if k[1] is None else k[1], attempts[k]["completed_at"]))
        for epoch, key in enumerate(keys):
            if attempts[key]["draw"] is None:
                attempts[key]["draw"] = epoch * len(order) + position.get(instance, 0)
    for key in sorted(attempts, key=lambda k: k[2]):
        row = attempts[key]
        earlier = attempts.get((key[0], key[1], key[2] - 1))
        if row["draw"] is None and earlier is not None:
            row["draw"] = earlier["draw"]


def _mark_incomplete(
    attempts: list[dict[str, Any]], samples_per_prompt: int | None, warnings: list[str]
) -> None:
    """Without ``traj_err/``, an attempt with fewer than n trajectories failed (kind unknown)."""
    if samples_per_prompt is None:
        return
    short = [row for row in attempts if row["trajectories"] < samples_per_prompt]
    for row in short:
        row["fail_kind"] = "other"
    if short:
        warnings.append(
            f"no traj_err/: {len(short)} attempt(s) with fewer than {samples_per_prompt} "
            "trajectories are taken as failed of unknown kind (reported as 'other'); their "
            "failed trajectories, span rejections and failure kinds cannot be known"
        )


# --------------------------------------------------------------------------- facts and frames


def _samples_per_prompt(
    log: DressageLog | None, metrics: list[dict[str, Any]], trajectories: list[_Trajectory]
) -> int | None:
    if log is not None and log.samples_per_prompt:
        return log.samples_per_prompt
    for row in metrics[:1]:  # both checked by read_metrics: whole numbers >= 1
        groups = row.get("dressage/partial_rollout_target_groups")
        samples = row.get("dressage/partial_rollout_target_samples")
        if groups and samples:
            return max(1, int(samples) // int(groups))
    counts: dict[tuple[str, int | None, int], int] = {}
    for t in trajectories:
        key = (t.instance_id, t.start_rollout_id, t.retry_count)
        counts[key] = counts.get(key, 0) + 1
    return max(counts.values()) if counts else None


def _target_groups(
    log: DressageLog | None, metrics: list[dict[str, Any]], dumps: list[dict[str, Any]]
) -> int | None:
    if log is not None and log.target_groups:
        return log.target_groups
    for row in metrics[:1]:
        if row.get("dressage/partial_rollout_target_groups"):
            return int(row["dressage/partial_rollout_target_groups"])
    per_step: dict[int, set[int]] = {}
    for row in dumps:
        per_step.setdefault(row["rollout_id"], set()).add(row["group_position"])
    return max((len(groups) for groups in per_step.values()), default=None)


def _warn_repeated_steps(metrics: list[dict[str, Any]], name: str, warnings: list[str]) -> None:
    """A step on two lines of the metrics (a file appended to twice): the later line is used."""
    counts: dict[int, int] = {}
    for row in metrics:
        counts[row["rollout_id"]] = counts.get(row["rollout_id"], 0) + 1
    repeated = [step for step, count in counts.items() if count > 1]
    if repeated:
        shown = ", ".join(map(str, repeated[:5])) + (", ..." if len(repeated) > 5 else "")
        warnings.append(
            f"{name}: {len(repeated)} rollout_id(s) on more than one line ({shown}); the last "
            "line of each is used (remove the others if the file was appended to twice)"
        )


def _metrics_frame(metrics: list[dict[str, Any]]) -> pl.DataFrame:
    """The metrics the replay uses (numbers, checked by ``read_metrics``), one row per line."""
    if not metrics:
        return pl.DataFrame()
    names = [name for name in USED_METRICS if any(name in row for row in metrics)]
    schema: dict[str, Any] = {"rollout_id": pl.Int64, **dict.fromkeys(names, pl.Float64)}
    rows = [
        [row["rollout_id"], *(None if row.get(n) is None else float(row[n]) for n in names)]
        for row in metrics
    ]
    return pl.DataFrame(rows, schema=schema, orient="row")


def _trajectory_frame(trajectories: list[_Trajectory]) -> pl.DataFrame:
    return pl.DataFrame(
        [{name: getattr(t, name) for name in TRAJECTORY_SCHEMA} for t in trajectories],
        schema=TRAJECTORY_SCHEMA,
    )


__all__ = [
    "FAIL_KINDS",
    "SPAN_MARKER",
    "RunLog",
    "attempt_label",
    "classify_failure",
    "find_run_root",
    "is_run_folder",
    "read_run",
]
