"""One replay of Dressage's loop per reading of what a run's files leave open
(docs/semantics.md §12.3-12.5): the retry limit the files allow, attempts short of
trajectories without ``traj_err/``, call starts without the log; the attempts decided
otherwise under another reading are ``unknown``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from analysis.engine.decisions import Decision
from analysis.engine.run_loop.checks import self_checks
from analysis.engine.run_loop.collector import (
    Attempt,
    AttemptDecision,
    Collector,
    PollTiming,
    attempts_from,
    completion_order,
    kept_groups_by_step,
    logged_drops,
    step_metrics,
)
from analysis.engine.run_loop.fully import FullyCollector
from analysis.engine.run_loop.inference import (
    expected_starts,
    infer_call_starts,
    search_call_starts,
)
from analysis.engine.run_loop.ties import TieSearch, resolve_ties
from analysis.errors import MissingFieldError
from analysis.formats.dressage.retries import DEFAULT_MAX_RETRIES
from analysis.formats.dressage.run import RunLog


@dataclass
class Pass:
    """One replay of the loop under one reading of what the files leave open."""

    collector: Collector
    starts: dict[int, float]
    notes: list[str]
    unmatched: set[int]
    attempts: list[Attempt]
    ambiguous: frozenset[str] = frozenset()
    """Attempts another order of near-simultaneous completions that fits decides otherwise."""


def one_pass(
    run: RunLog,
    *,
    keep_versions: int,
    max_retries: int,
    timing: PollTiming,
    final: int | None,
    loop: str = "partial",
    ties: TieSearch | None = None,
    late_incomplete: bool = False,
    latest_starts: bool = False,
) -> Pass:
    """The loop replayed once: ``late_incomplete`` puts the attempts short of trajectories
    (no traj_err/: their last finish unknown) after every other completion;
    ``latest_starts`` takes the latest of the call starts that fit (no log)."""
    attempts = attempts_from(run)
    if late_incomplete:
        last = max((a.completed_at for a in attempts), default=0.0)
        for i, attempt in enumerate(a for a in attempts if a.incomplete):
            attempt.completed_at = last + 3600.0 + i
    kept_by_step, metrics = kept_groups_by_step(run), step_metrics(run)
    starts = (
        dict(run.calls.select("rollout_id", "started_at").iter_rows()) if run.calls.height else {}
    )
    notes: list[str] = []
    unmatched: set[int] = set()
    found: Collector | None = None  # the fully loop's search: its order and polls
    if not starts:
        if not kept_by_step and not metrics:
            raise MissingFieldError(
                f"{run.root}: no dressage_log.txt, no dumps and no metrics: the rollout calls "
                "cannot be placed among the completions; keep dressage_log.txt"
            )
        assert run.target_groups is not None
        if loop == "fully":  # it logs no call start: the cuts that reproduce the dumps
            starts, notes, found = search_call_starts(
                attempts,
                run.target_groups,
                final,
                kept_by_step,
                metrics,
                keep_versions=keep_versions,
                max_retries=max_retries,
                timing=timing,
                collector_class=FullyCollector,
                expected=expected_starts(run.weight_updates),
            )
        else:
            starts, notes = infer_call_starts(
                attempts,
                run.target_groups,
                final,
                kept_by_step,
                metrics,
                keep_versions=keep_versions,
                max_retries=max_retries,
                timing=timing,
                latest=latest_starts,
                unmatched=unmatched,
            )
    assert run.target_groups is not None
    collector = (FullyCollector if loop == "fully" else Collector)(
        completion_order(attempts, timing) if found is None else list(found.order),
        keep_versions=keep_versions, max_retries=max_retries, timing=timing,
        chains=None if found is None else (found.tie, found.poll),
    )  # fmt: skip
    resolution = resolve_ties(
        collector, starts, run.target_groups, final, kept_by_step, metrics,
        timing=timing, bounds=ties or TieSearch(), dropped_by_step=logged_drops(run),
    )  # fmt: skip
    notes += resolution.notes
    return Pass(resolution.collector, starts, notes, unmatched, attempts, resolution.ambiguous)


def agreeing(run: RunLog, done: Pass) -> int:
    checks = self_checks(
        run, done.attempts, done.collector, done.starts,
        kept_groups_by_step(run), step_metrics(run),
    )  # fmt: skip
    return int(checks["agrees"].sum())


@dataclass(frozen=True)
class Limit:
    value: int
    """The limit replayed with."""
    words: str
    """What the files allow: ``2``, ``>= 1``, ``1..3``."""
    how: str
    fitting: tuple[int, ...]
    """Every limit that fits as well (replayed when more than one)."""


def retry_limit(
    run: RunLog,
    given: int | None,
    passes: dict[int, Pass],
    replay: Callable[[int], Pass],
) -> Limit:
    """The retry limit to replay with, what the files allow, and how it was found."""
    if given is not None:
        return Limit(given, str(given), "given", (given,))
    limit = run.retry_limit
    evidence = "; ".join(limit.evidence)
    if limit.exact is not None:
        return Limit(limit.exact, str(limit.exact), "from the run's files: " + evidence,
                      (limit.exact,))  # fmt: skip
    failed = [a.retry_count for a in attempts_from(run) if a.fail_kind is not None]
    top = max(failed) + 1 if failed else limit.low
    candidates = limit.candidates(top)
    unbounded = limit.high is None
    if len(candidates) == 1:
        # every limit from here up replays alike: no failed attempt reaches it
        value = max(candidates[0], DEFAULT_MAX_RETRIES) if unbounded else candidates[0]
        words = f">= {candidates[0]}" if unbounded else str(candidates[0])
        how = "from the run's files" + (": " + evidence if evidence else "")
        if unbounded:
            how += "; no failed attempt tells a larger limit apart"
        return Limit(value, words, how, (value,))
    scores = {}
    for candidate in candidates:
        passes[candidate] = replay(candidate)
        scores[candidate] = agreeing(run, passes[candidate])
    best = [c for c in candidates if scores[c] == max(scores.values())]
    upward = unbounded and best[-1] == candidates[-1]
    words = (
        str(best[0]) if len(best) == 1 and not upward
        else f">= {best[0]}" if upward else f"{best[0]}..{best[-1]}"
    )  # fmt: skip
    how = "from the run's retry lines and metrics (the limit whose replay agrees best)"
    if len(best) == 1:
        return Limit(best[0], words, how, (best[0],))
    chosen = min(best, key=lambda c: (abs(c - DEFAULT_MAX_RETRIES), c))
    if upward and DEFAULT_MAX_RETRIES > best[-1]:
        chosen = best[-1]  # stands for every larger limit
    return Limit(chosen, words, how + f"; {words} agree alike", tuple(best))


def retried_differs(base: Pass, fitting: list[Pass]) -> bool:
    return any(
        p.collector.decisions[key].retried != d.retried
        for p in fitting
        for key, d in base.collector.decisions.items()
    )


def decided(d: AttemptDecision) -> tuple[str, str | None]:
    return d.decision.value, None if d.stage is None else d.stage.value


def unknowns(
    run: RunLog, base: Pass, others: list[Pass], limits: list[Pass], dumps_agree: bool
) -> dict[str, tuple[str, ...]]:
    """Attempts whose decision the files cannot tell, with the decisions possible: those
    that differ between readings of what the files leave open, failures of attempts short
    of trajectories without traj_err/ (span rejection or other failure), and decisions of
    calls whose start no cut of the completions reproduces (no log). Where the replay
    reproduces every dump, an attempt it keeps in the step whose dump holds it is known."""
    kept_by_step = kept_groups_by_step(run)

    def confirmed(attempt: Attempt, d: AttemptDecision) -> bool:
        return (
            (dumps_agree or d.rollout_id in base.unmatched)
            and d.decision is Decision.KEPT
            and d.rollout_id is not None
            and set(attempt.sessions) <= kept_by_step.get(d.rollout_id, set())
        )

    unknown: dict[str, set[str]] = {}
    decisions = base.collector.decisions
    for attempt in base.attempts:
        key = attempt.attempt_id
        own = decisions[key]
        seen = {decided(own)} | {decided(p.collector.decisions[key]) for p in others}
        possible = {decision for decision, _ in seen}
        if confirmed(attempt, own):
            continue
        steps = {own.rollout_id} | {p.collector.decisions[key].rollout_id for p in others}
        if own.decision is Decision.KEPT and len(seen) == 1 and len(steps) > 1:
            own.rollout_id = None  # kept for certain, in a step the files cannot tell
        if len(seen) > 1:
            unknown[key] = possible
        if attempt.incomplete and own.decision in FAILURES:
            unknown[key] = possible | {Decision.FAILED.value, Decision.REJECTED_SPAN.value}
        if own.rollout_id in base.unmatched and not confirmed(attempt, own):
            unknown[key] = possible | {own.decision.value, Decision.LEFTOVER.value}
    retried = {
        a.attempt_id
        for a in base.attempts
        if len({p.collector.decisions[a.attempt_id].retried for p in limits}) > 1
    }
    for key in retried:
        decisions[key].retried = None
    for key, possible in unknown.items():
        decisions[key].retried = None if possible - set(FAILURE_VALUES) else decisions[key].retried
    return {key: tuple(sorted(possible)) for key, possible in unknown.items()}


FAILURES = (Decision.FAILED, Decision.REJECTED_SPAN)


FAILURE_VALUES = tuple(d.value for d in FAILURES)
