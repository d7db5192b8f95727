"""Read ``dressage_log.txt``, the log a Dressage run leaves beside its artifacts: rollout
calls, stale drops, retries, the final drain (the run's metrics and prompt order are read
in :mod:`~analysis.formats.dressage.run_metrics`, its dumps in
:mod:`~analysis.formats.dressage.step_dumps`).

The log is Python logging in local time without a zone; :func:`read_dressage_log` finds
the zone by comparing its "blackbox rollout failed" lines with the ``error.json`` times of
the same sessions, because the replay places rollout calls among artifact times.
"""

from __future__ import annotations

import datetime as dt
import re
import statistics
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from analysis.errors import InputNotFoundError, LogFormatError
from analysis.formats.dressage.sessions import named_max_preempts
from analysis.table.limits import DEFAULT_LIMITS, Limits, over_limit

CALL_SCHEMA: dict[str, Any] = {
    "rollout_id": pl.Int64,
    "started_at": pl.Float64,
    "target_groups": pl.Int64,
    "final": pl.Boolean,
}
EVENT_SCHEMA: dict[str, Any] = {
    "rollout_id": pl.Int64,
    "at": pl.Float64,
    "kind": pl.String,
    "number": pl.Int64,
}


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
_KNOWN_STARTS = (
    "starting Dressage partial async rollout",
    "dropping stale Dressage partial async rollout group",
    "returned group",
    "partial rollout group",
    "dropping ",
    "drained ",
    "final rollout",
    "weights updated",
)
"""How the lines the replay reads begin: such a line that its pattern does not match
(``rollout_id=abc``, a line cut short) is malformed, and warned about."""
_DATED = re.compile(r"^\d{4}-\d\d-\d\d[ T]\d")
"""A line that begins as a logging line does (a cut one that _LINE does not match is
malformed; tracebacks and other writers' lines do not begin so)."""
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
    max_preempts: tuple[int, ...] = ()
    """The ``max_preempts`` named by span rejections quoted in retry and exhaustion lines."""
    malformed: tuple[tuple[int, str], ...] = ()
    """(line number, what is wrong) of each line not read: bad bytes, or a line the
    replay reads that does not parse."""

    def warnings(self, path: str) -> list[str]:
        """One warning naming the malformed lines (the first few), if any."""
        if not self.malformed:
            return []
        shown = "; ".join(f"line {number}: {what}" for number, what in self.malformed[:5])
        more = f"; and {len(self.malformed) - 5} more" if len(self.malformed) > 5 else ""
        return [
            f"{path}: {len(self.malformed)} malformed line(s) not read ({shown}{more}); the "
            "replay's log checks may disagree where they are: correct or remove them"
        ]


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


def _line_fault(line: str) -> str | None:
    """What makes a line of the log unreadable as text, if anything."""
    if "\x00" in line:
        return "a NUL byte"
    if "\ufffd" in line:
        return "bytes that are not UTF-8"
    return None


def _parse_lines(
    path: Path, limits: Limits, malformed: list[tuple[int, str]]
) -> list[tuple[float, str, int]]:
    """(naive time read as UTC, message, line number) of every line in the logging format;
    lines with bad bytes, or dated but cut short, go to ``malformed``."""
    lines: list[tuple[float, str, int]] = []
    for number, line in log_lines(path, limits):
        if (fault := _line_fault(line)) is not None:
            malformed.append((number, fault))
            continue
        match = _LINE.match(line)
        if match is None:
            if _DATED.match(line):
                malformed.append((number, "not a whole logging line"))
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
    malformed: list[tuple[int, str]] = []
    lines = _parse_lines(path, limits, malformed)
    offset, zone_from = zone_offset(
        [(at, message) for at, message, _ in lines], error_times, first_finish
    )
    starts: dict[int, float] = {}
    target_groups = samples_per_prompt = final = None
    events: list[LogEvent] = []
    failed: list[tuple[float, str]] = []
    updates: list[tuple[float, int, str]] = []
    preempts: set[int] = set()
    for local, message, number in lines:
        at, where = local + offset, f"{path}:{number}"
        preempts |= named_max_preempts(message)

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
            else:
                if message.startswith(_KNOWN_STARTS):
                    malformed.append((number, "a line the replay reads, not in its format"))
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
        max_preempts=tuple(sorted(preempts)),
        malformed=tuple(sorted(malformed)),
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
