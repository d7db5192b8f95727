"""One replay of Dressage's loop per reading of what a run's files leave open
(docs/semantics.md §12.3, §12.5, §12.6): the retry limit the files allow, attempts short of
trajectories without ``traj_err/``, call starts without the log; the attempts decided
otherwise under another reading are ``unknown``."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import polars as pl

from analysis.engine.run_loop.checks import self_checks
from analysis.engine.run_loop.collector import (
    FRESH_POLLS,
    Attempt,
    Collector,
    PollTiming,
    completion_order,
)
from analysis.engine.run_loop.fully import FullyCollector
from analysis.engine.run_loop.inference import (
    START_LATENCY_S,
    expected_starts,
    infer_call_starts,
    search_call_starts,
)
from analysis.engine.run_loop.records import (
    attempts_from,
    kept_groups_by_step,
    logged_drop_times,
    logged_drops,
    step_metrics,
)
from analysis.engine.run_loop.ties import TieSearch, differing, resolve_ties
from analysis.errors import MissingFieldError
from analysis.formats.dressage.retries import DEFAULT_MAX_RETRIES
from analysis.formats.dressage.run import RunLog

SEARCH_WITHOUT_FAILURES = 5_000
"""The most rollout calls the search of where the fully loop's calls begin replays in all
when ``traj_err/`` is missing (:func:`search_call_starts`' ``total``): without the failed
trajectories few steps can be reproduced, and a search that fails at one step after
another spends its per-step budget on each (35 s a replay on a run of 50 steps; the
complete runs measured need at most ~36,000 calls, cheap ones, in ~2 s)."""


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
    label_orders: Mapping[str, tuple[str, ...]] | None = None,
    call_starts: Mapping[int, float] | None = None,
) -> Pass:
    """The loop replayed once: ``late_incomplete`` puts the attempts short of trajectories
    (no traj_err/: their last finish unknown) after every other completion;
    ``latest_starts`` takes the latest of the call starts that fit (no log);
    ``call_starts`` start calls no log line times (a what-if: as the run's own K placed them);
    ``label_orders`` (attempt id -> version labels) makes the tracker meet an attempt's
    labels in that order (:func:`label_order_variants`)."""
    attempts = attempts_from(run)
    for attempt in attempts:
        order = (label_orders or {}).get(attempt.attempt_id)
        if order is not None:
            rank = {label: i for i, label in enumerate(order)}
            attempt.end_versions = tuple(
                sorted(attempt.end_versions, key=lambda e: rank.get(e[1], len(rank)))
            )
    if late_incomplete:
        last = max((a.completed_at for a in attempts), default=0.0)
        for i, attempt in enumerate(a for a in attempts if a.incomplete):
            attempt.completed_at = last + 3600.0 + i
    kept_by_step, metrics = kept_groups_by_step(run), step_metrics(run)
    calls = run.calls.select("rollout_id", "started_at")
    starts = dict(calls.iter_rows()) if run.calls.height else dict(call_starts or {})
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
                latest=latest_starts,
                unmatched=unmatched,
                total=None if "traj_err" in run.sources else SEARCH_WITHOUT_FAILURES,
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
        completion_order(attempts, timing) if found is None else unlate(found),
        keep_versions=keep_versions, max_retries=max_retries, timing=timing,
        chains=None if found is None else (found.tie, found.poll),
    )  # fmt: skip
    resolution = resolve_ties(
        collector, starts, run.target_groups, final, kept_by_step, metrics,
        timing=timing, bounds=ties or TieSearch(), dropped_by_step=logged_drops(run),
        drop_times=logged_drop_times(run),
    )  # fmt: skip
    notes += resolution.notes
    return Pass(resolution.collector, starts, notes, unmatched, attempts, resolution.ambiguous)


def unlate(found: Collector) -> list[Attempt]:
    """The start search's order with the completions it queued late back where the files
    put them, each in its own poll: the tie search, which replays every call again, finds
    its late queueings itself (one the search made for a later call would hide the
    completion from the earlier calls' search)."""
    order = [a for a in found.order if a.attempt_id not in found.late]
    for attempt in sorted(
        (found.attempts[key] for key in found.late), key=lambda a: a.completed_at
    ):
        at = next((i for i, a in enumerate(order) if a.completed_at > attempt.completed_at), None)
        order.insert(len(order) if at is None else at, attempt)
        found.poll[attempt.attempt_id] = next(FRESH_POLLS)  # a poll of its own
    return order


def label_order_variants(
    run: RunLog, base: Pass, most: int = 4
) -> list[tuple[str, tuple[str, ...]]]:
    """The other orders in which Dressage's tracker may have met the version labels of an
    attempt that brought two or more new ones at once and whose sample order the files do
    not tell (no dump holds it: a drop, a failure, surplus): the tracker numbers labels in
    order of first observation, sample by sample, so the order decides which label counts
    as the older (docs/semantics.md §12.4). At most ``most``, by completion."""
    known = dict(run.attempts.select("attempt_id", "order_known").iter_rows())
    found: list[tuple[str, tuple[str, ...]]] = []
    for attempt in sorted(base.attempts, key=lambda a: a.completed_at):
        new = base.collector.new_versions.get(attempt.attempt_id, ())
        if known.get(attempt.attempt_id, True) or len(new) < 2 or len(new) > 3:
            continue
        found += [(attempt.attempt_id, p) for p in itertools.permutations(new) if p != new]
    return found[:most]


def settle_label_orders(
    run: RunLog, base: Pass, replay: Callable[[Mapping[str, tuple[str, ...]]], Pass]
) -> Pass:
    """The pass whose label orders (:func:`label_order_variants`) reproduce the run's own
    records best, one attempt at a time; where another order reproduces them as well and
    decides an attempt otherwise, that attempt is order-ambiguous."""
    variants = label_order_variants(run, base)
    if not variants:
        return base
    score = agreeing(run, base)
    chosen: dict[str, tuple[str, ...]] = {}
    ties: list[Pass] = []
    for key, order in variants:
        trial = replay({**chosen, key: order})
        got = agreeing(run, trial)
        if got > score:
            base, score, chosen, ties = trial, got, {**chosen, key: order}, []
        elif got == score:
            ties.append(trial)
    ambiguous = set(base.ambiguous)
    for other in ties:
        ambiguous |= differing(base.collector, other.collector)
    base.ambiguous = frozenset(ambiguous)
    if chosen:
        base.notes.append(
            f"{len(chosen)} attempt(s) whose sample order the files do not tell brought two "
            "version labels at once: replayed with the order of the labels that reproduces "
            "the run's records"
        )
    return base


def reproduced_by_ties(
    run: RunLog, base: Pass, checks: pl.DataFrame, loop: str, timing: PollTiming
) -> None:
    """The fully loop's calls the start search placed where they came closest and the tie
    search then reproduced are no longer unmatched (their decisions need not be unknown),
    unless the log's weight update times the call and no start in its window (from
    ``order_uncertainty_s`` before the line to ``START_LATENCY_S`` after) takes the
    completions the placed start takes in its first poll."""
    if loop != "fully":
        return
    expected = expected_starts(run.weight_updates)
    outside = {
        r
        for r in base.unmatched
        if r in expected and r in base.starts and not _in_window(base, expected[r], r, timing)
    }
    base.unmatched &= set(checks.filter(~pl.col("agrees"))["step"].drop_nulls()) | outside


def _in_window(base: Pass, expected: float, rollout_id: int, timing: PollTiming) -> bool:
    """Whether a start in the log's window makes the cut the placed start makes."""
    placed = base.starts[rollout_id]
    nearest = min(max(placed, expected - timing.order_uncertainty_s), expected + START_LATENCY_S)
    lo, hi = sorted((placed, nearest))
    return not any(lo < a.completed_at < hi for a in base.attempts)


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
    chosen = min(best, key=lambda c: (abs(c - DEFAULT_MAX_RETRIES), c))
    if upward and DEFAULT_MAX_RETRIES > best[-1]:
        chosen = best[-1]  # stands for every larger limit
    if "traj_err" not in run.sources:
        # Without the failed trajectories a failure's time, and so the step whose retry
        # and failure counts it shows in, is a guess: a replay at the run's own limit can
        # agree with fewer checks than one at another. The best still is the one replayed,
        # but the bound said is the files' own, and every limit in it fits (a failure they
        # retry otherwise has retried null).
        return Limit(
            chosen,
            limit.words(),
            "from the run's files"
            + (": " + evidence if evidence else "")
            + f"; replayed with {chosen}, whose replay agrees best, but without traj_err/ "
            "the checks cannot rule out the others (failures' times are unknown)",
            tuple(candidates),
        )
    if len(best) == 1:
        return Limit(best[0], words, how, (best[0],))
    return Limit(chosen, words, how + f"; {words} agree alike", tuple(best))


def retried_differs(base: Pass, fitting: list[Pass]) -> bool:
    return any(
        p.collector.decisions[key].retried != d.retried
        for p in fitting
        for key, d in base.collector.decisions.items()
    )
