"""Rollout calls placed without Dressage's log: for each call, the cuts of the completion
order whose replay gives the step's dump and metrics (docs/semantics.md §12.2)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from analysis.engine.run_loop.checks import step_counts
from analysis.engine.run_loop.collector import (
    Attempt,
    Collector,
    PollTiming,
    completion_order,
)


def infer_call_starts(
    attempts: list[Attempt],
    target_groups: int,
    final_rollout_id: int | None,
    kept_by_step: Mapping[int, set[str]],
    metrics: Mapping[int, Mapping[str, Any]],
    *,
    keep_versions: int,
    max_retries: int,
    timing: PollTiming,
    lookahead: int = 4,
    latest: bool = False,
    unmatched: set[int] | None = None,
) -> tuple[dict[int, float], list[str]]:
    """Rollout call starts without ``dressage_log.txt``.

    A start matters only through which completions the call's first poll takes. For each
    step, every cut of the completion order from the previous call's end to a few
    completions past the last attempt the step's dump holds is replayed; cuts whose kept
    sessions equal the dump and whose counts equal the metrics row are kept, the earliest
    wins (the latest with ``latest``: the replay tries both to see which decisions depend
    on it), and a note says when matching cuts decide differently. Calls that no cut
    reproduces are added to ``unmatched``.
    """
    collector = Collector(
        completion_order(attempts, timing, {}),
        keep_versions=keep_versions,
        max_retries=max_retries,
        timing=timing,
    )
    starts: dict[int, float] = {}
    notes: list[str] = []
    for rollout_id in sorted(set(kept_by_step) | set(metrics)):
        final = rollout_id == final_rollout_id
        matches: list[tuple[float, Collector, tuple[Any, ...]]] = []
        for start in _candidate_starts(collector, kept_by_step.get(rollout_id), lookahead):
            trial = collector.clone()
            before = set(trial.decisions)
            kept = trial.run_call(rollout_id, start, target_groups, final=final)
            if _matches_step(
                trial, rollout_id, kept, kept_by_step.get(rollout_id), metrics.get(rollout_id)
            ):
                decided = tuple(
                    sorted(
                        (key, d.decision, d.stage or "")
                        for key, d in trial.decisions.items()
                        if key not in before
                    )
                )
                matches.append((start, trial, decided))
        if not matches:
            notes.append(
                f"call {rollout_id}: no start reproduces the recorded step; took the earliest"
            )
            if unmatched is not None:
                unmatched.add(rollout_id)
            start = collector.last_fetch + 1e-6
            collector.run_call(rollout_id, start, target_groups, final=final)
        else:
            if len({m[2] for m in matches}) > 1:
                notes.append(
                    f"call {rollout_id}: {len({m[2] for m in matches})} different replays match "
                    "the recorded step; took the earliest start"
                )
            start, collector, _ = matches[-1 if latest else 0]
        starts[rollout_id] = start
        if final:
            break
    return starts, notes


def _candidate_starts(collector: Collector, wanted: set[str] | None, lookahead: int) -> list[float]:
    """One start time per cut of the completion order a call may begin at."""
    order, first = collector.order, collector.delivered
    last_needed = first
    if wanted:
        for j in range(first, len(order)):
            if wanted.intersection(order[j].sessions):
                last_needed = j + 1
    starts = []
    for j in range(first, min(len(order), last_needed + lookahead) + 1):
        if j == first:
            if collector.last_fetch > float("-inf"):
                starts.append(collector.last_fetch + 1e-6)
            else:
                starts.append(order[j].completed_at - 1e-3 if j < len(order) else 0.0)
        elif j < len(order):
            starts.append((order[j - 1].completed_at + order[j].completed_at) / 2)
        else:
            starts.append(order[j - 1].completed_at + 1e-3)
    return starts


def _matches_step(
    trial: Collector,
    rollout_id: int,
    kept: list[Attempt],
    wanted: set[str] | None,
    metrics: Mapping[str, Any] | None,
) -> bool:
    if wanted is not None and {s for a in kept for s in a.sessions} != wanted:
        return False
    if metrics is None:
        return True
    return all(
        metrics.get(name) is None or value is None or float(metrics[name]) == value
        for name, value in step_counts(trial, rollout_id).items()
    )
