"""The batch-assembly rules of prime-rl, verl v1 (drop) and NeMo-RL (windowed) replayed over
a prepared log, one group at a time in arrival order (docs/semantics.md §13).

The setting-independent work is the engine's: :func:`analysis.prepare` and the
observation of every group (no span check: these systems have none). What is added here
is each group's *start* version index (§13.1) and the loop of §13.3, which gives the
engine's :class:`~analysis.engine.batching.Collection`, so the summary, the decision and
batch tables are the engine's own.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from analysis.engine.batching import (
    NO_VERSION,
    Collection,
    Observation,
)
from analysis.engine.decisions import Outcome
from analysis.engine.prepare import PreparedLog
from analysis.rules.spec import PeerPolicy


def start_index(prepared: PreparedLog) -> np.ndarray:
    """Each group's start version index (docs/semantics.md §13.1), arrival order.

    The stalest of the group's trajectory versions and of the real token-version labels
    of its records that are observed versions, as an index in observation order (every
    group observed, no span check); NO_VERSION for a group with neither.
    """
    key = "start_index"
    if key in prepared._cache:
        cached: np.ndarray = prepared._cache[key]
        return cached
    observation = prepared.observation(None)
    start = observation.min_index.copy()
    index = {label: position for position, label in enumerate(observation.versions)}
    if index:
        rows = prepared._rows
        arrival = prepared.groups.select("group_id", "arrival")
        from analysis.engine.prepare import real_token_labels

        labels = (
            real_token_labels(rows.select("group_id", "version_spans"), by="group_id")
            .with_columns(
                position=pl.col("label").replace_strict(index, default=None, return_dtype=pl.Int64)
            )
            .drop_nulls("position")
            .group_by("group_id")
            .agg(pl.col("position").min())
            .join(arrival, on="group_id", how="inner")
        )
        if labels.height:
            where = labels["arrival"].to_numpy()
            start[where] = np.minimum(start[where], labels["position"].to_numpy())
    prepared._cache[key] = start
    return start


class _Loop:
    """The state of one replay of a peer rule: the waiting groups and the outcome arrays."""

    def __init__(
        self, policy: PeerPolicy, observation: Observation, start: np.ndarray, batch_groups: int
    ) -> None:
        n = len(start)
        self.policy, self.start, self.batch_groups = policy, start, batch_groups
        self.now = observation.count_after - 1  # observed index once each group is observed
        self.decision = np.full(n, -1, dtype=np.int64)
        self.batch = np.full(n, -1, dtype=np.int64)
        self.current = np.full(n, -1, dtype=np.int64)
        self.waiting: list[int] = []
        self.rows: list[tuple[int, int, bool, int, int, int]] = []
        self.arrival_drops = self.pending_drops = 0
        self.clock = -1 if policy.clock_name == "versions" else 0

    def stale(self, group: int) -> bool:
        start = int(self.start[group])
        return start != NO_VERSION and self.clock - start > self.policy.bound

    def drop_waiting(self, now: int) -> None:
        """Drop the waiting groups the clock has made too stale (a sweep, or an eviction)."""
        gone = [g for g in self.waiting if self.stale(g)]
        if gone:
            self.decision[gone] = Outcome.DROPPED_PENDING
            self.current[gone] = now
            self.pending_drops += len(gone)
            self.waiting = [g for g in self.waiting if not self.stale(g)]

    def take(self, now: int, *, at_end: bool = False) -> None:
        """The trainer samples: evict (verl), then take a batch while enough groups wait
        (at the end of the log, whatever waits, as a partial batch)."""
        while self.waiting:
            if self.policy.evicts_at_sample:
                self.drop_waiting(now)
            if not self.waiting or (len(self.waiting) < self.batch_groups and not at_end):
                return
            self._emit(now, partial=len(self.waiting) < self.batch_groups)

    def _emit(self, now: int, *, partial: bool) -> None:
        chosen = _select(self.waiting, self.start, self.policy.selection)[: self.batch_groups]
        number = len(self.rows)
        self.decision[chosen] = Outcome.KEPT
        self.batch[chosen] = number
        self.current[chosen] = now
        self.rows.append(
            (number, len(chosen), partial, now, self.arrival_drops, self.pending_drops)
        )
        self.arrival_drops = self.pending_drops = 0
        taken = set(chosen)
        self.waiting = [g for g in self.waiting if g not in taken]
        if self.policy.clock_name == "steps":
            self.clock = len(self.rows)
            if self.policy.sweeps_on_advance:
                self.drop_waiting(now)

    def arrive(self, group: int, failed: bool) -> None:
        now = int(self.now[group])
        if self.policy.clock_name == "versions" and now > self.clock:
            self.clock = now
            if self.policy.sweeps_on_advance:
                self.drop_waiting(now)
        if failed:
            self.decision[group], self.current[group] = Outcome.FAILED, now
            return
        if self.policy.checks_on_arrival and self.stale(group):
            self.decision[group], self.current[group] = Outcome.DROPPED_ARRIVAL, now
            self.arrival_drops += 1
            return
        self.waiting.append(group)
        if len(self.waiting) >= self.batch_groups:
            self.take(now)


def _select(waiting: list[int], start: np.ndarray, order: str) -> list[int]:
    """The waiting groups in the order a batch takes them (ties by arrival)."""
    if order == "freshest":
        return sorted(waiting, key=lambda g: (-int(start[g]) if start[g] != NO_VERSION else 1, g))
    if order == "oldest":
        return sorted(waiting, key=lambda g: (int(start[g]) if start[g] != NO_VERSION else -1, g))
    return list(waiting)


def collect_peer(
    prepared: PreparedLog, policy: PeerPolicy, batch_groups: int
) -> tuple[Observation, Collection]:
    """Replay ``policy`` over the prepared log (docs/semantics.md §13.3)."""
    observation = prepared.observation(None)
    loop = _Loop(policy, observation, start_index(prepared), batch_groups)
    failed = observation.failed.tolist()
    for group in range(prepared.n_groups):
        loop.arrive(group, failed[group])
    final_now = int(observation.count_after[-1]) - 1 if prepared.n_groups else -1
    loop.take(final_now, at_end=True)
    return observation, Collection(
        decision=loop.decision, batch=loop.batch, current=loop.current, batch_rows=loop.rows
    )
