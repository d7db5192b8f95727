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

from dataclasses import dataclass
from typing import Any

import polars as pl

from analysis.engine.decisions import LOOP_DECISIONS, Decision, Stage
from analysis.engine.run_loop.checks import output_frames, self_checks
from analysis.engine.run_loop.collector import (
    Collector,
    PollTiming,
    attempts_from,
    completion_order,
    kept_groups_by_step,
    logged_drops,
    step_metrics,
)
from analysis.engine.run_loop.inference import infer_call_starts, resolve_ties
from analysis.errors import ConfigError, MissingFieldError, setting
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
adds :data:`RUN_TRAJECTORY_COLUMNS`' last)."""

RUN_TRAJECTORY_COLUMNS = (*TRAJECTORY_TABLE_COLUMNS, "order_ambiguous")
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
            "config": {"keep_versions": self.keep_versions},
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
        """One row per trajectory (:data:`RUN_TRAJECTORY_COLUMNS`)."""
        return self.trajectories.select(RUN_TRAJECTORY_COLUMNS)


def _check_settings(keep_versions: int, max_retries: int) -> None:
    for name, value in (("keep_versions", keep_versions), ("max_retries", max_retries)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(
                f"require `{name}` to be an integer >= 0 (found {value!r}); "
                "pass " + setting(name) + " as Dressage was run with"
            )


def replay_run(
    run: RunLog,
    *,
    keep_versions: int,
    max_retries: int = 2,
    timing: PollTiming | None = None,
) -> LoopReplay:
    """Replay Dressage's collector loop over a run, at staleness setting ``keep_versions``
    (K; 0 = off) and ``max_retries`` (``DRESSAGE_ROLLOUT_MAX_RETRIES``).

    Rollout calls start at the log's "starting ... rollout_id=r" times; without a log
    they are inferred from the dumps and metrics (:func:`infer_call_starts`).
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
    attempts = attempts_from(run)
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
    starts = (
        dict(run.calls.select("rollout_id", "started_at").iter_rows()) if run.calls.height else {}
    )
    unplaced: set[str] = set()  # decided otherwise by another start that fits the files
    if not starts:
        if not kept_by_step and not metrics:
            raise MissingFieldError(
                f"{run.root}: no dressage_log.txt, no dumps and no metrics: the rollout calls "
                "cannot be placed among the completions; keep dressage_log.txt"
            )
        starts, notes = infer_call_starts(
            attempts,
            run.target_groups,
            final,
            kept_by_step,
            metrics,
            keep_versions=keep_versions,
            max_retries=max_retries,
            timing=timing,
            ambiguous=unplaced,
        )
        warnings += notes
    collector = Collector(
        completion_order(attempts, timing),
        keep_versions=keep_versions,
        max_retries=max_retries,
        timing=timing,
    )
    resolution = resolve_ties(
        collector,
        starts,
        run.target_groups,
        final,
        kept_by_step,
        metrics,
        timing=timing,
        dropped_by_step=logged_drops(run),
    )
    collector = resolution.collector
    warnings += resolution.notes
    batches = {rollout_id: i for i, rollout_id in enumerate(sorted(starts))}
    trajectories, attempt_rows = output_frames(run, attempts, collector, batches)
    ambiguous = sorted(resolution.ambiguous | unplaced)
    trajectories = trajectories.with_columns(order_ambiguous=pl.col("group_id").is_in(ambiguous))
    attempt_rows = attempt_rows.with_columns(order_ambiguous=pl.col("group_id").is_in(ambiguous))
    checks = self_checks(run, attempts, collector, starts, kept_by_step, metrics)
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
