"""Dressage's collector loop, poll by poll (docs/semantics.md §12): the attempts of a run in
the order they reach the queue, the version tracker, and the collector that takes them in
rollout calls; :mod:`analysis.engine.run_loop.replay` runs it over a run."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Self

from analysis.engine.decisions import Decision, Stage


@dataclass(frozen=True)
class PollTiming:
    """Timing of Dressage's 10 ms loops, in seconds (decisions do not depend on the exact
    values in the real runs; kept as settings for sensitivity studies)."""

    same_poll_s: float = 0.010
    """Completions closer than this were handed over in one worker tick: one poll."""
    tick_tie_s: float = 0.010
    """Completions closer than this are ordered by submission, as the worker puts them."""
    queue_delay_s: float = 0.0
    """Assumed delay from a group's last trajectory end to the worker's output queue."""
    order_uncertainty_s: float = 0.025
    """Completions closer than this in the files may have reached the queue in either
    order: a group is queued at the first worker tick after its task is done, some
    3-25 ms after its last trajectory's recorded end (§12.2)."""
    stall_s: float = 0.2
    """A worker tick held up (the worker shares the process) queues every group done
    meanwhile at once, in submission order: a group submitted earlier may reach the queue
    before one whose files say it completed up to this much earlier."""
    late_s: float = 0.8
    """A group's own task may end late (the busy event loop delays its reward and writes):
    it may reach the queue up to this much after its recorded end, whatever the submission
    order, after a call's start too (a late move, §12.2; lags up to 714 ms were measured in
    compressed-timing runs). Searched only where nothing likelier reproduces a step."""


@dataclass(slots=True, eq=False)
class Attempt:
    attempt_id: str
    start_rollout_id: int | None
    retry_count: int
    completed_at: float
    fail_kind: str | None
    span_verdict: bool
    draw: int | None
    async_group_id: int | None
    sessions: tuple[str, ...]
    spans: tuple[int, ...]
    """Version spans of its completed trajectories (what ``staleness/version_span_*`` count)."""
    end_versions: tuple[tuple[str, str], ...]
    """(trajectory, end version) of its completed trajectories in sample order: what
    Dressage's tracker reads (failed trajectories are placeholders without versions)."""
    retry_of: Attempt | None = None
    incomplete: bool = False
    """Short of trajectories without traj_err/: failed, of a kind and at a time unknown."""


@dataclass(slots=True)
class AttemptDecision:
    decision: Decision
    rollout_id: int | None
    stage: Stage | None = None
    retried: bool | None = None
    gaps: dict[str, int | None] = field(default_factory=dict)
    leftover: str | None = None
    polled: tuple[float, bool] | None = None
    """When the poll that decided it was at the earliest (the call's start, or its last
    completion's recorded end), and whether it was the call's first poll."""


class Tracker:
    """Dressage's version tracker: labels in order of first observation, off when K = 0."""

    def __init__(self, keep_versions: int, versions: Iterable[str] = ()) -> None:
        self.keep_versions = keep_versions
        self.versions: list[str] = list(versions)
        self.index: dict[str, int] = {label: i for i, label in enumerate(self.versions)}

    def observe(self, attempt: Attempt) -> list[str]:
        if not self.keep_versions:
            return []
        new = []
        for _, label in attempt.end_versions:
            if label not in self.index:
                self.index[label] = len(self.versions)
                self.versions.append(label)
                new.append(label)
        return new

    @property
    def current(self) -> int | None:
        return len(self.versions) - 1 if self.versions else None

    def is_stale(self, attempt: Attempt) -> bool:
        if not self.keep_versions or not self.versions:
            return False
        cutoff = max(0, len(self.versions) - self.keep_versions)
        return any(self.index[label] < cutoff for _, label in attempt.end_versions)

    def gaps(self, attempt: Attempt) -> dict[str, int | None]:
        current = self.current
        return {
            session: None
            if current is None or label not in self.index
            else current - self.index[label]
            for session, label in attempt.end_versions
        }


def known_submitted_before(a: Attempt, b: Attempt) -> bool | None:
    """Whether the worker submitted ``a`` before ``b``, when the files tell (async group
    ids, or two fresh draws); None when they do not."""
    if a.async_group_id is not None and b.async_group_id is not None:
        return a.async_group_id < b.async_group_id
    if a.retry_of is None and b.retry_of is None and a.draw is not None and b.draw is not None:
        return a.draw < b.draw
    return None


def _retries(later: Attempt, earlier: Attempt) -> bool:
    attempt = later.retry_of
    while attempt is not None:
        if attempt is earlier:
            return True
        attempt = attempt.retry_of
    return False


def may_precede(
    later: Attempt, earlier: Attempt, timing: PollTiming, *, unknown_order: bool = True
) -> bool:
    """Whether ``later`` (after ``earlier`` in the queue order) may have reached the queue
    first: their completions are closer than the files can order (different ticks), or a
    held-up tick queued both and ``later`` was not known to be submitted after it (with
    ``unknown_order`` False: known to be submitted before it)."""
    if _retries(later, earlier):
        return False
    gap = later.completed_at - earlier.completed_at
    if gap < timing.order_uncertainty_s:
        return True
    known = known_submitted_before(later, earlier)
    return gap < timing.stall_s and (known is True or (unknown_order and known is None))


def late_targets(
    collector: Collector, position: int, start: float | None, reach: int
) -> list[tuple[int, float, bool]]:
    """Where the undelivered attempt at ``position`` may have reached the queue had its
    task ended late (``timing.late_s`` after its recorded end, whatever the submission
    order; once per attempt): (``after``, ``at``, ``join``) of :meth:`Collector.move_late`,
    right after a later completion up to ``reach`` (joining its poll, or in a poll of its
    own where that poll ends), and, when it completed by the call's ``start``, after the
    others queued by then, in the first poll after it."""
    order, timing = collector.order, collector.timing
    moved = order[position]
    if moved.attempt_id in collector.late:
        return []
    found = []
    queued = position  # the last of the completions queued by the start
    for q in range(position + 1, min(reach, len(order) - 1) + 1):
        other = order[q]
        if other.completed_at - moved.completed_at >= timing.late_s or _retries(other, moved):
            break
        at = max(collector.late.get(other.attempt_id, other.completed_at), moved.completed_at)
        if start is not None and at <= start:
            queued = q
        found.append((q, at, True))
        if (
            q + 1 == len(order)
            or collector.poll[order[q + 1].attempt_id] != collector.poll[other.attempt_id]
        ):
            found.append((q, at, False))
    if start is not None and moved.completed_at <= start < moved.completed_at + timing.late_s:
        found.append((queued, start + 1e-6, False))
    return found


@dataclass(frozen=True)
class QueueOrder:
    """The worker's output queue as the files give it: the most likely ``order``, and the
    runs of it (``ambiguous``, positions ``[start, end)``) within which the files cannot
    order the completions (:func:`may_precede`)."""

    order: list[Attempt]
    ambiguous: tuple[tuple[int, int], ...]


def queue_order(attempts: list[Attempt], timing: PollTiming) -> QueueOrder:
    """:func:`completion_order` and its ambiguous runs; for either loop's collector."""
    order = completion_order(attempts, timing)
    runs: list[tuple[int, int]] = []
    for i, earlier in enumerate(order):
        end = i + 1
        for j in range(i + 1, len(order)):
            if order[j].completed_at - earlier.completed_at >= timing.stall_s:
                break
            if may_precede(order[j], earlier, timing):
                end = j + 1
        if end > i + 1:
            if runs and i < runs[-1][1]:
                runs[-1] = (runs[-1][0], max(runs[-1][1], end))
            else:
                runs.append((i, end))
    return QueueOrder(order, tuple(runs))


def completion_order(attempts: list[Attempt], timing: PollTiming) -> list[Attempt]:
    """Most likely order in which attempts reach the worker's output queue: by completion
    time, and by submission among completions closer than one worker tick when the files
    tell the submission order (:func:`known_submitted_before`)."""
    by_time = sorted(attempts, key=lambda a: a.completed_at)

    def compare(x: Attempt, y: Attempt) -> int:
        known = known_submitted_before(x, y)
        if known is None:
            return (x.completed_at > y.completed_at) - (x.completed_at < y.completed_at)
        return -1 if known else 1

    ordered: list[Attempt] = []
    i = 0
    while i < len(by_time):
        j = i + 1
        while (
            j < len(by_time)
            and by_time[j].completed_at - by_time[j - 1].completed_at < timing.tick_tie_s
        ):
            j += 1
        ordered += sorted(by_time[i:j], key=functools.cmp_to_key(compare))
        i = j
    return ordered


def _chains(attempts: list[Attempt], gap: float) -> dict[str, int]:
    """Each attempt's chain: completions less than ``gap`` apart, chained, share one."""
    chains: dict[str, int] = {}
    previous: float | None = None
    chain = -1
    for attempt in sorted(attempts, key=lambda a: a.completed_at):
        if previous is None or attempt.completed_at - previous >= gap:
            chain += 1
        chains[attempt.attempt_id] = chain
        previous = attempt.completed_at
    return chains


FRESH_POLLS = itertools.count(-1, -1)
"""Ids of polls a hypothesis splits off (the chains' ids are >= 0)."""


class Collector:
    """The collector's state between rollout calls: the persistent tracker, the worker's
    output queue and how far completions have been delivered."""

    def __init__(
        self,
        order: list[Attempt],
        *,
        keep_versions: int,
        max_retries: int,
        timing: PollTiming,
        chains: tuple[dict[str, int], dict[str, int]] | None = None,
        by_id: dict[str, Attempt] | None = None,
    ) -> None:
        self.order = order
        self.attempts = {a.attempt_id: a for a in order} if by_id is None else by_id
        self.keep_versions, self.max_retries, self.timing = keep_versions, max_retries, timing
        self.tracker = Tracker(keep_versions)
        self.queue: list[Attempt] = []  # put-back leftovers first
        self.delivered = 0  # attempts of ``order`` already on the queue
        self.last_fetch = float("-inf")
        if chains is None:
            chains = _chains(order, timing.tick_tie_s), _chains(order, timing.same_poll_s)
        self.tie = chains[0]
        self.poll = dict(chains[1])  # an attempt moved ahead joins the poll it passes
        self.late: dict[str, float] = {}  # attempt id -> queued not before (a late move)
        self.polled: tuple[float, bool] | None = None  # the poll deciding now (AttemptDecision)
        self.decisions: dict[str, AttemptDecision] = {}
        self.new_versions: dict[str, tuple[str, ...]] = {}
        self.current_after: dict[int, int | None] = {}

    def clone(self) -> Self:
        """A copy to try a call on (a subclass, a loop variant, copies as itself)."""
        copy = type(self)(
            list(self.order),  # a copy: delivery may move an attempt within its tie
            keep_versions=self.keep_versions,
            max_retries=self.max_retries,
            timing=self.timing,
            chains=(self.tie, self.poll),
            by_id=self.attempts,
        )
        copy.tracker = Tracker(self.keep_versions, self.tracker.versions)
        copy.queue, copy.delivered, copy.last_fetch = (
            list(self.queue),
            self.delivered,
            self.last_fetch,
        )
        copy.decisions, copy.current_after = dict(self.decisions), dict(self.current_after)
        copy.new_versions, copy.late = dict(self.new_versions), dict(self.late)
        return copy

    def move_ahead(self, position: int) -> None:
        """Swap the undelivered attempts at ``position`` and ``position + 1``: the later
        one reached the queue first, in the poll of the one it passes."""
        earlier, later = self.order[position], self.order[position + 1]
        self.order[position], self.order[position + 1] = later, earlier
        self.poll[later.attempt_id] = self.poll[earlier.attempt_id]

    def move_late(self, position: int, after: int, at: float, *, join: bool = False) -> None:
        """The undelivered attempt at ``position`` reached the queue late: right after the
        one at ``after``, not before ``at``, in a poll of its own (``join``: in that one's)."""
        attempt = self.order.pop(position)
        self.order.insert(after, attempt)
        self.late[attempt.attempt_id] = at
        fresh = self.poll[self.order[after - 1].attempt_id] if join else next(FRESH_POLLS)
        self.poll[attempt.attempt_id] = fresh

    def toggle_poll(self, position: int) -> None:
        """Move the poll boundary between the undelivered attempts at ``position`` and
        ``position + 1``: split one poll there (the rest of it a poll of its own), or
        join the second to the first's poll (they shared a tick, or a poll took two)."""
        first, second = self.order[position], self.order[position + 1]
        if self.poll[first.attempt_id] != self.poll[second.attempt_id]:
            self.poll[second.attempt_id] = self.poll[first.attempt_id]
            return
        fresh, old = next(FRESH_POLLS), self.poll[first.attempt_id]
        for attempt in self.order[position + 1 :]:
            if self.poll[attempt.attempt_id] != old:
                break
            self.poll[attempt.attempt_id] = fresh

    def poll_breaks(self, start: int, end: int) -> tuple[bool, ...]:
        """Whether each attempt of ``order[start:end]`` after the first begins a poll."""
        ids = [self.poll[a.attempt_id] for a in self.order[start:end]]
        return tuple(a != b for a, b in itertools.pairwise(ids))

    def state_key(self, window: int = 16) -> tuple[Any, ...]:
        """What the rest of the replay depends on: two hypotheses with one key decide the
        remaining calls alike. Hypotheses differ only near the next completion (the rest
        of the order is the files'), so ``window`` completions from it are compared."""
        end = self.delivered + window
        return (
            self.delivered,
            tuple(a.attempt_id for a in self.queue),
            tuple(a.attempt_id for a in self.order[self.delivered : end]),
            self.poll_breaks(self.delivered, end),
            tuple(self.late.get(a.attempt_id) for a in self.order[self.delivered : end]),
            tuple(self.tracker.versions),
        )

    def _deliver(self, upto: float) -> None:
        """The first poll of a call: queue everything completed by ``upto``, in queue
        order; one submitted earlier but completed after ``upto`` (a near-tie ordered by
        submission) waits for a later poll without holding back the others."""
        while self.delivered < len(self.order):
            if self._ready(self.order[self.delivered], upto):
                self._queue_next()
                continue
            later = self._ready_in_tie(upto)
            if later is None:
                return
            self.order.insert(self.delivered, self.order.pop(later))

    def _ready(self, attempt: Attempt, upto: float) -> bool:
        queued = self.late.get(attempt.attempt_id, attempt.completed_at)
        return queued + self.timing.queue_delay_s <= upto

    def _ready_in_tie(self, upto: float) -> int | None:
        """The position of an attempt of the next one's tie that completed by ``upto``."""
        tie = self.tie[self.order[self.delivered].attempt_id]
        for position in range(self.delivered + 1, len(self.order)):
            attempt = self.order[position]
            if self.tie[attempt.attempt_id] != tie:
                return None
            if self._ready(attempt, upto):
                return position
        return None

    def _deliver_next_poll(self) -> bool:
        """A later poll: the next completion, with every completion less than one worker
        tick from another of the poll (they share a tick; §12.2)."""
        if self.delivered >= len(self.order):
            return False
        poll = self.poll[self.order[self.delivered].attempt_id]
        self._queue_next()
        while (
            self.delivered < len(self.order)
            and self.poll[self.order[self.delivered].attempt_id] == poll
        ):
            self._queue_next()
        return True

    def _queue_next(self) -> None:
        attempt = self.order[self.delivered]
        self.queue.append(attempt)
        self.last_fetch = attempt.completed_at
        self.delivered += 1

    def _observe(
        self, chunk: list[Attempt], pending: list[Attempt], rollout_id: int
    ) -> list[Attempt]:
        """Observe a whole poll, then drop the pending groups it made stale (once)."""
        advanced = False
        for attempt in chunk:
            new = self.tracker.observe(attempt)
            self.new_versions.setdefault(attempt.attempt_id, tuple(new))
            advanced = advanced or bool(new)
        if not (advanced and pending):
            return pending
        still = []
        for attempt in pending:
            if self.tracker.is_stale(attempt):
                self._decide(attempt, Decision.DROPPED_STALE, rollout_id, stage=Stage.PENDING)
            else:
                still.append(attempt)
        return still

    def _decide(
        self, attempt: Attempt, decision: Decision, rollout_id: int | None, **facts: Any
    ) -> None:
        self.decisions[attempt.attempt_id] = AttemptDecision(
            decision, rollout_id, gaps=self.tracker.gaps(attempt), polled=self.polled, **facts
        )

    def _take(self, attempt: Attempt, pending: list[Attempt], rollout_id: int) -> None:
        """Decide one fetched attempt, as the collector does in insertion order."""
        if attempt.fail_kind is not None:
            decision = Decision.REJECTED_SPAN if attempt.fail_kind == "span" else Decision.FAILED
            self._decide(
                attempt, decision, rollout_id, retried=attempt.retry_count < self.max_retries
            )
        elif self.tracker.is_stale(attempt):
            self._decide(attempt, Decision.DROPPED_STALE, rollout_id, stage=Stage.ARRIVAL)
        else:
            pending.append(attempt)

    def run_call(
        self, rollout_id: int, start: float, target_groups: int, *, final: bool
    ) -> list[Attempt]:
        """One rollout call; returns the attempts it keeps (its batch)."""
        pending: list[Attempt] = []
        fetched: list[Attempt] = []  # the collector's completed-by-id dict, in order
        first = True
        while len(pending) < target_groups:
            if first:
                self._deliver(start)
                self.polled, first = (start, True), False
            elif not self.queue and not self._deliver_next_poll():
                break  # nothing more will ever complete
            else:
                self.polled = (
                    max(self.late.get(a.attempt_id, a.completed_at) for a in self.queue),
                    False,
                )
            chunk, self.queue = self.queue, []
            pending = self._observe(chunk, pending, rollout_id)
            fetched += chunk
            while fetched and len(pending) < target_groups:
                self._take(fetched.pop(0), pending, rollout_id)
        for attempt in pending:  # gaps as Dressage's metrics: after the call's last poll
            self._decide(attempt, Decision.KEPT, rollout_id)
        self._unneeded(fetched, rollout_id, final=final)
        self.current_after[rollout_id] = self.tracker.current
        return pending

    def _unneeded(self, fetched: list[Attempt], rollout_id: int, *, final: bool) -> None:
        """What the call polled and did not need: the partial loop puts it back on the
        worker's queue for the next call (after the final call it stays unconsumed)."""
        if final:
            for attempt in fetched:
                self._decide(
                    attempt, Decision.LEFTOVER, rollout_id, leftover="unconsumed_after_final"
                )
        else:
            self.queue = fetched + self.queue  # put back for the next call

    def finish(self, final_rollout_id: int | None) -> None:
        """Everything never decided was still queued or running at the final drain."""
        for attempt in self.order:
            if attempt.attempt_id not in self.decisions:
                self._decide(attempt, Decision.LEFTOVER, final_rollout_id, leftover="drained")
