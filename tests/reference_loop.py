"""Slow, obviously-correct reference model of the run loop, transcribed from
docs/semantics.md §12.2 (rollout calls and polls) and §12.3 (what is reported).

Plain lists and dicts, one poll at a time, no polars: it exists only so that
``analysis.engine.run_loop.replay.replay_run`` can be checked against it (see
``tests/analysis/test_loop_differential.py``). Its input is already reduced to what §12.2
uses: per attempt its completion time, its submission rank (known async group id, else
draw ordinal), its failure kind, its retry count and the end versions of its completed
trajectories with their sample positions; per rollout call its id and start time.

Where a rule could be read two ways, the reading of the sentence in §12.2 is taken:

- "completions less than 10 ms apart share a poll": two completions closer than 10 ms are
  always in the same poll, so a chain of such completions is one poll (the tick), however
  long the chain;
- "near-simultaneous completions are ordered by submission": the completions of one tick
  are ordered by submission rank;
- "the first poll at the call's start fetches ... every attempt that completed since":
  every attempt not fetched yet whose completion time is at or before the call's start.

Examples
--------
>>> attempts = [
...     RefAttempt("a", completed_at=1.0, submission=0, trajectories=[(0, "7")]),
...     RefAttempt("b", completed_at=2.0, submission=1, trajectories=[(0, "8")]),
... ]
>>> calls = [RefCall(0, 0.5), RefCall(1, 3.0)]
>>> result = replay_loop_reference(attempts, calls, batch_size=1, keep_versions=1)
>>> [(d["decision"], d["decided_in"]) for d in result.decisions.values()]
[('kept', 0), ('kept', 1)]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SAME_POLL_S = 0.010
"""Completions closer than this share a poll (Dressage's 10 ms loops)."""
MAX_RETRIES = 2
"""``DRESSAGE_ROLLOUT_MAX_RETRIES``: a failed attempt is retried while its retry count is below."""


@dataclass
class RefAttempt:
    """One attempt, as §12.1 reads it."""

    attempt_id: str
    completed_at: float
    submission: int
    """Rank in submission order (known async group id, else draw ordinal)."""
    trajectories: list[tuple[int, str | None]]
    """(sample position, end version) of its *completed* trajectories, in any order."""
    fail_kind: str | None = None
    """None (succeeded), "span" (a span-rejected trajectory) or another failure kind."""
    retry_count: int = 0


@dataclass
class RefCall:
    """One rollout call: its rollout id and the time it started."""

    rollout_id: int
    start: float


@dataclass
class LoopReference:
    """Per attempt id: decision, stage, batch, decided_in, retried, leftover."""

    decisions: dict[str, dict[str, Any]] = field(default_factory=dict)
    versions: list[str] = field(default_factory=list)


def end_versions_in_sample_order(attempt: RefAttempt) -> list[str]:
    """The end versions the tracker observes, in sample order, missing ones left out."""
    labels = []
    for _, label in sorted(attempt.trajectories, key=lambda pair: pair[0]):
        if label is not None:
            labels.append(label)
    return labels


def completion_ticks(attempts: list[RefAttempt]) -> list[list[RefAttempt]]:
    """The attempts in time order, cut into ticks: completions closer than 10 ms to the
    previous one are in its tick. Each tick is ordered by submission."""
    by_time = sorted(attempts, key=lambda a: a.completed_at)
    ticks: list[list[RefAttempt]] = []
    previous = None
    for attempt in by_time:
        if previous is not None and attempt.completed_at - previous.completed_at < SAME_POLL_S:
            ticks[-1].append(attempt)
        else:
            ticks.append([attempt])
        previous = attempt
    return [sorted(tick, key=lambda a: a.submission) for tick in ticks]


def replay_loop_reference(  # noqa: C901 - one plain loop, as §12.2 reads
    attempts: list[RefAttempt],
    calls: list[RefCall],
    *,
    batch_size: int,
    keep_versions: int,
    final_rollout_id: int | None = None,
) -> LoopReference:
    """Replay the run loop of §12.2; ``final_rollout_id`` defaults to the last call."""
    calls = sorted(calls, key=lambda c: c.rollout_id)
    if final_rollout_id is None and calls:
        final_rollout_id = calls[-1].rollout_id
    batch_number = {call.rollout_id: i for i, call in enumerate(calls)}
    ticks = completion_ticks(attempts)
    labels_of = {a.attempt_id: end_versions_in_sample_order(a) for a in attempts}

    result = LoopReference()
    versions = result.versions  # the tracker: labels in order of first observation
    fetched_ever: set[str] = set()

    def decide(attempt: RefAttempt, decision: str, rollout_id: int | None, **facts: Any) -> None:
        result.decisions[attempt.attempt_id] = {
            "decision": decision,
            "stage": facts.get("stage"),
            "batch": batch_number[rollout_id]
            if decision == "kept" and rollout_id is not None
            else None,
            "decided_in": rollout_id,
            "retried": facts.get("retried"),
            "leftover": facts.get("leftover"),
        }

    def observe(attempt: RefAttempt) -> bool:
        """Append its new labels; whether it added one. K = 0: the tracker is off."""
        if keep_versions == 0:
            return False
        added = False
        for label in labels_of[attempt.attempt_id]:
            if label not in versions:
                versions.append(label)
                added = True
        return added

    def is_stale(attempt: RefAttempt) -> bool:
        if keep_versions == 0 or not versions:
            return False
        cutoff = max(0, len(versions) - keep_versions)
        return any(versions.index(label) < cutoff for label in labels_of[attempt.attempt_id])

    def backlog(start: float) -> list[RefAttempt]:
        """Every attempt not fetched yet that completed by ``start``, in completion order."""
        found = []
        for tick in ticks:
            for attempt in tick:
                if attempt.attempt_id not in fetched_ever and attempt.completed_at <= start:
                    found.append(attempt)
        return found

    def next_tick() -> list[RefAttempt] | None:
        """The not yet fetched attempts of the earliest tick that still has some."""
        for tick in ticks:
            rest = [a for a in tick if a.attempt_id not in fetched_ever]
            if rest:
                return rest
        return None

    put_back: list[RefAttempt] = []
    for call in calls:
        rollout_id = call.rollout_id
        final = rollout_id == final_rollout_id
        batch: list[RefAttempt] = []
        fetched: list[RefAttempt] = []
        first_poll = True
        while len(batch) < batch_size:
            if first_poll:
                poll = put_back + backlog(call.start)
                put_back = []
                first_poll = False
            else:
                tick = next_tick()
                if tick is None:
                    break  # nothing more ever completes: the call returns what it has
                poll = tick
            for attempt in poll:
                fetched_ever.add(attempt.attempt_id)
            # 1. observe the whole poll first
            added = False
            for attempt in poll:
                if observe(attempt):
                    added = True
            # 2. pending drop, once per poll
            if added and batch:
                still = []
                for attempt in batch:
                    if is_stale(attempt):
                        decide(attempt, "dropped_stale", rollout_id, stage="pending")
                    else:
                        still.append(attempt)
                batch = still
            # 3. decide in order until the batch holds B
            fetched.extend(poll)
            while fetched and len(batch) < batch_size:
                attempt = fetched.pop(0)
                if attempt.fail_kind is not None:
                    decision = "rejected_span" if attempt.fail_kind == "span" else "failed"
                    decide(attempt, decision, rollout_id, retried=attempt.retry_count < MAX_RETRIES)
                elif is_stale(attempt):
                    decide(attempt, "dropped_stale", rollout_id, stage="arrival")
                else:
                    batch.append(attempt)
        for attempt in batch:
            decide(attempt, "kept", rollout_id)
        if final:
            for attempt in fetched:
                decide(attempt, "leftover", rollout_id, leftover="unconsumed_after_final")
            break
        put_back = fetched  # 4. surplus back at the front of the queue
    for attempt in attempts:
        if attempt.attempt_id not in result.decisions:
            decide(attempt, "leftover", final_rollout_id, leftover="drained")
    return result
