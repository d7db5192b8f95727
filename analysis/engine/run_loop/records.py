"""What a run's files give the collector loop (:mod:`.collector`): its attempts, and per
step the groups its dump kept, its metrics row and the log's stale-drop lines."""

from __future__ import annotations

from typing import Any

import polars as pl

from analysis.engine.run_loop.collector import Attempt
from analysis.formats.dressage.run import RunLog


def attempts_from(run: RunLog) -> list[Attempt]:
    trajectories = run.trajectories.sort("attempt_id", "sample_position")
    sessions: dict[str, list[str]] = {}
    versions: dict[str, list[tuple[str, str]]] = {}
    spans: dict[str, list[int]] = {}
    for row in trajectories.iter_rows(named=True):
        sessions.setdefault(row["attempt_id"], []).append(row["trajectory_id"])
        if row["completed"] and row["span"]:
            spans.setdefault(row["attempt_id"], []).append(row["span"])
        if row["completed"] and row["end_version"] is not None:
            versions.setdefault(row["attempt_id"], []).append(
                (row["trajectory_id"], row["end_version"])
            )
    attempts = {
        row["attempt_id"]: Attempt(
            attempt_id=row["attempt_id"],
            start_rollout_id=row["start_rollout_id"],
            retry_count=row["retry_count"],
            completed_at=row["completed_at"],
            fail_kind=row["fail_kind"],
            span_verdict=row["span_verdict"],
            draw=row["draw"],
            async_group_id=row["async_group_id"],
            sessions=tuple(sessions.get(row["attempt_id"], ())),
            spans=tuple(spans.get(row["attempt_id"], ())),
            end_versions=tuple(versions.get(row["attempt_id"], ())),
            incomplete=bool(row.get("incomplete")),
        )
        for row in run.attempts.iter_rows(named=True)
    }
    for row in run.attempts.iter_rows(named=True):
        if row["retry_of"] is not None:
            attempts[row["attempt_id"]].retry_of = attempts.get(row["retry_of"])
    return list(attempts.values())


def kept_groups_by_step(run: RunLog) -> dict[int, set[str]]:
    kept: dict[int, set[str]] = {}
    for step, session in run.kept.select("rollout_id", "trajectory_id").iter_rows():
        kept.setdefault(step, set()).add(session)
    return kept


def step_metrics(run: RunLog) -> dict[int, dict[str, Any]]:
    if not run.metrics.height:
        return {}
    return {int(row["rollout_id"]): row for row in run.metrics.iter_rows(named=True)}


def logged_drops(run: RunLog) -> dict[int, list[int]]:
    """Per call, the group numbers of the log's "dropping stale" lines, in log order."""
    drops: dict[int, list[int]] = {}
    events = run.log_events.filter(pl.col("kind") == "dropped_stale")
    for rollout_id, number in events.select("rollout_id", "number").iter_rows():
        if rollout_id is not None:
            drops.setdefault(rollout_id, []).append(number)
    return drops


def logged_drop_times(run: RunLog) -> dict[int, list[float]]:
    """Per call, the times of the log's "dropping stale" lines, in log order."""
    times: dict[int, list[float]] = {}
    events = run.log_events.filter(pl.col("kind") == "dropped_stale")
    for rollout_id, at in events.select("rollout_id", "at").iter_rows():
        if rollout_id is not None and at is not None:
            times.setdefault(rollout_id, []).append(at)
    return times
