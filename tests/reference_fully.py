"""Slow, obviously-correct reference model of Dressage's fully-async collector, written
from its source: ``generate_rollout_async`` in ``dressage/rollout/fully_async_rollout.py``
with ``StalenessGroupFilter`` / ``StalenessTracker`` of ``dressage/rollout/staleness.py``
(docs/semantics.md §12.4).

Plain lists and dicts, one poll at a time, no timing: it exists only so that
:class:`analysis.engine.run_loop.fully.FullyCollector` (through ``replay_run(loop="fully")``)
can be checked against it (``tests/analysis/test_fully_differential.py``). Its input is
what the worker's output queue receives, already cut into the worker's ticks: ``ticks[i]``
is the list of groups the worker put on the queue in its i-th tick, in queue order; each
rollout call says how many ticks had been queued when it started. How completion times
become ticks is the partial loop's business (``tests.reference_loop``), not this model's.

Per rollout call, as the source does it:

1. a poll takes the whole queue (``worker.get_completed_groups()``);
2. the tracker observes every polled group that has a result (a group whose task raised
   has none; an aborted group has one, whose completed trajectories carry end versions);
3. if a version was new and the call already holds pending groups, they are re-filtered:
   the stale ones are dropped (stage ``pending``);
4. the polled groups go into the call's ``completed_by_id`` dict, and the dict is walked
   in insertion order while the batch is not full: a failed group is returned for retry
   when its retry count is below the retry limit (``retried``), else dropped as exhausted;
   a stale one is dropped on arrival; the others join the batch;
5. while the batch is not full the collector sleeps 10 ms: the worker's next tick is
   queued, and the next poll takes it;
6. when the batch is full, what is left in ``completed_by_id`` is lost with the call
   (``discarded_surplus``): neither put back nor retried.

After the last call, what the worker queued and no call polled is ``leftover``
(``unconsumed_after_final``). A call that finds no tick left returns what it has (the real
loop would wait; the run ended).

Examples
--------
>>> a, b, c = (RefGroup(name, trajectories=[(0, "1")]) for name in "abc")
>>> result = replay_fully_reference([[a, b], [c]], [RefCall(0, 1)], batch_size=1)
>>> {name: d["decision"] for name, d in result.decisions.items()}
{'a': 'kept', 'b': 'discarded_surplus', 'c': 'leftover'}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class RefGroup:
    """One attempt of a group, as the collector receives it."""

    group_id: str
    trajectories: list[tuple[int, str | None]] = field(default_factory=list)
    """(sample position, end version) of its completed trajectories; None: no real version."""
    fail_kind: str | None = None
    """None (the group succeeded), "span" (a span-rejected trajectory) or another kind."""
    retry_count: int = 0
    """``dressage_retry_count`` of its samples."""


@dataclass
class RefCall:
    """One rollout call: its rollout id and how many ticks the worker had queued when its
    first poll ran."""

    rollout_id: int
    ticks_before: int


@dataclass
class FullyReference:
    """Per group id: decision, stage, batch, decided_in, retried, leftover; the tracker's
    versions in order of first observation."""

    decisions: dict[str, dict[str, Any]] = field(default_factory=dict)
    versions: list[str] = field(default_factory=list)


def replay_fully_reference(  # noqa: C901 - one plain loop, as the source reads
    ticks: list[list[RefGroup]],
    calls: list[RefCall],
    *,
    batch_size: int,
    keep_versions: int = 0,
    max_retries: int = 2,
) -> FullyReference:
    """Replay ``generate_rollout_async`` over the worker's ticks, call after call."""
    result = FullyReference()
    versions = result.versions
    batch_number = {call.rollout_id: i for i, call in enumerate(calls)}

    def decide(group: RefGroup, decision: str, rollout_id: int, **facts: Any) -> None:
        result.decisions[group.group_id] = {
            "decision": decision,
            "stage": facts.get("stage"),
            "batch": batch_number[rollout_id] if decision == "kept" else None,
            "decided_in": rollout_id,
            "retried": facts.get("retried"),
            "leftover": facts.get("leftover"),
        }

    def version_infos(group: RefGroup) -> list[str]:
        """``trajectory_version_infos``: one real end version per trajectory, sample order."""
        return [label for _, label in sorted(group.trajectories) if label is not None]

    def observe_group(group: RefGroup) -> bool:
        """``StalenessTracker.observe_group``; off when K = 0 (``config_from_args``)."""
        if keep_versions == 0:
            return False
        before = len(versions)
        for label in version_infos(group):
            if label not in versions:
                versions.append(label)
        return len(versions) != before

    def should_drop(group: RefGroup) -> bool:
        """``StalenessTracker.should_drop_group``."""
        if keep_versions == 0 or not versions:
            return False
        cutoff = max(0, len(versions) - keep_versions)
        return any(versions.index(label) < cutoff for label in version_infos(group))

    def has_result(group: RefGroup) -> bool:
        """A group whose task raised has no result; an aborted one has its samples."""
        return group.fail_kind is None or bool(group.trajectories)

    output_queue: list[RefGroup] = []
    queued_ticks = 0

    def worker_tick() -> bool:
        """The worker queues its next tick; False when it has none left."""
        nonlocal queued_ticks
        if queued_ticks >= len(ticks):
            return False
        output_queue.extend(ticks[queued_ticks])
        queued_ticks += 1
        return True

    for call in calls:
        rollout_id = call.rollout_id
        while queued_ticks < call.ticks_before and worker_tick():
            pass
        completed_by_id: dict[str, RefGroup] = {}
        data: list[RefGroup] = []
        while len(data) < batch_size:
            completed_groups = list(output_queue)  # get_completed_groups: the whole queue
            output_queue.clear()
            advanced = False
            for group in completed_groups:  # observe_completed
                if has_result(group) and observe_group(group):
                    advanced = True
            if advanced and data:  # filter_pending
                kept_pending = []
                for group in data:
                    if should_drop(group):
                        decide(group, "dropped_stale", rollout_id, stage="pending")
                    else:
                        kept_pending.append(group)
                data = kept_pending
            for group in completed_groups:
                completed_by_id[group.group_id] = group
            for group_id in list(completed_by_id):
                if len(data) >= batch_size:
                    break
                group = completed_by_id.pop(group_id)
                if group.fail_kind is not None:
                    decision = "rejected_span" if group.fail_kind == "span" else "failed"
                    decide(group, decision, rollout_id, retried=group.retry_count < max_retries)
                    continue
                if should_drop(group):  # keep_group
                    decide(group, "dropped_stale", rollout_id, stage="arrival")
                    continue
                data.append(group)
            if len(data) < batch_size and not worker_tick():
                break  # the 10 ms sleep: nothing will ever be queued again
        for group in data:
            decide(group, "kept", rollout_id)
        for group in completed_by_id.values():  # the call's local dict, gone on return
            decide(group, "discarded_surplus", rollout_id)
    final = calls[-1].rollout_id if calls else None
    for tick in ticks:
        for group in tick:
            if group.group_id not in result.decisions and final is not None:
                decide(group, "leftover", final, leftover="unconsumed_after_final")
    return result
