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
import math
import re
import statistics
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from analysis.errors import (
    InputNotFoundError,
    LogFormatError,
    MissingFieldError,
    UnsafePickleError,
    short_repr,
)
from analysis.formats.slime_dumps.reader import dump_samples
from analysis.formats.text.jsonl import jsonl_records
from analysis.formats.text.lean import lean_plan
from analysis.table.fieldmap import FieldMap
from analysis.table.limits import DEFAULT_LIMITS, Limits, over_limit

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


def log_lines(path: Path, limits: Limits = DEFAULT_LIMITS) -> Iterator[tuple[int, str]]:
    """(line number, text) of each line of a text log, none held past ``max_record_bytes``
    (a log of one endless line is refused, not read whole)."""
    most = limits.max_record_bytes
    try:
        with path.open("rb") as handle:
            for number, line in enumerate(iter(lambda: handle.readline(most + 1), b""), 1):
                if len(line) > most and not line.endswith(b"\n"):
                    raise over_limit(
                        f"{path}:{number}",
                        f"a line of more than {most:,} bytes",
                        "max_record_bytes",
                        most,
                    )
                yield number, line.decode("utf-8", "replace").rstrip("\r\n")
    except OSError as exc:
        raise InputNotFoundError(f"{path}: cannot read ({exc.strerror})") from exc


def _parse_lines(path: Path, limits: Limits) -> list[tuple[float, str, int]]:
    """(naive time read as UTC, message, line number) of every line in the logging format."""
    lines: list[tuple[float, str, int]] = []
    for number, line in log_lines(path, limits):
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
        lines.append((seconds, match.group(5), number))
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
    limits: Limits = DEFAULT_LIMITS,
) -> DressageLog:
    """Read ``dressage_log.txt``: call starts, batch size, final call and the drop, retry
    and drain lines, in Unix seconds.

    ``error_times`` (session id -> ``error.json`` timestamp) and ``first_finish`` (the
    earliest trajectory finish) calibrate the log's time zone (see :func:`zone_offset`).
    """
    lines = _parse_lines(path, limits)
    offset, zone_from = zone_offset(
        [(at, message) for at, message, _ in lines], error_times, first_finish
    )
    starts: dict[int, float] = {}
    target_groups = samples_per_prompt = final = None
    events: list[LogEvent] = []
    failed: list[tuple[float, str]] = []
    updates: list[tuple[float, int, str]] = []
    for local, message, number in lines:
        at, where = local + offset, f"{path}:{number}"

        if match := _CALL_START.match(message):
            starts[_log_int(match.group(1), where)] = at
            target_groups = _log_int(match.group(2), where)
            if target_groups:
                samples_per_prompt = _log_int(match.group(3), where) // target_groups
        elif match := _FINAL.match(message):
            final = _log_int(match.group(1), where)
        elif match := _WEIGHTS.match(message):
            updates.append((at, _log_int(match.group(1), where), match.group(2)))
        elif match := _FAILED_SESSION.search(message):
            failed.append((at, match.group(1)))
        else:
            for kind, pattern in _EVENTS:
                if event := pattern.match(message):
                    events.append(LogEvent(at, kind, _log_int(event.group(1), where)))
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


def call_start_target_groups(path: Path, limits: Limits = DEFAULT_LIMITS) -> int | None:
    """The target_groups of the last rollout call the log starts (what
    :func:`read_dressage_log` keeps), without reading the rest of each line's meaning;
    None when it starts none."""
    target = None
    for number, line in log_lines(path, limits):
        parsed = _LINE.match(line)
        if parsed is not None and (match := _CALL_START.match(parsed.group(5))):
            target = _log_int(match.group(2), f"{path}:{number}")
    return target


def _log_int(digits: str, where: str) -> int:
    """A number of a log line; one beyond 64 bits is no step, batch size or group id."""
    digits = digits.lstrip("0") or "0"
    value = int(digits) if len(digits) < 20 else 2**63  # int() of 4,301 digits raises
    if value >= 2**63:
        raise LogFormatError(
            f"{where}: the number {digits[:30]} does not fit in 64 bits; correct the line, or "
            "move dressage_log.txt out of the run folder (call starts are then inferred)"
        )
    return value


METRICS_USE = (
    "the metrics are checked against the replay and, without dressage_log.txt, give the "
    "batch size and place the rollout calls"
)
"""What a run's metrics are for, said in the errors about them."""

USED_METRICS = (
    "staleness/dropped_groups",
    "staleness/current_version_index",
    "staleness/partial_rollout_rejected_groups",
    "dressage/partial_rollout_retried_groups",
    "dressage/partial_rollout_failed_groups",
    "dressage/partial_rollout_returned_groups",
    *(f"staleness/{name}_{stat}" for name in ("version_gap", "version_span")
      for stat in ("min", "max", "mean")),
    "dressage/partial_rollout_target_groups",
    "dressage/partial_rollout_target_samples",
)  # fmt: skip
"""The metrics the run loop reads: each must be a finite number (or absent / null)."""
_SIZES = USED_METRICS[-2:]
"""Batch-size metrics: whole numbers >= 1."""


def read_metrics(path: Path, limits: Limits = DEFAULT_LIMITS) -> list[dict[str, Any]]:
    """The rows of ``dressage_metrics.jsonl`` (one per rollout step, with ``rollout_id``),
    or of a CSV exported from a dashboard (:func:`read_metrics_csv`); the metrics the
    replay uses (:data:`USED_METRICS`) are checked to be numbers."""
    if path.suffix.lower() == ".csv":
        return read_metrics_csv(path, limits)
    rows: list[dict[str, Any]] = []
    for number, record in jsonl_records(path, limits):
        if isinstance(record, LogFormatError):
            raise record
        if not isinstance(record, dict) or not _is_int(record.get("rollout_id")):
            raise LogFormatError(
                f"{path}:{number}: expected an object with an integer `rollout_id`; "
                f"remove the line or the file ({METRICS_USE})"
            )
        rows.append(_checked_metrics(record, f"{path}:{number}"))
    return rows


def _checked_metrics(row: dict[str, Any], where: str) -> dict[str, Any]:
    """``row`` if the metrics the replay uses are numbers (null or absent: not checked)."""
    if not -(2**63) <= row["rollout_id"] < 2**63:
        raise LogFormatError(
            f"{where}: `rollout_id` does not fit in 64 bits; correct the line or remove it "
            f"({METRICS_USE})"
        )
    for name in USED_METRICS:
        value = row.get(name)
        if value is None:
            continue
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if (
            not number
            or not math.isfinite(value)
            or (name in _SIZES and (value < 1 or value != int(value)))
        ):
            wanted = "a whole number >= 1" if name in _SIZES else "a finite number"
            raise LogFormatError(
                f"{where}: `{name}` must be {wanted} (found {short_repr(value)}); correct the "
                f"line or remove it ({METRICS_USE})"
            )
    return row


_STEP_COLUMNS = ("rollout_id", "Step", "step", "_step", "trainer/global_step")
"""Column names a dashboard export gives the step, in order of preference."""


def read_metrics_csv(path: Path, limits: Limits = DEFAULT_LIMITS) -> list[dict[str, Any]]:
    """Per-step metrics from a CSV exported from a dashboard (one row per step): the step
    in ``rollout_id`` (or ``Step``, ``step``, ``_step``), metric names as columns, with a
    ``<run name> - `` prefix dropped and the ``__MIN``/``__MAX`` columns of an export
    left out. No line may be longer than ``max_record_bytes`` (checked before parsing)."""
    import polars as pl

    for _ in log_lines(path, limits):
        pass

    try:
        frame = pl.read_csv(path, infer_schema_length=None)
    except (pl.exceptions.PolarsError, OSError, UnicodeDecodeError) as exc:
        raise LogFormatError(
            f"{path}: not a readable CSV of metrics ({exc}); remove the file or export it "
            f"again ({METRICS_USE})"
        ) from exc
    step = next((name for name in _STEP_COLUMNS if name in frame.columns), None)
    if step is None or not frame.schema[step].is_integer():
        raise LogFormatError(
            f"{path}: no integer step column (looked for {', '.join(_STEP_COLUMNS)}; columns: "
            f"{', '.join(frame.columns[:8])}); name the step column rollout_id"
        )
    rows = []
    for number, row in enumerate(frame.iter_rows(named=True), start=2):
        if row[step] is None:
            raise LogFormatError(
                f"{path}:{number}: no step in column {step}; correct the line or remove it "
                f"({METRICS_USE})"
            )
        metrics: dict[str, Any] = {"rollout_id": row[step]}
        for name, value in row.items():
            if name == step or name.endswith(("__MIN", "__MAX")) or value is None:
                continue
            metrics[name.split(" - ", 1)[-1]] = value
        rows.append(_checked_metrics(metrics, f"{path}:{number}"))
    return rows


def read_prompt_order(path: Path, limits: Limits = DEFAULT_LIMITS) -> list[str]:
    """Instance ids of ``prompts.jsonl`` in file order: the order Dressage draws prompts in."""
    order: list[str] = []
    for number, record in jsonl_records(path, limits):
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


def read_dump_rows(
    root: Path, limits: Limits = DEFAULT_LIMITS
) -> tuple[list[dict[str, Any]], str | None]:
    """One row per session of each step's dump, in dump order (``KEPT_SCHEMA``), and which
    file gave them: ``rollout_data/<step>.pt`` (safe reader), else ``rollouts.jsonl``."""
    by_step: dict[int, list[tuple[str, dict[str, Any]]]] = {}
    folder = root / DUMPS
    paths = sorted(folder.glob("*.pt")) if folder.is_dir() else []
    paths = [p for p in paths if p.stem.isdigit()]  # eval_<n>.pt dumps are not steps
    for path in paths:
        rollout_id, samples = _safe_dump(path, limits)
        if rollout_id is not None and optional_int(rollout_id) is None:
            raise LogFormatError(f"{path}: rollout_id does not fit in 64 bits; {DUMP_FIX}")
        by_step[rollout_id if rollout_id is not None else int(path.stem)] = [
            (f"{path}: sample {i}", _slim(_sample(sample, f"{path}: sample {i}", DUMP_FIX)))
            for i, sample in enumerate(samples)
        ]
    source = DUMPS if paths else None
    if not paths and (root / ROLLOUTS).is_file():
        source = ROLLOUTS
        fix = "correct the line, or remove rollouts.jsonl (the kept groups are then not checked)"
        # Lean: a long line's token lists are neither kept nor folded (only ids are read).
        lean = lean_plan(FieldMap(), fold=False)
        for number, record in jsonl_records(root / ROLLOUTS, limits, lean=lean):
            if isinstance(record, LogFormatError):
                raise record
            where = f"{root / ROLLOUTS}:{number}"
            sample = _sample(record, where, fix)
            step = optional_int(sample["metadata"].get("dressage_return_rollout_id"))
            if step is None:
                raise MissingFieldError(
                    f"{where}: no metadata.dressage_return_rollout_id; "
                    "remove rollouts.jsonl or provide rollout_data/"
                )
            by_step.setdefault(step, []).append((where, _slim(sample)))
    rows: list[dict[str, Any]] = []
    for step in sorted(by_step):
        rows += _dump_rows(step, [sample for _, sample in by_step[step]])
    return rows, source


DUMP_FIX = (
    "move rollout_data/ out of the run folder to replay without it (the run loop then "
    "checks against rollouts.jsonl if there is one, else the log and metrics only; the "
    "sample order of kept attempts is then guessed)"
)


def _safe_dump(path: Path, limits: Limits) -> tuple[int | None, list[Any]]:
    """A run folder's dump, read by the safe reader: it rebuilds tensors and NumPy arrays,
    and refuses other classes; trusting the pickle is no option here, so not suggested."""
    try:
        return dump_samples(path, trust_pickle=False, limits=limits)
    except UnsafePickleError as exc:
        raise UnsafePickleError(  # without its advice to trust the pickle
            exc.base + "; a run folder's dumps are always read by the safe reader (it rebuilds "
            f"tensors and NumPy arrays); {DUMP_FIX}"
        ) from None


def _sample(record: Any, where: str, fix: str) -> dict[str, Any]:
    """A sample of a dump or ``rollouts.jsonl``, with its ``metadata`` an object."""
    if not isinstance(record, dict):
        raise LogFormatError(
            f"{where}: expected a sample object (found {type(record).__name__}); {fix}"
        )
    metadata = record.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise LogFormatError(
            f"{where}: `metadata` must be an object (found {short_repr(metadata)}); {fix}"
        )
    return {**record, "metadata": metadata or {}}


_SAMPLE_KEYS = ("index", "group_index", "session_id")
_METADATA_KEYS = (
    "dressage_return_async_group_id", "instance_id", "parent_traj_id", "session_id",
    "dressage_return_rollout_id",
)  # fmt: skip


def _slim(sample: dict[str, Any]) -> dict[str, Any]:
    """What :func:`_dump_rows` reads of a sample: a run's samples are held until the
    whole file is read, and their token lists would be most of it."""
    meta = sample["metadata"]
    slim = {key: sample[key] for key in _SAMPLE_KEYS if key in sample}
    slim["metadata"] = {key: meta[key] for key in _METADATA_KEYS if key in meta}
    return slim


def _dump_rows(step: int, samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    groups: dict[Any, int] = {}
    seen: set[str] = set()
    rows = []
    for sample in samples:
        meta = sample["metadata"]
        group_id = optional_int(meta.get("dressage_return_async_group_id"))
        key = (
            group_id
            if group_id is not None
            else (str(meta.get("instance_id")), optional_int(sample.get("group_index")))
        )
        position = groups.setdefault(key, len(groups))
        session = meta.get("parent_traj_id") or meta.get("session_id") or sample.get("session_id")
        if session is None or str(session) in seen:
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
    """An id or index that may be absent or unreadable (then None): an integer that fits
    in 64 bits, an integral float, or text of one."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, float) and not value.is_integer():
        return None
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if -(2**63) <= number < 2**63 else None
