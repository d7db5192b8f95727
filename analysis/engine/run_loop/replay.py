"""Replay of Dressage's real collection loop over what a run left on disk.

Where ``docs/semantics.md`` §3 walks through groups one at a time, Dressage's collector
(``generate_rollout_partial_async_impl``) works poll by poll: each rollout call first takes
the whole backlog of completed attempts, later polls take what completed since; the
version tracker observes a whole poll before any of its attempts is decided, pending
groups are re-filtered once per poll, and what the call did not need goes back to the
worker's queue for the next call. :func:`replay_run` reproduces that loop (:mod:`analysis.engine.run_loop.collector`) from a
:class:`~analysis.formats.dressage.run.RunLog` and checks itself against the run's own dumps,
log lines and metrics.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import polars as pl

from analysis.engine.decisions import LOOP_DECISIONS, Decision, Stage
from analysis.engine.run_loop.checks import output_frames, self_checks
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
from analysis.engine.run_loop.inference import TieSearch, infer_call_starts, resolve_ties
from analysis.errors import ConfigError, Message, MissingFieldError, setting
from analysis.formats.dressage.retries import DEFAULT_MAX_RETRIES
from analysis.formats.dressage.run import RunLog
from analysis.table.labels import late_older_note

TRAJECTORY_TABLE_COLUMNS = (
    "trajectory_id",
    "group_id",
    "decision",
    "stage",
    "batch",
    "version_gap",
    "span",
)
"""The columns of ``replay --trajectories``, for a log and a run folder alike (a run folder
adds ``possible`` and ``order_ambiguous``: :data:`RUN_TRAJECTORY_COLUMNS`)."""

RUN_TRAJECTORY_COLUMNS = (*TRAJECTORY_TABLE_COLUMNS, "possible", "order_ambiguous")
"""The columns of ``replay RUN --trajectories``: ``order_ambiguous`` is true for a
trajectory whose decision depends on an order of near-simultaneous completions the run's
files cannot tell (docs/semantics.md §12.2)."""


RUN_DECISION_COLUMNS = (
    "group_id",
    "decision",
    "stage",
    "batch",
    "version_gap",
    "decided_in",
    "fail_kind",
    "retried",
    "span_verdict",
    "leftover",
    "possible",
    "order_ambiguous",
)
"""The columns of ``replay RUN --decisions``: one row per attempt, its gap that of its
stalest trajectory."""


@dataclass(frozen=True)
class LoopReplay:
    """The replayed decisions, per trajectory and per attempt, and the self-check.

    ``checks`` has one row per (step, check): what the run's own files say (``expected``),
    what the replay gives (``replayed``) and whether they ``agree``.
    """

    trajectories: pl.DataFrame
    attempts: pl.DataFrame
    versions: tuple[str, ...]
    checks: pl.DataFrame
    call_starts: dict[int, float]
    warnings: tuple[str, ...] = ()

    keep_versions: int = 0
    max_retries: int = DEFAULT_MAX_RETRIES
    """The retry limit replayed with (``DRESSAGE_ROLLOUT_MAX_RETRIES``)."""
    max_retries_words: str = str(DEFAULT_MAX_RETRIES)
    """What the run's files allow of it: ``2``, ``>= 1`` or ``1..3``."""
    max_retries_how: str = "given"
    """How it was found: given, or from the run's files."""

    def __repr__(self) -> str:
        groups = self.to_dict()["groups"]
        checks = self.to_dict()["checks"]
        return (
            f"LoopReplay(K={self.keep_versions}: {groups['kept']:,} of {groups['total']:,} "
            f"attempts kept; agrees with the run's files on {checks['agree']:,} of "
            f"{checks['total']:,} checks)"
        )

    def _repr_html_(self) -> str:
        """A notebook shows the attempts and their decisions."""
        return str(self.attempts._repr_html_())

    @property
    def consistent(self) -> bool:
        """Whether every self-check agrees with the run's files."""
        return bool(self.checks["agrees"].all()) if self.checks.height else True

    def to_dict(self) -> dict[str, Any]:
        """The figures of the replay, as ``replay --json`` prints them for a run folder."""
        kept = self.trajectories.filter(pl.col("decision") == Decision.KEPT)["version_gap"]
        attempts = self.attempts
        return {
            "model": "dressage-loop",
            "config": {
                "keep_versions": self.keep_versions,
                "max_retries": self.max_retries,
                "max_retries_allowed": self.max_retries_words,
                "max_retries_from": self.max_retries_how,
            },
            "groups": _counts(attempts),
            "trajectories": _counts(self.trajectories),
            "batches": {"emitted": len(self.call_starts)},
            "version_gap": {
                "min": kept.min(),
                "mean": kept.mean(),
                "max": kept.max(),
            },
            "versions_observed": len(self.versions),
            "versions": list(self.versions),
            "order_ambiguous": {
                "groups": int(attempts["order_ambiguous"].sum()),
                "trajectories": int(self.trajectories["order_ambiguous"].sum()),
            },
            "checks": {
                "total": self.checks.height,
                "agree": int(self.checks["agrees"].sum()) if self.checks.height else 0,
            },
            "notes": list(self.warnings),
        }

    def decision_table(self) -> pl.DataFrame:
        """One row per attempt (:data:`RUN_DECISION_COLUMNS`); ``version_gap`` is the
        largest gap of its trajectories (null when none has one)."""
        stalest = self.trajectories.group_by("group_id").agg(pl.col("version_gap").max())
        return self.attempts.join(stalest, on="group_id", how="left").select(RUN_DECISION_COLUMNS)

    def trajectory_table(self) -> pl.DataFrame:
        """One row per trajectory (:data:`TRAJECTORY_TABLE_COLUMNS`, and ``possible``: the
        decisions an ``unknown`` row may have, joined by ``|``)."""
        return self.trajectories.select(RUN_TRAJECTORY_COLUMNS)


def _check_settings(keep_versions: int, max_retries: int | None) -> None:
    for name, value in (("keep_versions", keep_versions), ("max_retries", max_retries)):
        if name == "max_retries" and value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(
                f"require `{name}` to be an integer >= 0 (found {value!r}); "
                "pass " + setting(name) + " as Dressage was run with"
            )


@dataclass
class _Pass:
    """One replay of the loop under one reading of what the files leave open."""

    collector: Collector
    starts: dict[int, float]
    notes: list[str]
    unmatched: set[int]
    attempts: list[Attempt]
    ambiguous: frozenset[str] = frozenset()
    """Attempts another order of near-simultaneous completions that fits decides otherwise."""


def _one_pass(
    run: RunLog,
    *,
    keep_versions: int,
    max_retries: int,
    timing: PollTiming,
    final: int | None,
    ties: TieSearch,
    late_incomplete: bool = False,
    latest_starts: bool = False,
) -> _Pass:
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
    if not starts:
        if not kept_by_step and not metrics:
            raise MissingFieldError(
                f"{run.root}: no dressage_log.txt, no dumps and no metrics: the rollout calls "
                "cannot be placed among the completions; keep dressage_log.txt"
            )
        assert run.target_groups is not None
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
    collector = Collector(
        completion_order(attempts, timing),
        keep_versions=keep_versions, max_retries=max_retries, timing=timing,
    )  # fmt: skip
    resolution = resolve_ties(
        collector, starts, run.target_groups, final, kept_by_step, metrics,
        timing=timing, bounds=ties, dropped_by_step=logged_drops(run),
    )  # fmt: skip
    notes += resolution.notes
    return _Pass(resolution.collector, starts, notes, unmatched, attempts, resolution.ambiguous)


def _agreeing(run: RunLog, done: _Pass) -> int:
    checks = self_checks(
        run, done.attempts, done.collector, done.starts,
        kept_groups_by_step(run), step_metrics(run),
    )  # fmt: skip
    return int(checks["agrees"].sum())


@dataclass(frozen=True)
class _Limit:
    value: int
    """The limit replayed with."""
    words: str
    """What the files allow: ``2``, ``>= 1``, ``1..3``."""
    how: str
    fitting: tuple[int, ...]
    """Every limit that fits as well (replayed when more than one)."""


def _retry_limit(
    run: RunLog,
    given: int | None,
    passes: dict[int, _Pass],
    replay: Callable[[int], _Pass],
) -> _Limit:
    """The retry limit to replay with, what the files allow, and how it was found."""
    if given is not None:
        return _Limit(given, str(given), "given", (given,))
    limit = run.retry_limit
    evidence = "; ".join(limit.evidence)
    if limit.exact is not None:
        return _Limit(limit.exact, str(limit.exact), "from the run's files: " + evidence,
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
        return _Limit(value, words, how, (value,))
    scores = {}
    for candidate in candidates:
        passes[candidate] = replay(candidate)
        scores[candidate] = _agreeing(run, passes[candidate])
    best = [c for c in candidates if scores[c] == max(scores.values())]
    upward = unbounded and best[-1] == candidates[-1]
    words = (
        str(best[0]) if len(best) == 1 and not upward
        else f">= {best[0]}" if upward else f"{best[0]}..{best[-1]}"
    )  # fmt: skip
    how = "from the run's retry lines and metrics (the limit whose replay agrees best)"
    if len(best) == 1:
        return _Limit(best[0], words, how, (best[0],))
    chosen = min(best, key=lambda c: (abs(c - DEFAULT_MAX_RETRIES), c))
    if upward and DEFAULT_MAX_RETRIES > best[-1]:
        chosen = best[-1]  # stands for every larger limit
    return _Limit(chosen, words, how + f"; {words} agree alike", tuple(best))


def _retried_differs(base: _Pass, fitting: list[_Pass]) -> bool:
    return any(
        p.collector.decisions[key].retried != d.retried
        for p in fitting
        for key, d in base.collector.decisions.items()
    )


def _decided(d: AttemptDecision) -> tuple[str, str | None]:
    return d.decision.value, None if d.stage is None else d.stage.value


def _unknowns(
    run: RunLog, base: _Pass, others: list[_Pass], limits: list[_Pass], dumps_agree: bool
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
        seen = {_decided(own)} | {_decided(p.collector.decisions[key]) for p in others}
        possible = {decision for decision, _ in seen}
        if confirmed(attempt, own):
            continue
        steps = {own.rollout_id} | {p.collector.decisions[key].rollout_id for p in others}
        if own.decision is Decision.KEPT and len(seen) == 1 and len(steps) > 1:
            own.rollout_id = None  # kept for certain, in a step the files cannot tell
        if len(seen) > 1:
            unknown[key] = possible
        if attempt.incomplete and own.decision in _FAILURES:
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
        decisions[key].retried = None if possible - set(_FAILURE_VALUES) else decisions[key].retried
    return {key: tuple(sorted(possible)) for key, possible in unknown.items()}


def replay_run(
    run: RunLog,
    *,
    keep_versions: int,
    max_retries: int | None = None,
    timing: PollTiming | None = None,
    ties: TieSearch | None = None,
) -> LoopReplay:
    """Replay Dressage's collector loop over a run, at staleness setting ``keep_versions``
    (K; 0 = off) and ``max_retries`` (``DRESSAGE_ROLLOUT_MAX_RETRIES``; None: as the run's
    files say, else Dressage's default 2, with a note). ``ties`` bounds the search of the
    orders of near-simultaneous completions (:class:`TieSearch`; a narrower one is faster,
    ``TieSearch(swaps=0)`` keeps the files' order).

    Rollout calls start at the log's "starting ... rollout_id=r" times; without a log
    they are inferred from the dumps and metrics (:func:`infer_call_starts`). Where the
    files leave a decision open (no traj_err/, no log) it is ``unknown``, with the
    decisions possible in ``possible``.
    """
    _check_settings(keep_versions, max_retries)
    timing = timing or PollTiming()
    warnings = list(run.warnings)
    if run.target_groups is None:
        raise MissingFieldError(
            f"{run.root}: the batch size (target groups per step) is found in none of: "
            "dressage_log.txt ('starting Dressage partial async rollout' lines), the metrics "
            "(dressage/partial_rollout_target_groups), a step's dump (rollout_data/*.pt or "
            "rollouts.jsonl); put one of them, as the run wrote it, in the run folder"
        )
    kept_by_step, metrics = kept_groups_by_step(run), step_metrics(run)
    final = run.final_rollout_id
    if final is None:
        steps = set(kept_by_step) | set(metrics)
        final = max(steps) if steps else None
        if final is not None:
            where = (
                "no final-call line in dressage_log.txt"
                if "dressage_log.txt" in run.sources
                else "no dressage_log.txt"
            )
            warnings.append(
                f"{where}: took step {final} (the last of the dumps and metrics) as the last call"
            )

    def replay(limit: int, **reading: bool) -> _Pass:
        return _one_pass(
            run, keep_versions=keep_versions, max_retries=limit, timing=timing,
            final=final, ties=ties or TieSearch(), **reading,
        )  # fmt: skip

    by_limit: dict[int, _Pass] = {}
    found = _retry_limit(run, max_retries, by_limit, replay)
    limit = found.value
    base = by_limit.get(limit) or replay(limit)
    fitting = [by_limit[c] for c in found.fitting if c in by_limit]
    if _retried_differs(base, fitting):
        warnings.append(
            Message(
                f"the retry limit (DRESSAGE_ROLLOUT_MAX_RETRIES) is not told by the run's files "
                f"({found.words} fit alike): replayed with {limit}, and the retried flag of "
                "the failures it decides is unknown; pass "
            )
            + setting("max_retries")
            + " to give the run's own"
        )
    warnings += base.notes
    others = []
    if any(a.incomplete for a in base.attempts):
        others.append(replay(limit, late_incomplete=True))
    if not run.calls.height:
        others.append(replay(limit, latest_starts=True))
    collector, attempts, starts = base.collector, base.attempts, base.starts
    checks = self_checks(run, attempts, collector, starts, kept_by_step, metrics)
    dumps_agree = bool(checks.filter(pl.col("check") == "kept_groups")["agrees"].all())
    possible = _unknowns(run, base, others, fitting, dumps_agree)
    for key in possible:
        d = collector.decisions[key]
        collector.decisions[key] = AttemptDecision(
            Decision.UNKNOWN, None, retried=d.retried, leftover=None
        )
    if possible:
        warnings.append(
            f"{len(possible)} attempt(s) have decision 'unknown': the run's files cannot tell "
            "them (see the warnings above on missing files); their possible decisions are "
            "in the column 'possible'"
        )
    batches = {rollout_id: i for i, rollout_id in enumerate(sorted(starts))}
    trajectories, attempt_rows = output_frames(
        run, attempts, collector, batches, possible, base.ambiguous
    )
    late = late_older_note(collector.tracker.versions, keep_versions)
    if late is not None:
        warnings.append(late)
    return LoopReplay(
        trajectories=trajectories,
        attempts=attempt_rows,
        versions=tuple(collector.tracker.versions),
        checks=checks,
        call_starts=starts,
        warnings=tuple(warnings),
        keep_versions=keep_versions,
        max_retries=limit,
        max_retries_words=found.words,
        max_retries_how=found.how,
    )


def _counts(frame: pl.DataFrame) -> dict[str, int]:
    """How many rows have each decision (all five, zeros included), and stale drops by stage."""
    counts = dict.fromkeys(LOOP_DECISIONS, 0)
    counts.update(frame.group_by("decision").len().iter_rows())
    # Both stages, zeros included, in one order: value_counts' order is not fixed, and a
    # stage without drops left its key out (the JSON's shape changed from run to run).
    stale = frame.filter(pl.col("decision") == Decision.DROPPED_STALE)["stage"].to_list()
    for stage in Stage:
        counts[f"{Decision.DROPPED_STALE}_{stage}"] = stale.count(stage.value)
    return {"total": frame.height, **counts}


_FAILURES = (Decision.FAILED, Decision.REJECTED_SPAN)
_FAILURE_VALUES = tuple(d.value for d in _FAILURES)


def keep_versions_reproducing(run: RunLog, *, most: int | None = None) -> list[int]:
    """The settings of K (0 = off, up to ``most``, by default the run's distinct versions
    plus one) whose replay agrees with every self-check of the run: how a user finds, or
    confirms, the setting a run was made with."""
    labels = run.trajectories["end_version"].drop_nulls().n_unique()
    return [
        keep_versions
        for keep_versions in range(0, (labels + 1 if most is None else most) + 1)
        if replay_run(run, keep_versions=keep_versions).consistent
    ]
