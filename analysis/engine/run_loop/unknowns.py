"""Which replayed decisions a run's files cannot tell (docs/semantics.md §12.5): those that
differ between readings (:mod:`.readings`), and, with a file missing, those the run's own
records do not confirm; each ``unknown`` with the decisions possible."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from analysis.engine.decisions import Decision, Stage
from analysis.engine.run_loop.collector import Attempt, AttemptDecision, PollTiming
from analysis.engine.run_loop.readings import Pass
from analysis.engine.run_loop.records import kept_groups_by_step
from analysis.formats.dressage.run import RunLog


def decided(d: AttemptDecision) -> tuple[str, str | None]:
    return d.decision.value, None if d.stage is None else d.stage.value


@dataclass
class Evidence:
    """What the run's files confirm of one replay, and what a missing file leaves open
    (docs/semantics.md §12.4)."""

    run: RunLog
    base: Pass
    checks: pl.DataFrame
    loop: str
    timing: PollTiming
    disagreeing: frozenset[int] = frozenset()
    """Steps whose own checks disagree (a file missing: :func:`departure` covers them)."""
    what_if: bool = False
    """At another K than the run's: its records neither confirm nor overrule the replay."""

    def __post_init__(self) -> None:
        run = self.run
        self.kept_by_step = kept_groups_by_step(run)
        self.missing = "traj_err" not in run.sources or "dressage_log.txt" not in run.sources
        self.no_log = "dressage_log.txt" not in run.sources or not run.calls.height
        self.dump_step = {s: k for k, sessions in self.kept_by_step.items() for s in sessions}
        steps = set(self.kept_by_step)
        self.dumps_complete = bool(steps) and set(range(max(steps) + 1)) <= steps
        self.since = departure(run, self.checks) if self.missing and not self.what_if else None
        kept_checks = self.checks.filter(pl.col("check") == "kept_groups")
        self.dumps_agree = bool(kept_checks["agrees"].all())
        self.appear = version_appearance(self.base.attempts)
        self.regrouped = regrouped(run)
        if self.missing:
            self.disagreeing = frozenset()

    def in_dump(self, attempt: Attempt) -> int | None:
        """The step whose dump holds every trajectory of the attempt, if one does."""
        steps = {self.dump_step.get(s) for s in attempt.sessions}
        return steps.pop() if len(steps) == 1 and attempt.sessions else None

    def dump_fact(self, attempt: Attempt, own: AttemptDecision) -> int | None:
        """The step whose dump holds the attempt, where the replay is not trusted (a file
        missing, or that step or the replay's disagrees)."""
        step = self.in_dump(attempt)
        trusted = not self.missing and not {step, own.rollout_id} & self.disagreeing
        return None if step is None or trusted or self.what_if else step

    def confirmed(self, attempt: Attempt, d: AttemptDecision) -> bool:
        return not self.what_if and (
            (self.dumps_agree or d.rollout_id in self.base.unmatched)
            and d.decision is Decision.KEPT
            and d.rollout_id is not None
            and set(attempt.sessions) <= self.kept_by_step.get(d.rollout_id, set())
        )

    def plausible(self, attempt: Attempt, own: AttemptDecision, seen: set[str]) -> set[str]:
        """What an attempt decided in a step whose checks disagree may have been (else: none)."""
        if own.rollout_id not in self.disagreeing or own.decision is Decision.FAILED:
            return set()
        kept = not self.dumps_complete or self.in_dump(attempt) is not None
        return seen | {  # kept only if a dump holds it or some dump is missing; no failure
            d.value
            for d in (Decision.KEPT, Decision.DROPPED_STALE, Decision.LEFTOVER)
            + (Decision.DISCARDED_SURPLUS,) * (self.loop == "fully")
            if kept or d is not Decision.KEPT
        }

    def near_new_version(self, attempt: Attempt) -> bool:
        """Whether a version may first reach the collector close enough to the attempt's
        completion that a call start the files do not tell could put it in a later poll:
        then the attempt may have been held pending and dropped there instead."""
        t, margin = attempt.completed_at, self.timing.stall_s + self.timing.order_uncertainty_s
        return any(lo < t + margin and hi > t - margin for lo, hi in self.appear.values())

    def open_after_departure(self, attempt: Attempt, seen: set[str]) -> set[str]:
        """What an attempt may have been where the replay no longer follows the run."""
        possible = seen | {Decision.DROPPED_STALE.value, Decision.LEFTOVER.value}
        if self.loop == "fully":
            possible.add(Decision.DISCARDED_SURPLUS.value)
        if attempt.incomplete or attempt.fail_kind is not None:
            possible |= set(FAILURE_VALUES)
        if not self.dumps_complete:
            possible.add(Decision.KEPT.value)
        elif self.in_dump(attempt) is None:
            possible.discard(Decision.KEPT.value)
        return possible

    def left_open(self, attempt: Attempt, own: AttemptDecision, seen: set[str]) -> set[str]:
        """With a file missing: the decisions possible where the files do not confirm the
        replay's (empty: they do)."""
        key = attempt.attempt_id
        if self.since is not None and (own.rollout_id is None or own.rollout_id >= self.since):
            return self.open_after_departure(attempt, seen)
        if key in self.base.ambiguous or key in self.regrouped:
            return self.open_after_departure(attempt, seen)
        if self.no_log and self.stage_open(attempt, own):
            return seen  # dropped at arrival or while pending: the call start decides
        return set()

    def stage_open(self, attempt: Attempt, own: AttemptDecision) -> bool:
        """Whether a stale drop's stage depends on where a call the files do not time
        began: a drop while pending, or at arrival near a new version's first arrival."""
        return own.decision is Decision.DROPPED_STALE and not (
            own.stage is Stage.ARRIVAL and not self.near_new_version(attempt)
        )


def unknowns(
    run: RunLog,
    base: Pass,
    others: list[Pass],
    limits: list[Pass],
    checks: pl.DataFrame,
    loop: str = "partial",
    timing: PollTiming | None = None,
    disagreeing: frozenset[int] = frozenset(),
    what_if: bool = False,
) -> dict[str, tuple[str, ...]]:
    """Attempts whose decision the files cannot tell, with the decisions possible
    (docs/semantics.md §12.4): those that differ between readings of what the files leave
    open, failures of attempts short of trajectories without traj_err/ (span rejection or
    other failure, in the fully-async loop also thrown away or left over), and decisions of
    calls whose start no cut of the completions reproduces (no log).

    With a file missing (traj_err/ or the log) the replay is trusted only as far as the
    run's own records confirm it (:class:`Evidence`): an attempt a step's dump holds is
    kept in that step (a fact of the files); from the first step where the replay departs
    from the dumps, metrics or log lines (the failure counts aside without traj_err/),
    every other decision is unknown; so are attempts whose decision depends on an order of
    near-simultaneous completions the files cannot tell (order-ambiguous), attempts of a
    repeated prompt told apart by times alone without traj_err/, and, without call lines,
    the stage of a stale drop near a new version's arrival.

    With every file present, the decisions of the steps in ``disagreeing`` (their own
    checks disagree) are unknown too, but for attempts a dump holds and recorded failures;
    none of this ``what_if`` (at another K than the run's: :attr:`Evidence.what_if`)."""
    evidence = Evidence(run, base, checks, loop, timing or PollTiming(), disagreeing, what_if)
    unknown: dict[str, set[str]] = {}
    decisions = base.collector.decisions
    for attempt in base.attempts:
        key = attempt.attempt_id
        own = decisions[key]
        step = evidence.dump_fact(attempt, own)
        if step is not None:  # the dump of `step` holds it: kept there, whatever the replay
            if own.decision is not Decision.KEPT or own.rollout_id != step:
                decisions[key] = AttemptDecision(
                    Decision.KEPT, step, retried=own.retried, gaps=own.gaps
                )
            continue
        seen = {decided(own)} | {decided(p.collector.decisions[key]) for p in others}
        possible = {decision for decision, _ in seen}
        if evidence.confirmed(attempt, own):
            continue
        steps = {own.rollout_id} | {p.collector.decisions[key].rollout_id for p in others}
        if own.decision is Decision.KEPT and len(seen) == 1 and len(steps) > 1:
            own.rollout_id = None  # kept for certain, in a step the files cannot tell
        found = possible if len(seen) > 1 else set()
        if attempt.incomplete and own.decision in FAILURES:
            found |= possible | set(FAILURE_VALUES)
            if loop == "fully":  # polled after the batch filled, or never: thrown away
                found |= {Decision.DISCARDED_SURPLUS.value, Decision.LEFTOVER.value}
        if own.rollout_id in base.unmatched:
            found |= possible | {own.decision.value, Decision.LEFTOVER.value}
        found |= evidence.plausible(attempt, own, possible)
        if evidence.missing:
            found |= evidence.left_open(attempt, own, possible)
        if found:
            unknown[key] = found
    _unknown_retried(base, limits, unknown)
    return {key: tuple(sorted(possible)) for key, possible in unknown.items()}


def _unknown_retried(base: Pass, limits: list[Pass], unknown: dict[str, set[str]]) -> None:
    """The retried flag where the retry limits that fit differ, or the decision is open
    beyond a failure."""
    decisions = base.collector.decisions
    for a in base.attempts:
        if len({p.collector.decisions[a.attempt_id].retried for p in limits}) > 1:
            decisions[a.attempt_id].retried = None
    for key, possible in unknown.items():
        if possible - set(FAILURE_VALUES):
            decisions[key].retried = None


def regrouped(run: RunLog) -> set[str]:
    """Without traj_err/ and a start rollout, the attempts of a prompt drawn more than once
    are told apart by finish times alone (:attr:`RunLog.ambiguous_attempts`): a failed
    attempt's trajectories may be grouped with another's, and neither decision is known."""
    if "traj_err" in run.sources or not run.ambiguous_attempts:
        return set()
    per_prompt = run.attempts.group_by("instance_id").agg(pl.col("attempt_id"))
    return {key for ids in per_prompt["attempt_id"].to_list() if len(ids) > 1 for key in ids}


def version_appearance(attempts: list[Attempt]) -> dict[str, tuple[float, float]]:
    """Per version, the interval in which it first reached the collector: from the earliest
    completion of an attempt carrying it to the earliest such completion known (an
    attempt short of trajectories without traj_err/ completed at its last trajectory's
    finish or later)."""
    seen: dict[str, tuple[float, float]] = {}
    for attempt in attempts:
        t = attempt.completed_at
        for _, version in attempt.end_versions:
            lo, hi = seen.get(version, (float("inf"), float("inf")))
            seen[version] = (min(lo, t), hi if attempt.incomplete else min(hi, t))
    return seen


FAILURE_CHECKS = ("retried", "failed", "rejected", "exhausted", "final_")
"""Words of the checks that count failures: without traj_err/ they cannot agree (which
attempts failed, and how, is unknown) and do not show where the replay departs."""


def departure(run: RunLog, checks: pl.DataFrame) -> int | None:
    """The first step where the replay departs from the run's own records (a dump, a
    metric, a log line; without traj_err/, the failure counts aside); -1 when a whole-run
    count (the fully-async loop's log) disagrees; None when every check agrees."""
    wrong = checks.filter(~pl.col("agrees"))
    if "traj_err" not in run.sources:
        wrong = wrong.filter(~pl.col("check").str.contains("|".join(FAILURE_CHECKS)))
    if not wrong.height:
        return None
    if wrong["step"].null_count():
        return -1
    return min(int(step) for step in wrong["step"].to_list())


FAILURES = (Decision.FAILED, Decision.REJECTED_SPAN)


FAILURE_VALUES = tuple(d.value for d in FAILURES)
