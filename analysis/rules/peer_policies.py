"""The batch-assembly rules of prime-rl, verl v1 (drop) and NeMo-RL (windowed) replayed over
a prepared log, one group at a time in arrival order (docs/semantics.md §13).

The setting-independent work is the engine's: :func:`analysis.prepare` and the
observation of every group (no span check: these systems have none). What is added here
is each group's *start* version, in version numbers when the labels are numbers (§13.1),
the clock each rule counts staleness on (§13.2: by default the system's own step counter)
and the loop of §13.3, which gives the engine's
:class:`~analysis.engine.batching.Collection`, so the summary, the decision and batch
tables are the engine's own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import polars as pl

from analysis.engine.batching import (
    NO_VERSION,
    Collection,
    Observation,
)
from analysis.engine.decisions import Outcome
from analysis.engine.prepare import PreparedLog, real_token_labels
from analysis.errors import ConfigError, setting
from analysis.rules.admission import default_step_offset
from analysis.rules.spec import PeerPolicy

_NUMBER = re.compile(r"0|[1-9][0-9]{0,17}")
NO_CLOCK = -(1 << 62)
"""The clock before it has read anything: no group is stale against it."""


def version_number(label: str) -> int | None:
    """The whole number a label is (``"12"`` -> 12), None when it is not one: leading zeros,
    signs and other text are not numbers (``"03"`` and ``"3"`` are two labels, §2.1)."""
    return int(label) if _NUMBER.fullmatch(label) else None


@dataclass(frozen=True)
class VersionAxis:
    """How the peer rules count versions on one log (docs/semantics.md §13.1-§13.2): in
    version numbers when every observed version is a whole number, else in positions of
    observation order. Arrays are per group, in arrival order."""

    numbered: bool
    start: np.ndarray
    """Each group's start (a number, or an index), NO_VERSION when it has none."""
    newest: np.ndarray
    """The newest observed version once each group is observed (-1 before any)."""
    base: int
    """The smallest start of the log (0 by positions): the steps clock's zero."""
    start_label: list[str | None]
    start_index: np.ndarray
    """The observation index of the start's label, NO_VERSION when it is not observed."""

    @property
    def unit(self) -> str:
        return "version numbers" if self.numbered else "positions of observed versions"


def version_axis(prepared: PreparedLog) -> VersionAxis:
    """Each group's start and the newest version (docs/semantics.md §13.1), arrival order."""
    key = "peer_version_axis"
    if key in prepared._cache:
        cached: VersionAxis = prepared._cache[key]
        return cached
    observation = prepared.observation(None)
    versions = observation.versions
    index = {label: position for position, label in enumerate(versions)}
    numbers = [version_number(label) for label in versions]
    numbered = bool(versions) and all(number is not None for number in numbers)
    n = prepared.n_groups
    tokens = _token_labels(prepared)
    if numbered:
        arrays = prepared.arrays
        label_number = np.array(
            [
                -1 if (number := version_number(label)) is None else number
                for label in arrays.labels
            ],
            dtype=np.int64,
        )
        entry = label_number[arrays.codes]
        start = np.full(n, NO_VERSION, dtype=np.int64)
        top = np.full(n, -1, dtype=np.int64)
        np.minimum.at(start, arrays.owner, entry)
        np.maximum.at(top, arrays.owner, entry)
        newest = np.maximum.accumulate(top) if n else top
        # Each distinct label read once (a log has few labels and many tokens).
        as_number = {
            label: number
            for label in tokens["label"].unique().to_list()
            if (number := version_number(label)) is not None
        }
        numbered_tokens = tokens.with_columns(
            position=pl.col("label").replace_strict(as_number, default=None, return_dtype=pl.Int64)
        )
    else:
        start = observation.min_index.copy()
        newest = observation.count_after - 1
        numbered_tokens = tokens.with_columns(
            position=pl.col("label").replace_strict(index, default=None, return_dtype=pl.Int64)
        )
    found = numbered_tokens.drop_nulls("position").group_by("arrival").agg(pl.col("position").min())
    if found.height:
        where = found["arrival"].to_numpy()
        start[where] = np.minimum(start[where], found["position"].to_numpy())
    has_start = start != NO_VERSION
    base = int(start[has_start].min()) if has_start.any() else 0
    if numbered:
        start_label = [None if s == NO_VERSION else str(s) for s in start.tolist()]
        start_index = np.array(
            [
                NO_VERSION if label is None else index.get(label, NO_VERSION)
                for label in start_label
            ],
            dtype=np.int64,
        )
    else:
        start_label = [None if s == NO_VERSION else versions[s] for s in start.tolist()]
        start_index = start
    axis = VersionAxis(numbered, start, newest, base, start_label, start_index)
    prepared._cache[key] = axis
    return axis


def _token_labels(prepared: PreparedLog) -> pl.DataFrame:
    """(arrival, label): every real token-version label of each group's records."""
    rows = prepared._rows
    arrival = prepared.groups.select("group_id", "arrival")
    return (
        real_token_labels(rows.select("group_id", "version_spans"), by="group_id")
        .join(arrival, on="group_id", how="inner")
        .select("arrival", "label")
    )


def logged_steps(prepared: PreparedLog) -> np.ndarray | None:
    """Each group's trainer step as its records carry it (the largest: the step it was
    complete at), arrival order; None when a group carries none."""
    key = "peer_logged_steps"
    if key not in prepared._cache:
        steps = (
            prepared._rows.select("group_id", "trainer_step")
            .group_by("group_id")
            .agg(pl.col("trainer_step").max())
            .join(prepared.groups.select("group_id", "arrival"), on="group_id", how="inner")
            .sort("arrival")
        )
        complete = steps.height == prepared.n_groups and steps["trainer_step"].null_count() == 0
        prepared._cache[key] = steps["trainer_step"].to_numpy() if complete else None
    logged: np.ndarray | None = prepared._cache[key]
    return logged


@dataclass(frozen=True)
class Clock:
    """The clock a peer replay ran on (docs/semantics.md §13.2), and what it means."""

    name: str
    """``steps``, ``logged`` or ``versions`` (``own`` resolved on the log)."""
    asked: str
    """The ``clock`` knob as given."""
    unit: str
    """What a lag counts: ``version numbers`` or ``positions of observed versions``."""
    offset: int = 0
    """For ``logged``: the version a step trains is step - offset."""

    def note(self, system: str) -> str:
        """One line for the summary's notes: which clock ran and what it counts."""
        own = " (the default, clock=own)" if self.asked == "own" else ""
        said = {
            "steps": f"the replay's own trainer steps (the log's first version plus the "
            f"batches emitted), as {system} counts its step",
            "logged": "the trainer step each group's records carry (the step it arrived at"
            + (f"; step N trains version N - {self.offset}" if self.offset else "")
            + f"), {system}'s own step as its log records it",
            "versions": "the newest version observed in the log",
        }[self.name]
        return (
            f"clock: {self.name}{own}: staleness counted against {said}; lag in {self.unit} "
            "(docs/semantics.md §13.2)"
        )


def resolve_clock(
    policy: PeerPolicy, prepared: PreparedLog, formats: tuple[str, ...] = ()
) -> Clock:
    """The clock ``policy`` runs on over this log: ``own`` is ``logged`` where the log is
    the system's own and records every group's step, else ``steps``."""
    axis = version_axis(prepared)
    asked = policy.clock_asked
    logged_here = axis.numbered and logged_steps(prepared) is not None
    name = asked
    if asked == "own":
        own_log = bool(formats) and set(formats) <= set(policy.logged_by)
        name = "logged" if own_log and logged_here else "steps"
    elif asked == "logged" and not logged_here:
        why = (
            "not every group carries a trainer step"
            if logged_steps(prepared) is None
            else "its version labels are not all whole numbers, so steps cannot be set against them"
        )
        raise ConfigError(
            setting("policy", policy.spec()) + f": clock=logged reads each group's trainer "
            f"step from the log, and {why}; use clock=steps or clock=versions"
        )
    offset = default_step_offset(formats) if name == "logged" else 0
    return Clock(name=name, asked=asked, unit=axis.unit, offset=offset)


def start_index(prepared: PreparedLog) -> np.ndarray:
    """Each group's start version index (docs/semantics.md §13.1), arrival order:
    NO_VERSION for a group whose start is not an observed version."""
    return version_axis(prepared).start_index


class _Loop:
    """The state of one replay of a peer rule: the waiting groups and the outcome arrays."""

    def __init__(
        self,
        policy: PeerPolicy,
        observation: Observation,
        axis: VersionAxis,
        clock: Clock,
        steps: np.ndarray | None,
        batch_groups: int,
    ) -> None:
        n = len(axis.start)
        self.policy, self.start, self.batch_groups = policy, axis.start, batch_groups
        self.base = axis.base
        # What the clock reads as each group arrives (None: the steps clock, moved by batches).
        self.reads: list[int] | None = None
        if clock.name == "versions":
            self.reads = axis.newest.tolist()
        elif clock.name == "logged":
            assert steps is not None, "a logged clock reads every group's step"
            self.reads = (steps - clock.offset).tolist()
        self.now = observation.count_after - 1  # observed index once each group is observed
        self.decision = np.full(n, -1, dtype=np.int64)
        self.batch = np.full(n, -1, dtype=np.int64)
        self.current = np.full(n, -1, dtype=np.int64)
        self.waiting: list[int] = []
        self.rows: list[tuple[int, int, bool, int, int, int]] = []
        self.arrival_drops = self.pending_drops = 0
        self.clock = axis.base if clock.name == "steps" else NO_CLOCK

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
        if self.reads is None:  # the steps clock: one step per batch emitted
            self.clock = self.base + len(self.rows)
            if self.policy.sweeps_on_advance:
                self.drop_waiting(now)

    def arrive(self, group: int, failed: bool) -> None:
        now = int(self.now[group])
        if self.reads is not None and self.reads[group] > self.clock:
            self.clock = self.reads[group]
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
    prepared: PreparedLog, policy: PeerPolicy, batch_groups: int, clock: Clock
) -> tuple[Observation, Collection]:
    """Replay ``policy`` over the prepared log on ``clock`` (docs/semantics.md §13.3)."""
    observation = prepared.observation(None)
    steps = logged_steps(prepared) if clock.name == "logged" else None
    loop = _Loop(policy, observation, version_axis(prepared), clock, steps, batch_groups)
    failed = observation.failed.tolist()
    for group in range(prepared.n_groups):
        loop.arrive(group, failed[group])
    final_now = int(observation.count_after[-1]) - 1 if prepared.n_groups else -1
    loop.take(final_now, at_end=True)
    return observation, Collection(
        decision=loop.decision, batch=loop.batch, current=loop.current, batch_rows=loop.rows
    )
