"""What a replay decides for a group, in one place: the decision, the stage of a stale drop,
and the int code the loops on arrays store (docs/semantics.md §3).

:class:`Decision` and :class:`Stage` are ``str`` enums, so a member compares equal to, and
prints as, the text every output uses (frames, CSV, JSON, tables). Frames and dict keys are
built from ``member.value`` (a plain ``str``): polars would make a list of members an
``Enum`` column, and orjson takes only plain ``str`` keys.
"""

from __future__ import annotations

from enum import IntEnum, StrEnum


class Decision(StrEnum):
    """What became of a group (or a run's attempt)."""

    KEPT = "kept"
    DROPPED_STALE = "dropped_stale"
    REJECTED_SPAN = "rejected_span"
    FAILED = "failed"
    LEFTOVER = "leftover"
    """Only in the run-loop replay: completed, but never consumed before the run ended."""
    UNKNOWN = "unknown"
    """Only in the run-loop replay: the run's files cannot tell the decision (no traj_err/,
    no dressage_log.txt); the possible decisions are listed beside it."""

    @property
    def words(self) -> str:
        """The decision as tables for a person name it (the one stale row counts both stages)."""
        return _DECISION_WORDS[self]


_DECISION_WORDS = {
    Decision.KEPT: "kept",
    Decision.DROPPED_STALE: "stale, any stage",
    Decision.REJECTED_SPAN: "span rejected",
    Decision.FAILED: "failed",
    Decision.LEFTOVER: "left over",
    Decision.UNKNOWN: "unknown",
}


class Stage(StrEnum):
    """Where a stale group was dropped: on arrival, or while pending in the batch."""

    ARRIVAL = "arrival"
    PENDING = "pending"


class Outcome(IntEnum):
    """The int code the loops on arrays store per group: a decision with its stage."""

    KEPT = 0
    DROPPED_ARRIVAL = 1
    DROPPED_PENDING = 2
    REJECTED = 3
    FAILED = 4

    @property
    def decision(self) -> Decision:
        return _OUTCOME_DECISION[self]

    @property
    def stage(self) -> Stage | None:
        """The stage of a stale drop; None for the other outcomes."""
        return _OUTCOME_STAGE.get(self)

    @property
    def key(self) -> str:
        """The outcome's key in a summary's counts: the decision, with the stage of a stale drop."""
        stage = self.stage
        return self.decision.value if stage is None else f"{self.decision.value}_{stage.value}"

    @property
    def words(self) -> str:
        """The outcome as the summary table names it."""
        stage = self.stage
        return self.decision.words if stage is None else f"stale, {stage.value}"


_OUTCOME_DECISION = {
    Outcome.KEPT: Decision.KEPT,
    Outcome.DROPPED_ARRIVAL: Decision.DROPPED_STALE,
    Outcome.DROPPED_PENDING: Decision.DROPPED_STALE,
    Outcome.REJECTED: Decision.REJECTED_SPAN,
    Outcome.FAILED: Decision.FAILED,
}
_OUTCOME_STAGE = {Outcome.DROPPED_ARRIVAL: Stage.ARRIVAL, Outcome.DROPPED_PENDING: Stage.PENDING}

RUN_LOOP_ONLY = frozenset({Decision.LEFTOVER, Decision.UNKNOWN})
"""Decisions that only the run-loop replay makes (a log replay decides every group)."""

DECISIONS: tuple[str, ...] = tuple(d.value for d in Decision if d not in RUN_LOOP_ONLY)
"""The four decisions of a replay of a log, in the order outputs list them."""

LOOP_DECISIONS: tuple[str, ...] = tuple(d.value for d in Decision)
"""What the run-loop replay decides for an attempt: the four of a simple replay,
``leftover`` (completed, but never consumed before the run ended) and ``unknown`` (the
run's files cannot tell)."""

DECISION_NAMES: dict[int, str] = {int(o): o.decision.value for o in Outcome}
"""Code to decision, for ``replace_strict`` on a column of codes."""

STAGE_NAMES: dict[int, str | None] = {
    int(o): None if o.stage is None else o.stage.value for o in Outcome
}
"""Code to stage (None unless a stale drop), for ``replace_strict`` on a column of codes."""

__all__ = [
    "DECISIONS",
    "DECISION_NAMES",
    "LOOP_DECISIONS",
    "STAGE_NAMES",
    "Decision",
    "Outcome",
    "Stage",
]
