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

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import polars as pl

from analysis.engine.decisions import LOOP_DECISIONS, Decision, Stage
from analysis.engine.run_loop.checks import (
    at_told_k,
    disagreeing_steps,
    keep_versions_told,
    output_frames,
    self_checks,
)
from analysis.engine.run_loop.collector import AttemptDecision, PollTiming
from analysis.engine.run_loop.fully import LOOPS, ThrownAway, thrown_away
from analysis.engine.run_loop.inference import expected_starts
from analysis.engine.run_loop.readings import (
    Pass,
    one_pass,
    reproduced_by_ties,
    retried_differs,
    retry_limit,
    settle_label_orders,
)
from analysis.engine.run_loop.records import kept_groups_by_step, step_metrics
from analysis.engine.run_loop.ties import TieSearch
from analysis.engine.run_loop.unknowns import unknowns
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
    loop: str = "partial"
    """The collector loop replayed: ``partial`` or ``fully`` (docs/semantics.md §12.4)."""
    loop_reason: str = ""
    """Why that loop: what the run's files told, or the option given."""

    def __repr__(self) -> str:
        groups = self.to_dict()["groups"]
        checks = self.to_dict()["checks"]
        return (
            f"LoopReplay({self.loop} loop, K={self.keep_versions}: {groups['kept']:,} of {groups['total']:,} "
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

    def thrown_away(self) -> ThrownAway:
        """The generation the loop threw away (``discarded_surplus``; none in the partial
        loop, which puts its surplus back)."""
        return thrown_away(self.trajectories)

    def to_dict(self) -> dict[str, Any]:
        """The figures of the replay, as ``replay --json`` prints them for a run folder."""
        kept = self.trajectories.filter(pl.col("decision") == Decision.KEPT)["version_gap"]
        attempts = self.attempts
        return {
            "model": "dressage-loop",
            "loop": self.loop,
            "loop_reason": self.loop_reason,
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
            "thrown_away": self.thrown_away().to_dict(),
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


def untimed_calls(run: RunLog, final: int | None) -> bool:
    """Whether the fully loop's log leaves calls from 2 on untimed (no trainer's "weights
    updated" line before them): then where they begin is searched both ways."""
    expected = expected_starts(run.weight_updates)
    return final is None or any(r not in expected for r in range(2, final + 1))


def _check_settings(keep_versions: int, max_retries: int | None) -> None:
    for name, value in (("keep_versions", keep_versions), ("max_retries", max_retries)):
        if name == "max_retries" and value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(
                f"require `{name}` to be an integer >= 0 (found {value!r}); "
                "pass " + setting(name) + " as Dressage was run with"
            )


def resolve_loop(run: RunLog, loop: str | None) -> tuple[str, str, str | None]:
    """The loop to replay (``loop`` if given, else the run's), why, and a warning when
    nothing told it and the partial loop is assumed."""
    if loop is not None:
        if loop not in LOOPS:
            raise ConfigError(
                f"require `loop` to be one of {', '.join(LOOPS)} (found {loop!r}); pass "
                + setting("loop")
                + " as the run's rollout function was (partial_async_rollout or "
                "fully_async_rollout)"
            )
        told = "" if run.loop is None else f"; the files tell {run.loop}: {run.loop_reason}"
        return loop, f"given{told}", None
    if run.loop is not None:
        return run.loop, run.loop_reason, None
    return (
        "partial",
        "assumed: " + run.loop_reason,
        f"{run.root}: nothing tells which of Dressage's loops made the run (no worker line "
        "in dressage_log.txt, no dressage_start_rollout_id or dressage_return_* annotations); "
        "replayed as the partial loop: pass --loop fully if it ran fully_async_rollout",
    )


def replay_run(
    run: RunLog,
    *,
    keep_versions: int,
    max_retries: int | None = None,
    loop: Literal["partial", "fully"] | None = None,
    timing: PollTiming | None = None,
    ties: TieSearch | None = None,
    unknown_where_checks_disagree: bool | None = None,
    call_starts: Mapping[int, float] | None = None,
) -> LoopReplay:
    """Replay Dressage's collector loop over a run, at staleness setting ``keep_versions``
    (K; 0 = off) and ``max_retries`` (``DRESSAGE_ROLLOUT_MAX_RETRIES``; None: as the run's
    files say, else Dressage's default 2, with a note). ``ties`` bounds the search of the
    orders of near-simultaneous completions (:class:`TieSearch`; a narrower one is faster,
    ``TieSearch(swaps=0)`` keeps the files' order).

    ``loop`` is the collector loop: ``partial`` (``partial_async_rollout.py``) or
    ``fully`` (``fully_async_rollout.py``); None takes the one the run's files tell
    (:attr:`RunLog.loop`), or the partial loop with a warning when they tell none.

    Rollout calls start at the log's "starting ... rollout_id=r" times; without them (no
    log, or the fully-async loop, which logs no call start) they are inferred from the
    dumps and metrics (:func:`infer_call_starts`). Where the files leave a decision open
    (no traj_err/, no log) it is ``unknown``, with the decisions possible in ``possible``.

    ``unknown_where_checks_disagree``: the decisions of a step whose own checks (its dump,
    metrics, log lines) disagree with the replay are ``unknown`` too, but for attempts a
    dump holds (docs/semantics.md §12.5). None (the default) applies it when
    ``keep_versions`` is the K the run's metrics tell, or they tell none
    (:func:`at_told_k`); at another K the replay is a what-if whose checks are expected to
    disagree, and its decisions stay as replayed: the run's dumps neither confirm nor
    overrule them (docs/semantics.md §12.7).

    ``call_starts``: where no log line times the rollout calls (no log, or the fully-async
    loop), start them here instead of searching the cuts that reproduce the dumps (a
    what-if at another K: the starts the replay at the run's own K found, since the
    trainer's timing is the run's whatever K; :func:`replay_what_if`).
    """
    _check_settings(keep_versions, max_retries)
    timing = timing or PollTiming()
    warnings = list(run.warnings)
    loop_name, loop_reason, assumed = resolve_loop(run, loop)
    if assumed is not None:
        warnings.append(assumed)
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
        if final is not None and loop_name != "fully":  # the fully loop logs no final call
            where = (
                "no final-call line in dressage_log.txt"
                if "dressage_log.txt" in run.sources
                else "no dressage_log.txt"
            )
            warnings.append(
                f"{where}: took step {final} (the last of the dumps and metrics) as the last call"
            )

    def replay(limit: int, **reading: Any) -> Pass:
        return one_pass(
            run, keep_versions=keep_versions, max_retries=limit, timing=timing,
            final=final, loop=loop_name, ties=ties or TieSearch(), call_starts=call_starts,
            **reading,
        )  # fmt: skip

    by_limit: dict[int, Pass] = {}
    found = retry_limit(run, max_retries, by_limit, replay)
    limit = found.value
    base = by_limit.get(limit) or replay(limit)
    base = settle_label_orders(run, base, lambda orders: replay(limit, label_orders=orders))
    fitting = [by_limit[c] for c in found.fitting if c in by_limit]
    if retried_differs(base, fitting):
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
    timed = run.calls.height or call_starts  # the starts given: one reading of them
    if not timed and (loop_name != "fully" or untimed_calls(run, final)):
        others.append(replay(limit, latest_starts=True))
    collector, attempts, starts = base.collector, base.attempts, base.starts
    checks = self_checks(run, attempts, collector, starts, kept_by_step, metrics)
    reproduced_by_ties(run, base, checks, loop_name, timing)
    told = at_told_k(run.metrics, keep_versions)
    disagreeing = disagreeing_steps(checks, unknown_where_checks_disagree, told)
    possible = unknowns(
        run, base, others, fitting, checks, loop_name, timing, disagreeing=disagreeing,
        what_if=not told,
    )  # fmt: skip
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
        loop=loop_name,
        loop_reason=loop_reason,
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


def replay_what_if(
    run: RunLog,
    *,
    keep_versions: int,
    max_retries: int | None = None,
    loop: Literal["partial", "fully"] | None = None,
    own: LoopReplay | None = None,
) -> LoopReplay:
    """:func:`replay_run` as ``replay RUN -k K`` and a sweep's rows run it: at the K the
    run's metrics tell, or on a run whose log times its calls, that replay; at another K on
    a run whose calls no log line times (no log; the fully-async loop), the calls start
    where the replay at the run's own K (``own``, replayed when not given) found them,
    instead of where they would best reproduce the dumps at a K the run did not have."""
    told = keep_versions_told(run.metrics)
    if told is None or at_told_k(run.metrics, keep_versions) or run.calls.height:
        return replay_run(run, keep_versions=keep_versions, max_retries=max_retries, loop=loop)
    if own is None or own.keep_versions != told:
        own = replay_run(run, keep_versions=told, max_retries=max_retries, loop=loop)
    return replay_run(
        run, keep_versions=keep_versions, max_retries=max_retries, loop=loop,
        call_starts=own.call_starts,
    )  # fmt: skip


def keep_versions_reproducing(
    run: RunLog, *, most: int | None = None, loop: Literal["partial", "fully"] | None = None
) -> list[int]:
    """The settings of K (0 = off, up to ``most``, by default the run's distinct versions
    plus one) whose replay agrees with every self-check of the run: how a user finds, or
    confirms, the setting a run was made with."""
    labels = run.trajectories["end_version"].drop_nulls().n_unique()
    return [
        keep_versions
        for keep_versions in range(0, (labels + 1 if most is None else most) + 1)
        if replay_run(run, keep_versions=keep_versions, loop=loop).consistent
    ]
