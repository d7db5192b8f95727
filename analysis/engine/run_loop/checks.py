"""The self-check of a replayed run: per step, what the run's own files say (its dumps, log
lines and metrics) beside what the replay gives, and the output frames of a replay."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import polars as pl

from analysis.engine.decisions import Decision
from analysis.engine.run_loop.collector import Attempt, AttemptDecision, Collector
from analysis.formats.dressage.run import RunLog


def output_frames(
    run: RunLog,
    attempts: list[Attempt],
    collector: Collector,
    batches: Mapping[int, int],
    possible: Mapping[str, tuple[str, ...]] | None = None,
    ambiguous: Collection[str] = (),
) -> tuple[pl.DataFrame, pl.DataFrame]:
    decisions = collector.decisions
    by_id = {a.attempt_id: a for a in attempts}
    attempt_rows = []
    for row in run.attempts.sort("draw", "retry_count", nulls_last=True).iter_rows(named=True):
        d, attempt = decisions[row["attempt_id"]], by_id[row["attempt_id"]]
        failed = d.decision in _FAILURES
        attempt_rows.append(
            {
                "group_id": row["attempt_id"],
                "instance_id": row["instance_id"],
                "retry_count": row["retry_count"],
                "decision": d.decision.value,
                "stage": None if d.stage is None else d.stage.value,
                "batch": batches.get(d.rollout_id)
                if d.decision is Decision.KEPT and d.rollout_id is not None
                else None,
                "decided_in": d.rollout_id,
                "fail_kind": attempt.fail_kind,
                "retried": d.retried,
                "span_verdict": attempt.span_verdict if failed else None,
                "leftover": d.leftover,
                "completed_at": attempt.completed_at,
                "trajectories": len(attempt.sessions),
                "new_versions": _listed(collector.new_versions.get(attempt.attempt_id)),
                "possible": "|".join((possible or {}).get(row["attempt_id"], ())) or None,
                "order_ambiguous": row["attempt_id"] in ambiguous,
            }
        )
    attempt_frame = pl.DataFrame(attempt_rows, schema=ATTEMPT_COLUMNS)
    per_attempt = {row["group_id"]: row for row in attempt_rows}
    rows = []
    for t in run.trajectories.iter_rows(named=True):
        a = per_attempt[t["attempt_id"]]
        d = decisions[t["attempt_id"]]
        rows.append(
            {
                "trajectory_id": t["trajectory_id"],
                "group_id": t["attempt_id"],
                **{
                    k: a[k]
                    for k in (
                        "decision",
                        "stage",
                        "batch",
                        "retried",
                        "span_verdict",
                        "leftover",
                        "possible",
                        "order_ambiguous",
                    )
                },
                "version_gap": d.gaps.get(t["trajectory_id"]),
                "span": t["span"],
                "decided_in": a["decided_in"],
                "end_version": t["end_version"],
                "fail_kind": t["fail_kind"],
                "response_tokens": t["response_tokens"],
            }
        )
    return pl.DataFrame(rows, schema=TRAJECTORY_COLUMNS), attempt_frame


def _listed(labels: tuple[str, ...] | None) -> list[str] | None:
    """Labels an attempt added to the tracker; None when it was never observed."""
    return None if labels is None else list(labels)


def _text(value: Any) -> str | None:
    """A check value as text: integers without ``.0``, floats to 6 significant digits."""
    if value is None:
        return None
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else f"{value:.6g}"
    return str(value)


def _check(
    step: int | None, name: str, expected: Any, replayed: Any, agrees: bool | None = None
) -> dict[str, Any]:
    if agrees is None:
        agrees = (
            expected is not None
            and replayed is not None
            and abs(float(expected) - float(replayed)) <= 1e-9
        )
    return {
        "step": step,
        "check": name,
        "expected": _text(expected),
        "replayed": _text(replayed),
        "agrees": agrees,
    }


def self_checks(
    run: RunLog,
    attempts: list[Attempt],
    collector: Collector,
    starts: Mapping[int, float],
    kept_by_step: Mapping[int, set[str]],
    metrics: Mapping[int, Mapping[str, Any]],
) -> pl.DataFrame:
    """Compare the replay with the run's own records: dumps, metrics and log lines."""
    decisions = collector.decisions
    kept: dict[int, list[Attempt]] = {}
    for attempt in attempts:
        d = decisions[attempt.attempt_id]
        if d.decision is Decision.KEPT and d.rollout_id is not None:
            kept.setdefault(d.rollout_id, []).append(attempt)
    owner = dict(run.trajectories.select("trajectory_id", "attempt_id").iter_rows())
    rows = []
    for step, sessions in sorted(kept_by_step.items()):
        replayed = {s for a in kept.get(step, []) for s in a.sessions}
        rows.append(
            _check(
                step,
                "kept_groups",
                ", ".join(sorted({owner.get(s, s) for s in sessions})),
                ", ".join(sorted(a.attempt_id for a in kept.get(step, []))),
                agrees=replayed == sessions,
            )
        )
    for step, row in sorted(metrics.items()):
        for name, value in _metric_values(collector, step, kept.get(step, [])).items():
            if row.get(name) is not None:
                rows.append(_check(step, name, row[name], value))
    rows += _log_checks(run, decisions, starts)
    return pl.DataFrame(rows, schema=CHECK_COLUMNS)


def _metric_values(collector: Collector, step: int, kept: list[Attempt]) -> dict[str, Any]:
    """What Dressage's metrics for ``step`` should read if the replay is right."""
    decided = [(a, collector.decisions[a.attempt_id]) for a in collector.order]
    failures = [a for a, d in decided if d.rollout_id == step and d.decision in _FAILURES]
    current, keep = collector.current_after.get(step), collector.tracker.keep_versions
    values: dict[str, Any] = {
        **step_counts(collector, step),
        # Dressage's tracker: max(0, versions - K), written beside the current index (off: none)
        "staleness/cutoff_version_index": (
            None if current is None or not keep else max(0, current + 1 - keep)
        ),
        "staleness/partial_rollout_rejected_groups": sum(a.span_verdict for a in failures),
        "dressage/partial_rollout_returned_groups": len(kept),
    }
    gaps = [
        g for a in kept for g in collector.decisions[a.attempt_id].gaps.values() if g is not None
    ]
    spans = [span for a in kept for span in a.spans]
    for name, series in (("version_gap", gaps), ("version_span", spans)):
        if series:
            values[f"staleness/{name}_min"] = min(series)
            values[f"staleness/{name}_max"] = max(series)
            values[f"staleness/{name}_mean"] = sum(series) / len(series)
    return values


def _log_checks(
    run: RunLog, decisions: Mapping[str, AttemptDecision], starts: Mapping[int, float]
) -> list[dict[str, Any]]:
    """Drops, retries and exhausted retries per call, and the final drain, against the log."""
    if not run.calls.height:  # no call line: the fully-async loop's log, or none
        return _run_totals(run, decisions) if "dressage_log.txt" in run.sources else []
    logged: dict[tuple[int | None, str], int] = {}
    for rollout_id, kind, number in run.log_events.select(
        "rollout_id", "kind", "number"
    ).iter_rows():
        count = number if kind.startswith("final_") else 1
        logged[(rollout_id, kind)] = logged.get((rollout_id, kind), 0) + count
    replayed: dict[tuple[int | None, str], int] = {}
    for d in decisions.values():
        # The kinds of log line (analysis/formats/dressage/log.py) each decision leaves.
        kind = {
            Decision.DROPPED_STALE: "dropped_stale",
            Decision.FAILED: "retried" if d.retried else "exhausted",
            Decision.REJECTED_SPAN: "retried" if d.retried else "exhausted",
        }.get(d.decision)
        if d.decision is Decision.LEFTOVER:
            kind = "final_unconsumed" if d.leftover == "unconsumed_after_final" else "final_drained"
        if kind is not None:
            replayed[(d.rollout_id, kind)] = replayed.get((d.rollout_id, kind), 0) + 1
    # Retry lines are WARNINGs: a log kept at a higher level (or a simulated one) has none,
    # and then says nothing of retries either way.
    retries_logged = any(kind in ("retried", "exhausted") for _, kind in logged)
    kinds = ("dropped_stale", "retried", "exhausted") if retries_logged else ("dropped_stale",)
    rows = []
    for rollout_id in sorted(starts):
        for kind in kinds:
            key = (rollout_id, kind)
            rows.append(_check(rollout_id, f"log/{kind}", logged.get(key, 0), replayed.get(key, 0)))
    if run.final_rollout_id is not None:
        for kind in ("final_unconsumed", "final_drained"):
            key = (run.final_rollout_id, kind)
            rows.append(
                _check(
                    run.final_rollout_id, f"log/{kind}", logged.get(key, 0), replayed.get(key, 0)
                )
            )
    return rows


def _run_totals(run: RunLog, decisions: Mapping[str, AttemptDecision]) -> list[dict[str, Any]]:
    """A log without call lines (the fully-async loop logs none; docs/semantics.md §12.4):
    its drop, retry and exhausted lines counted over the whole run (step null) against the
    replay's. Which call wrote a line cannot be told: the calls' starts are inferred at the
    earliest cut that reproduces the dumps, and a line's time is a poll's, not a
    completion's."""
    logged = dict(run.log_events.group_by("kind").len().iter_rows())
    replayed = {"dropped_stale": 0, "retried": 0, "exhausted": 0}
    for d in decisions.values():
        if d.decision is Decision.DROPPED_STALE:
            replayed["dropped_stale"] += 1
        elif d.decision in _FAILURES:
            replayed["retried" if d.retried else "exhausted"] += 1
    # Retry lines are WARNINGs: a log kept at a higher level has none (as per call).
    retries_logged = bool(logged.get("retried") or logged.get("exhausted"))
    kinds = ("dropped_stale", "retried", "exhausted") if retries_logged else ("dropped_stale",)
    return [_check(None, f"log/{kind}", logged.get(kind, 0), replayed[kind]) for kind in kinds]


def step_counts(collector: Collector, rollout_id: int) -> dict[str, int | None]:
    decided = [d for d in collector.decisions.values() if d.rollout_id == rollout_id]
    failures = [d for d in decided if d.decision in _FAILURES]
    return {
        "staleness/dropped_groups": sum(d.decision is Decision.DROPPED_STALE for d in decided),
        "dressage/partial_rollout_retried_groups": sum(bool(d.retried) for d in failures),
        "dressage/partial_rollout_failed_groups": sum(not d.retried for d in failures),
        "staleness/current_version_index": collector.current_after.get(rollout_id),
    }


_FAILURES = (Decision.FAILED, Decision.REJECTED_SPAN)
"""The decisions of an attempt that failed (and may be retried)."""

TRAJECTORY_COLUMNS: dict[str, Any] = {
    "trajectory_id": pl.String,
    "group_id": pl.String,
    "decision": pl.String,
    "stage": pl.String,
    "batch": pl.Int64,
    "version_gap": pl.Int64,
    "span": pl.Int64,
    "decided_in": pl.Int64,
    "end_version": pl.String,
    "fail_kind": pl.String,
    "retried": pl.Boolean,
    "span_verdict": pl.Boolean,
    "leftover": pl.String,
    "possible": pl.String,
    "response_tokens": pl.Int64,
    "order_ambiguous": pl.Boolean,
}


ATTEMPT_COLUMNS: dict[str, Any] = {
    "group_id": pl.String,
    "instance_id": pl.String,
    "retry_count": pl.Int64,
    "decision": pl.String,
    "stage": pl.String,
    "batch": pl.Int64,
    "decided_in": pl.Int64,
    "fail_kind": pl.String,
    "retried": pl.Boolean,
    "span_verdict": pl.Boolean,
    "leftover": pl.String,
    "completed_at": pl.Float64,
    "trajectories": pl.Int64,
    "new_versions": pl.List(pl.String),
    "possible": pl.String,
    "order_ambiguous": pl.Boolean,
}


CHECK_COLUMNS: dict[str, Any] = {
    "step": pl.Int64,
    "check": pl.String,
    "expected": pl.String,
    "replayed": pl.String,
    "agrees": pl.Boolean,
}


def keep_versions_told(metrics: pl.DataFrame) -> int | None:
    """The K Dressage's staleness metrics imply, or None without them: the tracker writes
    ``staleness/*`` index metrics only when on (none: K = 0); its cutoff index is
    ``max(0, versions - K)``, so a step with a cutoff above 0 gives K = current + 1 -
    cutoff; a cutoff that stayed 0 acts as any K above the versions seen (the largest
    current index + 1)."""
    current, cutoff = "staleness/current_version_index", "staleness/cutoff_version_index"
    if metrics.height == 0 or "rollout_id" not in metrics.columns:
        return None
    if current not in metrics.columns:
        return 0
    rows = metrics.select(current, *([cutoff] if cutoff in metrics.columns else []))
    most = None
    for row in rows.iter_rows():
        if row[0] is None:
            continue
        if len(row) > 1 and row[1] is not None and row[1] > 0:
            return int(row[0]) + 1 - int(row[1])
        most = int(row[0]) if most is None else max(most, int(row[0]))
    return None if most is None else most + 1


def at_told_k(metrics: pl.DataFrame, keep_versions: int) -> bool:
    """Whether a replay at ``keep_versions`` replays the K the run's metrics tell
    (:func:`keep_versions_told`; a cutoff that stayed 0 is told by every K from the versions
    seen up), or the metrics tell none: a replay whose checks are expected to agree, not a
    what-if at another K."""
    told = keep_versions_told(metrics)
    if told is None or keep_versions == told:
        return True
    cutoff = "staleness/cutoff_version_index"
    reached = cutoff in metrics.columns and bool((metrics[cutoff].drop_nulls() > 0).any())
    return told > 0 and not reached and keep_versions > told


def disagreeing_steps(
    checks: pl.DataFrame, wanted: bool | None = True, at_told: bool = True
) -> frozenset[int]:
    """The steps some check of which (a dump, a metric, a log line of that step) disagrees
    with the replay; run-wide checks (no step) name no call and are left out. None when
    not ``wanted``; ``wanted`` None: only for a replay ``at_told`` K (not a what-if)."""
    if not (at_told if wanted is None else wanted):
        return frozenset()
    wrong = checks.filter(~pl.col("agrees"))["step"].drop_nulls()
    return frozenset(int(step) for step in wrong.to_list())
