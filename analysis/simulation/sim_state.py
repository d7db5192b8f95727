"""The state of the run-loop simulation (:mod:`analysis.simulation.run_loop_sim`): its two
clocks (real time, and generation time, which stands still while the weights are
updated), and what it simulates: trajectories, attempts (groups) and the run."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Literal

from analysis.rules.spec import PeerPolicy
from analysis.simulation.run_model import TrajectoryWork

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
    start_updates: int = 0
    """Weight updates applied when the worker submitted it (its start version is one more)."""
    start_steps: int = 0
    """Rollout calls returned when the worker submitted it (the step the trainer's batches
    had reached: verl's g0)."""
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
    rule: PeerPolicy | None = None
    """Another system's rule run as the loop's filter in place of K (None: Dressage's)."""
    call_updates: list[int] = field(default_factory=list)
    """Weight updates applied while each call ran (none is applied during a call)."""
    batch_groups: int = 0
    """B: the groups each call returns with."""
    starved: bool = False
    """It stopped submitting at the cap of attempts (``MOST_ATTEMPTS_PER_GROUP``): its
    later calls are short of B."""

    @property
    def measures_gap(self) -> bool:
        """Whether kept trajectories have a version gap (K on, or a peer rule)."""
        return bool(self.keep_versions) or self.rule is not None


class SimClock:
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


__all__ = ["Outcome", "SimAttempt", "SimClock", "SimRun", "SimTrajectory"]
