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

Another system's rule (a :class:`~analysis.rules.spec.PeerPolicy`) can take the place of
Dressage's staleness filter in the same loop (docs/semantics.md §12.9): it measures a
group by its start (the version, or step, current when the worker submitted it), on
arrival, when the clock advances, or when a batch is sampled, as the rule says; takes
waiting groups in its order; and cancels in-flight groups too stale to be kept where the
system does (prime-rl, NeMo-RL). Peers have no span control (M = none).
"""

from __future__ import annotations

import heapq
import itertools
import random
import statistics
from collections import deque

from analysis.rules.spec import NemoWindowedPolicy, PeerPolicy, PrimeRLPolicy
from analysis.simulation.run_model import POLL_S, RunModel, TrajectoryWork
from analysis.simulation.sim_state import (
    Outcome as Outcome,
    SimAttempt,
    SimClock,
    SimRun,
    SimTrajectory,
)

MOST_ATTEMPTS_PER_GROUP = 25
"""A simulated run stops submitting after this many attempts per group its steps train on
(a rule that no attempt can pass, such as prime-rl's bound 0 on its step clock in a loop
one step off-policy, would otherwise run forever): its remaining calls come up short."""


class _Sim:
    def __init__(self, model: RunModel, keep_versions: int, max_preempts: int | None,
                 seed: int, rule: PeerPolicy | None = None) -> None:  # fmt: skip
        self.model = model
        self.k = 0 if rule is not None else keep_versions
        self.m = None if rule is not None else max_preempts
        self.rule = rule
        self.returned = 0  # rollout calls returned so far
        self.generating: dict[int, SimAttempt] = {}  # by order: submitted, not yet done
        self.call_updates: list[int] = []
        self.most_attempts = MOST_ATTEMPTS_PER_GROUP * model.calls * model.batch_groups + 100
        self.starved = False
        self.rng = random.Random(seed)
        self.clock = SimClock()
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
        if len(self.attempts) >= self.most_attempts:  # starved: a rule no attempt passes
            self.stopped = self.starved = True
        while not self.stopped and self.active < self.model.max_active_groups:
            if self.retries:
                draw, retry = self.retries.popleft()
            else:
                draw, retry = self.next_draw, 0
                self.next_draw += 1
            works, modelled = self._work(draw, retry)
            g = self.clock.gen(now)
            attempt = SimAttempt(draw, retry, len(self.attempts),
                                 [SimTrajectory(w) for w in works], modelled, now,
                                 start_updates=self.clock.version(g + 1e-9) - 1,
                                 start_steps=self.returned, start_call=self.current_call)  # fmt: skip
            self.attempts.append(attempt)
            self.generating[attempt.order] = attempt
            self.active += 1
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
        if attempt.outcome is not None:  # cancelled in flight: its turns end unseen
            return
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
            del self.generating[attempt.order]
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

    # -- another system's rule in place of K ----------------------------------------
    def updates(self, now: float) -> int:
        """Weight updates applied by real time ``now``."""
        return self.clock.version(self.clock.gen(now) + 1e-9) - 1

    def lag(self, attempt: SimAttempt, c: int, now: float) -> int:
        """How stale the rule finds ``attempt`` for batch ``c`` (0-based) on its clock:
        ``versions``, weight updates since its start; ``steps``, the system's own counter:
        prime-rl's (step - 1) - the policy version at creation (``min_fresh_version``),
        verl's g - g0 (steps since the prompt was submitted), NeMo-RL's trainer version
        minus the start version (a version clock either way)."""
        rule = self.rule
        if rule is None or rule.clock_asked == "versions" or isinstance(rule, NemoWindowedPolicy):
            return self.updates(now) - attempt.start_updates
        if isinstance(rule, PrimeRLPolicy):
            return c - attempt.start_updates
        return c - attempt.start_steps

    def _peer_stale(self, attempt: SimAttempt, c: int, now: float) -> bool:
        assert self.rule is not None
        return self.lag(attempt, c, now) > self.rule.bound

    def cancel_in_flight(self, c: int, now: float) -> None:
        """prime-rl (``Dispatcher.on_version_pending``) and NeMo-RL (``WindowedSampler.
        should_abort_inflight``) cancel generating groups too stale for batch ``c`` when the
        weights change; the worker fills their places."""
        if not isinstance(self.rule, PrimeRLPolicy | NemoWindowedPolicy):
            return
        for order, attempt in list(self.generating.items()):
            if self._peer_stale(attempt, c, now):
                attempt.outcome, attempt.stage, attempt.call = "dropped_stale", "in_flight", c
                del self.generating[order]
                self.active -= 1
        self._fill(now)

    def _order(self, held: dict[int, SimAttempt]) -> list[int]:
        """The waiting groups in the order a batch takes them (ties by arrival): verl's
        oldest first by g0 (the step its prompt was submitted at), NeMo-RL's freshest first
        by start version."""
        rule = self.rule
        if rule is None or rule.selection == "fifo":
            return list(held)
        if rule.selection == "oldest":
            return sorted(held, key=lambda order: held[order].start_steps)
        return sorted(held, key=lambda order: -held[order].start_updates)

    def _evict(self, batch: list[SimAttempt], c: int, now: float) -> list[SimAttempt]:
        """Drop the waiting groups the rule now finds too stale (stage ``pending``)."""
        for attempt in batch:
            if self._peer_stale(attempt, c, now):
                attempt.outcome, attempt.stage = "dropped_stale", "pending"
        return [attempt for attempt in batch if attempt.outcome is None]

    def _take_peer(self, c: int, now: float, fetched: list[SimAttempt],
                   batch: list[SimAttempt], held: dict[int, SimAttempt]) -> list[SimAttempt]:  # fmt: skip
        """One poll with another system's rule as the filter: re-check what waits when its
        clock may have moved (prime-rl, NeMo-RL), take in its order, check on arrival or,
        for verl, evict when a batch is sampled and fill again."""
        rule = self.rule
        assert rule is not None
        size = self.model.batch_groups
        if rule.sweeps_on_advance:
            batch = self._evict(batch, c, now)
        for attempt in fetched:
            held[attempt.order] = attempt
        for order in self._order(held):
            if len(batch) >= size and rule.evicts_at_sample:
                batch = self._evict(batch, c, now)
            if len(batch) >= size:
                break
            attempt = held.pop(order)
            attempt.call = c
            if attempt.failed:
                self._failed(attempt, now)
            elif rule.checks_on_arrival and self._peer_stale(attempt, c, now):
                attempt.outcome, attempt.stage = "dropped_stale", "arrival"
            else:
                batch.append(attempt)
        return self._evict(batch, c, now) if rule.evicts_at_sample else batch

    def _failed(self, attempt: SimAttempt, now: float) -> None:
        attempt.outcome = "rejected_span" if attempt.span_rejected else "failed"
        if attempt.retry < self.model.max_retries:
            attempt.stage = "retried"
            self.retries.append((attempt.draw, attempt.retry + 1))
            self._fill(now)

    def _take(self, c: int, now: float, fetched: list[SimAttempt], batch: list[SimAttempt],
              held: dict[int, SimAttempt]) -> list[SimAttempt]:  # fmt: skip
        """One poll: observe, drop pending stale groups, decide in order until B."""
        if self.rule is not None:
            return self._take_peer(c, now, fetched, batch, held)
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
                self._failed(attempt, now)
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
        self.returned = c + 1
        self.call_updates.append(self.updates(now))
        current = self.updates(now) + 1  # a peer rule's gap: versions behind the current one
        for attempt in batch:
            attempt.outcome, attempt.call = "kept", c
            for t in attempt.trajectories if self.k or self.rule else ():
                if t.end_version is not None:
                    t.gap = (
                        current - t.end_version
                        if self.rule
                        else index - self.tracker.index(t.end_version)
                    )
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
                 seed: int = 0, rule: PeerPolicy | None = None) -> SimRun:  # fmt: skip
    """Simulate the run's loop at (K, M) from its fitted model (see the module's docstring);
    with ``rule``, that system's rule is the filter (K and M are then not applied)."""
    sim = _Sim(model, keep_versions, max_preempts, seed, rule)
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
        sim.cancel_in_flight(c + 1, update)
        start = update + model.update_pause
    sim.stopped = True
    for attempt in sim.attempts:
        if attempt.outcome is None:
            attempt.outcome = "leftover"
    return SimRun(sim.attempts, model.calls, sim.kept_gaps, returns, sim.call_index,
                  sim.k, rule, sim.call_updates, model.batch_groups, sim.starved)  # fmt: skip


__all__ = ["MOST_ATTEMPTS_PER_GROUP", "SimAttempt", "SimRun", "SimTrajectory", "simulate_run"]
