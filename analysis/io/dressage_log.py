"""Read the files a Dressage run leaves beside its artifacts: ``dressage_log.txt``
(rollout calls, stale drops, retries, the final drain), ``dressage_metrics.jsonl`` (what
the rollout function returned per step), ``prompts.jsonl`` (the dataset order) and the
slime dumps ``rollout_data/<step>.pt`` (the groups each step returned).

The log is Python logging in local time without a zone; :func:`read_dressage_log` finds
the zone by comparing its "blackbox rollout failed" lines with the ``error.json`` times of
the same sessions, because the replay places rollout calls among artifact times.
"""

from __future__ import annotations

import datetime as dt
import re
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from analysis.errors import InputNotFoundError, LogFormatError, MissingFieldError
from analysis.io.dumps import dump_samples
from analysis.io.jsonl import jsonl_records

CALL_SCHEMA: dict[str, Any] = {
    "rollout_id": pl.Int64,
    "started_at": pl.Float64,
    "target_groups": pl.Int64,
    "final": pl.Boolean,
}
KEPT_SCHEMA: dict[str, Any] = {
    "rollout_id": pl.Int64,
    "group_position": pl.Int64,
    "async_group_id": pl.Int64,
    "trajectory_id": pl.String,
    "sample_index": pl.Int64,
    "group_index": pl.Int64,
}
EVENT_SCHEMA: dict[str, Any] = {
    "rollout_id": pl.Int64,
    "at": pl.Float64,
    "kind": pl.String,
    "number": pl.Int64,
}

DUMPS, ROLLOUTS = "rollout_data", "rollouts.jsonl"

ZONE_STEP_S = 900.0
"""Time zones are whole quarter hours: the log offset is rounded to this."""

_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) (\S+) (\w+) (.*)$")
_CALL_START = re.compile(
    r"starting Dressage partial async rollout: rollout_id=(\d+) "
    r"target_groups=(\d+) target_samples=(\d+)"
)
_FAILED_SESSION = re.compile(r"blackbox rollout failed for session_id=(\S+?):")
_EVENTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("dropped_stale", re.compile(r"dropping stale Dressage partial async rollout group (\d+)")),
    ("retried", re.compile(r"returned group (\d+) to rollout buffer for retry")),
    ("exhausted", re.compile(r"partial rollout group (\d+) exhausted retries")),
    ("final_unconsumed", re.compile(r"dropping (\d+) extra completed partial rollout groups")),
    ("final_drained", re.compile(r"drained (\d+) completed partial rollout groups")),
)
_FINAL = re.compile(r"final rollout (\d+) completed")
_WEIGHTS = re.compile(r"weights updated \(weight_update_after_rollout_(\d+)\): version (\S+)")


@dataclass(frozen=True)
class LogEvent:
    """One line of the log that the replay's self-check compares with: a stale drop, a
    retry or exhausted retry (``number`` = async group id) or a final-drain count."""

    at: float
    kind: str
    number: int


@dataclass(frozen=True)
class DressageLog:
    """What ``dressage_log.txt`` says, times in Unix seconds (zone already applied)."""

    call_starts: dict[int, float] = field(default_factory=dict)
    target_groups: int | None = None
    samples_per_prompt: int | None = None
    final_rollout_id: int | None = None
    events: tuple[LogEvent, ...] = ()
    failed_sessions: tuple[tuple[float, str], ...] = ()
    weight_updates: tuple[tuple[float, int, str], ...] = ()
    zone_offset_s: float = 0.0
    zone_from: str = "none"
    """How the zone was found: ``failures`` (error.json times), ``first_call`` or ``none``."""


def _parse_lines(path: Path) -> list[tuple[float, str]]:
    """(naive time read as UTC, message) of every line in the logging format."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise InputNotFoundError(f"{path}: cannot read ({exc.strerror})") from exc
    lines: list[tuple[float, str]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        match = _LINE.match(line)
        if match is None:
            continue  # tracebacks and other writers' lines carry nothing the replay uses
        try:
            stamp = dt.datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S")
        except ValueError as exc:
            raise LogFormatError(
                f"{path}:{number}: not a valid time ({match.group(1)}); "
                "the log must be Python logging's '%(asctime)s' format"
            ) from exc
        seconds = stamp.replace(tzinfo=dt.UTC).timestamp() + int(match.group(2)) / 1000.0
        lines.append((seconds, match.group(5)))
    return lines


def zone_offset(
    lines: list[tuple[float, str]],
    error_times: Mapping[str, float],
    first_finish: float | None,
) -> tuple[float, str]:
    """Seconds to add to the log's local times to get Unix time, and how it was found.

    The median difference between each failed session's ``error.json`` time and its
    "blackbox rollout failed" line, rounded to a quarter hour; without such lines, the
    gap from the first rollout call to the first finished trajectory, rounded the same way.
    """
    diffs = []
    for at, message in lines:
        match = _FAILED_SESSION.search(message)
        if match is not None and match.group(1) in error_times:
            diffs.append(error_times[match.group(1)] - at)
    if diffs:
        return round(statistics.median_high(diffs) / ZONE_STEP_S) * ZONE_STEP_S, "failures"
    first_call = next((at for at, message in lines if _CALL_START.match(message)), None)
    if first_call is not None and first_finish is not None:
        return round((first_finish - first_call) / ZONE_STEP_S) * ZONE_STEP_S, "first_call"
    return 0.0, "none"


def read_dressage_log(
    path: Path,
    *,
    error_times: Mapping[str, float],
    first_finish: float | None,
) -> DressageLog:
    """Read ``dressage_log.txt``: call starts, batch size, final call and the drop, retry
    and drain lines, in Unix seconds.

    ``error_times`` (session id -> ``error.json`` timestamp) and ``first_finish`` (the
    earliest trajectory finish) calibrate the log's time zone (see :func:`zone_offset`).
    """
    lines = _parse_lines(path)
    offset, zone_from = zone_offset(lines, error_times, first_finish)
    starts: dict[int, float] = {}
    target_groups = samples_per_prompt = final = None
    events: list[LogEvent] = []
    failed: list[tuple[float, str]] = []
    updates: list[tuple[float, int, str]] = []
    for local, message in lines:
        at = local + offset
        if match := _CALL_START.match(message):
            starts[int(match.group(1))] = at
            target_groups = int(match.group(2))
            if target_groups:
                samples_per_prompt = int(match.group(3)) // target_groups
        elif match := _FINAL.match(message):
            final = int(match.group(1))
        elif match := _WEIGHTS.match(message):
            updates.append((at, int(match.group(1)), match.group(2)))
        elif match := _FAILED_SESSION.search(message):
            failed.append((at, match.group(1)))
        else:
            for kind, pattern in _EVENTS:
                if event := pattern.match(message):
                    events.append(LogEvent(at, kind, int(event.group(1))))
                    break
    return DressageLog(
        call_starts=starts,
        target_groups=target_groups,
        samples_per_prompt=samples_per_prompt,
        final_rollout_id=final,
        events=tuple(events),
        failed_sessions=tuple(failed),
        weight_updates=tuple(updates),
        zone_offset_s=offset,
        zone_from=zone_from,
    )


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The rows of ``dressage_metrics.jsonl`` (one per rollout step, with ``rollout_id``),
    or of a CSV exported from a dashboard (:func:`read_metrics_csv`)."""
    if path.suffix.lower() == ".csv":
        return read_metrics_csv(path)
    rows: list[dict[str, Any]] = []
    for number, record in jsonl_records(path):
        if isinstance(record, LogFormatError):
            raise record
        if not isinstance(record, dict) or not _is_int(record.get("rollout_id")):
            raise LogFormatError(
                f"{path}:{number}: expected an object with an integer `rollout_id`; "
                "remove the line or the file (the metrics are only used for checks)"
            )
        rows.append(record)
    return rows


_STEP_COLUMNS = ("rollout_id", "Step", "step", "_step", "trainer/global_step")
"""Column names a dashboard export gives the step, in order of preference."""


def read_metrics_csv(path: Path) -> list[dict[str, Any]]:
    """Per-step metrics from a CSV exported from a dashboard (one row per step): the step
    in ``rollout_id`` (or ``Step``, ``step``, ``_step``), metric names as columns, with a
    ``<run name> - `` prefix dropped and the ``__MIN``/``__MAX`` columns of an export
    left out."""
    import polars as pl

    try:
        frame = pl.read_csv(path, infer_schema_length=None)
    except (pl.exceptions.PolarsError, OSError, UnicodeDecodeError) as exc:
        raise LogFormatError(
            f"{path}: not a readable CSV of metrics ({exc}); remove the file or export it "
            "again (the metrics are only used for checks)"
        ) from exc
    step = next((name for name in _STEP_COLUMNS if name in frame.columns), None)
    if step is None or not frame.schema[step].is_integer():
        raise LogFormatError(
            f"{path}: no integer step column (looked for {', '.join(_STEP_COLUMNS)}; columns: "
            f"{', '.join(frame.columns[:8])}); name the step column rollout_id"
        )
    rows = []
    for row in frame.iter_rows(named=True):
        metrics: dict[str, Any] = {"rollout_id": row[step]}
        for name, value in row.items():
            if name == step or name.endswith(("__MIN", "__MAX")) or value is None:
                continue
            metrics[name.split(" - ", 1)[-1]] = value
        rows.append(metrics)
    return rows


def read_prompt_order(path: Path) -> list[str]:
    """Instance ids of ``prompts.jsonl`` in file order: the order Dressage draws prompts in."""
    order: list[str] = []
    for number, record in jsonl_records(path):
        if isinstance(record, LogFormatError):
            raise record
        metadata = record.get("metadata") if isinstance(record, dict) else None
        instance = (metadata or {}).get("instance_id") if isinstance(metadata, dict) else None
        if instance is None and isinstance(record, dict):
            instance = record.get("instance_id")
        if instance is None:
            raise LogFormatError(
                f"{path}:{number}: a prompt without `metadata.instance_id`; "
                "remove prompts.jsonl to fall back to instance-id order"
            )
        order.append(str(instance))
    return order


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def read_dump_rows(root: Path) -> tuple[list[dict[str, Any]], str | None]:
    """One row per session of each step's dump, in dump order (``KEPT_SCHEMA``), and which
    file gave them: ``rollout_data/<step>.pt`` (safe reader), else ``rollouts.jsonl``."""
    by_step: dict[int, list[Any]] = {}
    folder = root / DUMPS
    paths = sorted(folder.glob("*.pt")) if folder.is_dir() else []
    paths = [p for p in paths if p.stem.isdigit()]  # eval_<n>.pt dumps are not steps
    for path in paths:
        rollout_id, samples = dump_samples(path, trust_pickle=False)
        by_step[rollout_id if rollout_id is not None else int(path.stem)] = samples
    source = DUMPS if paths else None
    if not paths and (root / ROLLOUTS).is_file():
        source = ROLLOUTS
        for number, sample in jsonl_records(root / ROLLOUTS):
            if isinstance(sample, LogFormatError):
                raise sample
            step = optional_int((sample.get("metadata") or {}).get("dressage_return_rollout_id"))
            if step is None:
                raise MissingFieldError(
                    f"{root / ROLLOUTS}:{number}: no metadata.dressage_return_rollout_id; "
                    "remove rollouts.jsonl or provide rollout_data/"
                )
            by_step.setdefault(step, []).append(sample)
    rows: list[dict[str, Any]] = []
    for step in sorted(by_step):
        rows += _dump_rows(step, by_step[step])
    return rows, source


def _dump_rows(step: int, samples: list[Any]) -> list[dict[str, Any]]:
    groups: dict[Any, int] = {}
    seen: set[str] = set()
    rows = []
    for sample in samples:
        meta = sample.get("metadata") or {}
        group_id = optional_int(meta.get("dressage_return_async_group_id"))
        key = (
            group_id
            if group_id is not None
            else (meta.get("instance_id"), sample.get("group_index"))
        )
        position = groups.setdefault(key, len(groups))
        session = meta.get("parent_traj_id") or meta.get("session_id") or sample.get("session_id")
        if session is None or session in seen:
            continue  # later segments of a trajectory already listed
        seen.add(str(session))
        rows.append(
            {
                "rollout_id": step,
                "group_position": position,
                "async_group_id": group_id,
                "trajectory_id": str(session),
                "sample_index": optional_int(sample.get("index")),
                "group_index": optional_int(sample.get("group_index")),
            }
        )
    return rows


def calls_frame(log: DressageLog | None) -> pl.DataFrame:
    if log is None or not log.call_starts:
        return pl.DataFrame(schema=CALL_SCHEMA)
    rows = [
        (rollout_id, start, log.target_groups, rollout_id == log.final_rollout_id)
        for rollout_id, start in sorted(log.call_starts.items())
    ]
    return pl.DataFrame(rows, schema=CALL_SCHEMA, orient="row")


def events_frame(log: DressageLog | None) -> pl.DataFrame:
    """Log events with the rollout call they happened in (the last call started by then)."""
    if log is None:
        return pl.DataFrame(schema=EVENT_SCHEMA)
    starts = sorted(log.call_starts.items())
    rows = []
    for event in log.events:
        call = max((rid for rid, start in starts if event.at >= start - 1e-3), default=None)
        rows.append((call, event.at, event.kind, event.number))
    return pl.DataFrame(rows, schema=EVENT_SCHEMA, orient="row")


def optional_int(value: Any) -> int | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
