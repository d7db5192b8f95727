"""Dressage's rollout loop simulated forward at any setting, on a run's fitted model
(:mod:`analysis.simulation.run_model`; docs/semantics.md §12.8).

What runs here is Dressage's loop as the replay reads it (§12.2, §12.4), with the events
the files do not hold generated instead of read:

- the **worker** keeps ``max_active_groups`` attempts generating, a retry first, else the
  next draw; each trajectory generates its turns at the fitted time per token, stops while
  the weights are updated, and its tokens take the version current when generated;
- the **proxy** rejects a trajectory at the end of a turn whose versions so far number
  more than M + 1 (§4);
- the **collector** polls every 10 ms from a call's start, observes everything fetched,
  drops stale groups (pending, then on arrival), retries failed ones below the retry
  limit, and returns at B groups; the partial loop puts back what it did not need, the
  fully loop throws it away;
- the **trainer** trains step r while call r + 1 runs, then updates the weights (the
  proxy paused), and call r + 2 starts.

Time runs on two clocks: real time, and generation time, which stands still while the
weights are updated; a turn's end is an event on the generation clock, so an update
decided later moves it without changing the order of events.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import random
import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Literal

from analysis.simulation.run_model import POLL_S, RunModel, TrajectoryWork

Outcome = Literal[
    "kept", "dropped_stale", "rejected_span", "failed", "leftover", "discarded_surplus"
]


@dataclass
class SimTrajectory:
    work: TrajectoryWork
    versions: list[int] = field(default_factory=list)
    """Distinct versions of its response tokens so far, in order."""
    end_version: int | None = None
    failed: str | None = None
    """``span`` or the work's failure kind, once it failed."""
    turn_start: float = 0.0
    """Generation time at which its current turn started."""
    generated: int = 0
    """Response tokens generated so far (its finished turns)."""
    gap: int | None = None
    """Kept: its version gap when its call returned (None at K = 0)."""
    turn_runs: list[list[tuple[int, int]]] = field(default_factory=list)
    """Per turn generated: (version, response tokens) runs, in order (for its records)."""
    finished_at: float | None = None
    """Real time at which it finished or failed (None: still generating at the end)."""


@dataclass
class SimAttempt:
    draw: int
    retry: int
    order: int
    trajectories: list[SimTrajectory]
    modelled: bool
    submitted: float = 0.0
    running: int = 0
    done_at: float | None = None
    outcome: Outcome | None = None
    stage: str | None = None
    call: int | None = None
    """The call that decided it (kept, dropped, failed, thrown away)."""
    start_call: int = 0
    """The call running when the worker submitted it (its ``dressage_start_rollout_id``)."""

    @property
    def failed(self) -> bool:
        return any(t.failed for t in self.trajectories)

    @property
    def span_rejected(self) -> bool:
        return any(t.failed == "span" for t in self.trajectories)


@dataclass
class SimRun:
    """One simulated run: every attempt with its outcome, and per call its kept gap."""

    attempts: list[SimAttempt]
    calls: int
    kept_gaps: list[int]
    """The version gap of every kept trajectory (None-free; empty at K = 0)."""
    call_returns: list[float]
    call_index: list[int]
    """The tracker's current version index when each call returned (-1: none yet)."""
    keep_versions: int


class _Clock:
    """Real time and generation time (which stops during weight updates)."""

    def __init__(self) -> None:
        self.pauses: list[tuple[float, float]] = []  # (real start, real end), in order
        self.frozen_at: list[float] = []  # generation time of each pause

    def gen(self, t: float) -> float:
        paused = 0.0
        for start, end in self.pauses:
            if t <= start:
                break
            paused += min(t, end) - start
        return t - paused

    def real(self, g: float) -> float:
        t = g
        for (start, end), frozen in zip(self.pauses, self.frozen_at, strict=True):
            if g > frozen:
                t += end - start
            else:
                break
        return t

    def version(self, g: float) -> int:
        """The version generating just before generation time ``g`` (labels 1, 2, ...)."""
        return 1 + bisect.bisect_left(self.frozen_at, g)

    def pause(self, start: float, length: float) -> None:
        self.frozen_at.append(self.gen(start))
        self.pauses.append((start, start + length))


class _Sim:
    def __init__(self, model: RunModel, keep_versions: int, max_preempts: int | None,
                 seed: int) -> None:  # fmt: skip
        self.model = model
        self.k = keep_versions
        self.m = max_preempts
        self.rng = random.Random(seed)
        self.clock = _Clock()
        self.events: list[tuple[float, int, SimAttempt, SimTrajectory, int]] = []
        self.seq = itertools.count()
        self.attempts: list[SimAttempt] = []
        self.active = 0
        self.retries: deque[tuple[int, int]] = deque()
        self.next_draw = 0
        self.queue: list[SimAttempt] = []  # completed, in completion order
        self.stopped = False
        self.tracker: list[int] = []
        self.kept_gaps: list[int] = []
        self.call_index: list[int] = []
        self.current_call = 0
        kinds = sorted(model.fail_rates)
        self.fail_kinds = kinds
        self.fail_weights = [model.fail_rates[k] for k in kinds]
        self.fail_total = sum(self.fail_weights)

    # -- the worker ---------------------------------------------------------------
    def _drawn(self, at_least: int = 0) -> TrajectoryWork:
        pool, weights = self.model.turn_pool, self.model.pool_weights
        if at_least:
            turns = self._longer(at_least)
        else:
            turns = self.rng.choices(pool, cum_weights=weights)[0]
        kind = None
        if self.fail_total and self.rng.random() < self.fail_total:
            kind = self.rng.choices(self.fail_kinds, self.fail_weights)[0]
        return TrajectoryWork(turns, kind, self.rng.randrange(len(turns)), known=False)

    def _longer(self, at_least: int) -> tuple[int, ...]:
        """A pool trajectory of at least ``at_least`` tokens (by the pool's weights); the
        longest, its last turn stretched, when none is that long."""
        pool, weights = self.model.turn_pool, self.model.pool_weights
        chosen = [
            (turns, weight - (weights[i - 1] if i else 0.0))
            for i, (turns, weight) in enumerate(zip(pool, weights, strict=True))
            if sum(turns) >= at_least
        ]
        if chosen:
            return self.rng.choices([t for t, _ in chosen], [w for _, w in chosen])[0]
        longest = max(pool, key=sum)
        return (*longest[:-1], longest[-1] + at_least - sum(longest) + 1)

    def _work(self, draw: int, retry: int) -> tuple[list[TrajectoryWork], bool]:
        known = self.model.workload.get((draw, retry))
        size = self.model.samples_per_prompt
        works, modelled = [], known is None
        for i in range(size):
            item = known[i] if known is not None and i < len(known) else None
            if item is not None and item.known:
                works.append(item)
            elif item is not None and item.fail_kind:  # the run's failure, drawn turns
                drawn = self._drawn()
                works.append(
                    TrajectoryWork(
                        drawn.turns,
                        item.fail_kind,
                        self.rng.randrange(len(drawn.turns)),
                        known=False,
                    )
                )
            else:
                works.append(self._drawn(item.min_tokens if item is not None else 0))
                modelled = True
        return works, modelled

    def _fill(self, now: float) -> None:
        while not self.stopped and self.active < self.model.max_active_groups:
            if self.retries:
                draw, retry = self.retries.popleft()
            else:
                draw, retry = self.next_draw, 0
                self.next_draw += 1
            works, modelled = self._work(draw, retry)
            attempt = SimAttempt(draw, retry, len(self.attempts),
                                 [SimTrajectory(w) for w in works], modelled, now,
                                 start_call=self.current_call)  # fmt: skip
            self.attempts.append(attempt)
            self.active += 1
            g = self.clock.gen(now)
            for trajectory in attempt.trajectories:
                attempt.running += 1
                self._next_turn(attempt, trajectory, g, 0)

    def _next_turn(self, attempt: SimAttempt, trajectory: SimTrajectory, g: float,
                   turn: int) -> None:  # fmt: skip
        work = trajectory.work
        if work.fail_kind == "backend_timeout" and turn == work.fail_turn:
            end = g + 10 * self.model.token_time
            heapq.heappush(self.events, (end, next(self.seq), attempt, trajectory, -1))
            return
        length = work.turns[turn] * self.model.token_time
        heapq.heappush(self.events, (g + length, next(self.seq), attempt, trajectory, turn))
        trajectory.turn_start = g

    def _turn_end(self, attempt: SimAttempt, trajectory: SimTrajectory, g: float,
                  turn: int) -> None:  # fmt: skip
        if turn == -1:
            trajectory.failed = "backend_timeout"
        else:
            start = trajectory.turn_start
            first, last = self.clock.version(start + 1e-9), self.clock.version(g)
            for v in range(first, last + 1):
                if v not in trajectory.versions:
                    trajectory.versions.append(v)
            trajectory.end_version = last
            trajectory.generated += trajectory.work.turns[turn]
            trajectory.turn_runs.append(self._runs(start, g, trajectory.work.turns[turn]))
            if self.m is not None and len(trajectory.versions) - 1 > self.m:
                trajectory.failed = "span"
            elif turn + 1 < len(trajectory.work.turns):
                self._next_turn(attempt, trajectory, g, turn + 1)
                return
            elif trajectory.work.fail_kind == "agent_failed_state":
                trajectory.failed = "agent_failed_state"
        trajectory.finished_at = self.clock.real(g)
        attempt.running -= 1
        if attempt.running == 0:
            now = self.clock.real(g)
            attempt.done_at = now
            self.queue.append(attempt)
            self.active -= 1
            self._fill(now)

    def _runs(self, start: float, end: float, tokens: int) -> list[tuple[int, int]]:
        """A turn's (version, tokens) runs: token i (1 .. tokens) was generated at
        generation time start + i x time per token, under the version current then
        (bookkeeping for the records only: it decides nothing)."""
        first, last = self.clock.version(start + 1e-9), self.clock.version(end)
        frozen, pace = self.clock.frozen_at, self.model.token_time
        runs, done = [], 0
        for v in range(first, last + 1):
            upto = tokens if v == last else int((frozen[v - 1] - start) / pace + 1e-9)
            upto = max(done, min(tokens, upto))
            runs.append((v, upto - done))
            done = upto
        for i, (v, count) in enumerate(runs):  # a version the turn spans has a token
            largest = max(range(len(runs)), key=lambda j: runs[j][1])
            if not count and runs[largest][1] > 1:
                runs[largest] = (runs[largest][0], runs[largest][1] - 1)
                runs[i] = (v, 1)
        return runs

    def advance(self, now: float) -> None:
        """Run generation up to real time ``now`` (every pause before it is known)."""
        limit = self.clock.gen(now)
        while self.events and self.events[0][0] <= limit:
            g, _, attempt, trajectory, turn = heapq.heappop(self.events)
            self._turn_end(attempt, trajectory, g, turn)

    def next_done(self) -> float | None:
        return self.clock.real(self.events[0][0]) if self.events else None

    # -- the collector -------------------------------------------------------------
    def _observe(self, fetched: list[SimAttempt]) -> bool:
        if not self.k:
            return False
        before = len(self.tracker)
        for attempt in fetched:
            for trajectory in attempt.trajectories:
                v = trajectory.end_version
                if v is not None and trajectory.failed is None and v not in self.tracker:
                    self.tracker.append(v)
        return len(self.tracker) != before

    def _stale(self, attempt: SimAttempt) -> bool:
        if not self.k:
            return False
        cutoff = max(0, len(self.tracker) - self.k)
        return any(
            self.tracker.index(t.end_version) < cutoff
            for t in attempt.trajectories
            if t.end_version is not None and t.failed is None
        )

    def _take(self, c: int, now: float, fetched: list[SimAttempt], batch: list[SimAttempt],
              held: dict[int, SimAttempt]) -> list[SimAttempt]:  # fmt: skip
        """One poll: observe, drop pending stale groups, decide in order until B."""
        if self._observe(fetched) and batch:
            for attempt in batch:
                if self._stale(attempt):
                    attempt.outcome, attempt.stage = "dropped_stale", "pending"
            batch = [attempt for attempt in batch if attempt.outcome is None]
        for attempt in fetched:
            held[attempt.order] = attempt
        for order in list(held):
            if len(batch) >= self.model.batch_groups:
                break
            attempt = held.pop(order)
            attempt.call = c
            if attempt.failed:
                attempt.outcome = "rejected_span" if attempt.span_rejected else "failed"
                if attempt.retry < self.model.max_retries:
                    attempt.stage = "retried"
                    self.retries.append((attempt.draw, attempt.retry + 1))
                    self._fill(now)
            elif self._stale(attempt):
                attempt.outcome, attempt.stage = "dropped_stale", "arrival"
            else:
                batch.append(attempt)
        return batch

    def call(self, c: int, start: float, final: bool,
             put_back: list[SimAttempt]) -> tuple[float, list[SimAttempt]]:  # fmt: skip
        """Run rollout call ``c`` from ``start``; its return time and what it leaves over."""
        batch: list[SimAttempt] = []
        held: dict[int, SimAttempt] = {}
        now, fetched = start, put_back
        self.current_call = c
        while True:
            self.advance(now)
            batch = self._take(c, now, fetched + self.queue, batch, held)
            self.queue = []
            fetched = []
            following = self.next_done()
            if len(batch) >= self.model.batch_groups or following is None:
                break
            # the next poll that fetches anything: every 10 ms from the call's start
            now = max(now + POLL_S, start + POLL_S * -(-(following - start) // POLL_S))
        index = len(self.tracker) - 1
        self.call_index.append(index)
        for attempt in batch:
            attempt.outcome, attempt.call = "kept", c
            for t in attempt.trajectories if self.k else ():
                if t.end_version is not None:
                    t.gap = index - self.tracker.index(t.end_version)
                    self.kept_gaps.append(t.gap)
        if not (final or self.model.loop == "fully"):
            return now, list(held.values())
        for attempt in held.values():  # the fully loop throws its surplus away
            attempt.outcome = "leftover" if final else "discarded_surplus"
            attempt.call = None if final else c
        return now, []


def _run_to_exit(sim: _Sim, model: RunModel, start: float, returned: float) -> None:
    """The fully loop's worker runs on after the final call returned, until the process
    exits: the trainer finishes the step before (its update), then trains the final step
    at its typical pace. What completes meanwhile, and what is still generating at the
    exit (written then), is ``leftover`` (§12.4); the partial loop drains instead."""
    update = max(start + model.train_times[-1], returned)
    sim.advance(update)
    sim.clock.pause(update, model.update_pause)
    sim.advance(update + model.update_pause + statistics.median(model.train_times))


def simulate_run(model: RunModel, *, keep_versions: int, max_preempts: int | None,
                 seed: int = 0) -> SimRun:  # fmt: skip
    """Simulate the run's loop at (K, M) from its fitted model (see the module's docstring)."""
    sim = _Sim(model, keep_versions, max_preempts, seed)
    sim._fill(0.0)
    start, put_back = 0.0, list[SimAttempt]()
    returns = []
    for c in range(model.calls):
        final = c == model.calls - 1
        returned, put_back = sim.call(c, start, final, put_back)
        returns.append(returned)
        if final:
            if model.loop == "fully" and c:
                _run_to_exit(sim, model, start, returned)
            break
        if c == 0:
            start = returned
            continue
        update = max(start + model.train_times[c - 1], returned)
        sim.advance(update)
        sim.clock.pause(update, model.update_pause)
        start = update + model.update_pause
    sim.stopped = True
    for attempt in sim.attempts:
        if attempt.outcome is None:
            attempt.outcome = "leftover"
    return SimRun(sim.attempts, model.calls, sim.kept_gaps, returns, sim.call_index, keep_versions)


__all__ = ["SimAttempt", "SimRun", "SimTrajectory", "simulate_run"]
