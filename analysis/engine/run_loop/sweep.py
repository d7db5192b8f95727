"""A run folder's settings compared on Dressage's own loop: one :func:`replay_run` per K,
read as the sweep's rows and the figures' replays (docs/semantics.md §12.7).

Each row at K is the replay ``replay RUN -k K`` gives, so the row at the run's own setting
is that replay's figures. M is not a setting of the run loop (the run's span rejections
are on disk): a row at another M than the run's says so (``max_preempts_applied``), and
is never Pareto-efficient. A row at another K than the run's is a what-if over the
attempts the run made; how much of it rests on attempts the run did not make is in its
``unfilled_batches``, ``groups_short`` and ``unneeded_attempts``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import polars as pl

from analysis.engine.config import ReplayConfig
from analysis.engine.decisions import Decision, Stage
from analysis.engine.grid import SWEEP_SCHEMA, KeptReplays, SweepResult, pareto_front
from analysis.engine.run_loop.checks import at_told_k, keep_versions_told
from analysis.engine.run_loop.replay import LoopReplay, replay_what_if
from analysis.formats.dressage.run import RunLog

RUN_LOOP_ENGINE = "dressage-loop"
"""The ``engine`` of a row, a replay or a figure of a run folder on Dressage's own loop."""

RUN_SWEEP_SCHEMA: dict[str, Any] = {
    **SWEEP_SCHEMA,
    "loop": pl.String,
    "leftover_pct": pl.Float64,
    "discarded_surplus_pct": pl.Float64,
    "unknown_pct": pl.Float64,
    "own_setting": pl.Boolean,
    "max_preempts_applied": pl.Boolean,
    "max_preempts_replayed": pl.Int64,
    "unfilled_batches": pl.Int64,
    "groups_short": pl.Int64,
    "unneeded_attempts": pl.Int64,
}
"""A run folder's sweep rows: the sweep's columns, then what only the run loop has
(docs/semantics.md §12.7)."""


@dataclass(frozen=True)
class LoopSetting:
    """One K of a run folder replayed on Dressage's loop, read as the figures read a
    replay (:class:`~analysis.engine.results.ReplayResult`'s ``config``, ``kept_gaps``,
    ``span_histograms``, ``batches``): ``replay`` is :func:`replay_run`'s result. In a
    sweep, ``config`` is the row's (K, M): the replay is the run's own M whatever M says
    (the row's ``max_preempts_applied``)."""

    replay: LoopReplay
    config: ReplayConfig
    """K as replayed; M the run's own (None: off, or not told by any span rejection), or
    in a sweep the row's; B the run's."""
    segments: pl.DataFrame
    """Records (segments) per trajectory: ``trajectory_id``, ``segments``."""

    def __repr__(self) -> str:
        return f"LoopSetting({self.replay!r})"

    @property
    def engine(self) -> str:
        return RUN_LOOP_ENGINE

    @property
    def n_trajectories(self) -> int:
        return self.replay.trajectories.height

    @property
    def notes(self) -> tuple[str, ...]:
        return self.replay.warnings

    def _kept(self) -> pl.DataFrame:
        return self.replay.trajectories.filter(pl.col("decision") == Decision.KEPT)

    def kept_gaps(self) -> np.ndarray:
        """The version gap of every kept trajectory that has one."""
        return self._kept()["version_gap"].drop_nulls().to_numpy().astype(np.int64)

    def span_histograms(self) -> tuple[np.ndarray, np.ndarray]:
        """Trajectories per span (index = span), of every attempt and of the kept ones."""
        spans = self.replay.trajectories["span"].drop_nulls().to_numpy().astype(np.int64)
        kept = self._kept()["span"].drop_nulls().to_numpy().astype(np.int64)
        size = int(spans.max()) + 1 if spans.size else 0
        return np.bincount(spans, minlength=size), np.bincount(kept, minlength=size)

    @property
    def batches(self) -> pl.DataFrame:
        """One row per rollout call (a trainer step): its kept groups, their gaps, the
        stale drops decided in it, and the tracker's indices at its end as the replay
        gives them (the columns the timeline reads, and ``groups``/``short``)."""
        replay, batch_groups = self.replay, self.config.batch_groups or 0
        steps = sorted(replay.call_starts)
        kept = (
            self._kept()
            .group_by("batch")
            .agg(
                version_gap_mean=pl.col("version_gap").mean(),
                version_gap_max=pl.col("version_gap").max(),
            )
        )
        attempts = replay.attempts
        groups = dict(
            attempts.filter(pl.col("decision") == Decision.KEPT).group_by("batch").len().iter_rows()
        )
        stale = attempts.filter(pl.col("decision") == Decision.DROPPED_STALE)
        drops = {
            stage: dict(
                stale.filter(pl.col("stage") == stage).group_by("decided_in").len().iter_rows()
            )
            for stage in (Stage.ARRIVAL.value, Stage.PENDING.value)
        }
        index = _replayed_metric(replay.checks)
        frame = pl.DataFrame(
            {
                "batch": list(range(len(steps))),
                "rollout_id": steps,
                "groups": [groups.get(i, 0) for i in range(len(steps))],
                "dropped_arrival": [drops[Stage.ARRIVAL.value].get(s, 0) for s in steps],
                "dropped_pending": [drops[Stage.PENDING.value].get(s, 0) for s in steps],
                "current_version_index": [index("current", s) for s in steps],
                "cutoff_version_index": [index("cutoff", s) for s in steps],
            },
            schema={
                "batch": pl.Int64,
                "rollout_id": pl.Int64,
                "groups": pl.Int64,
                "dropped_arrival": pl.Int64,
                "dropped_pending": pl.Int64,
                "current_version_index": pl.Int64,
                "cutoff_version_index": pl.Int64,
            },
        )
        return frame.join(kept.cast({"batch": pl.Int64}), on="batch", how="left").with_columns(
            short=pl.max_horizontal(pl.lit(batch_groups) - pl.col("groups"), pl.lit(0))
        )

    def figures(self) -> dict[str, Any]:
        """The sweep row's figures of this K (shares of every attempt, trajectory, record
        and response token of the run, as ``replay RUN`` counts them)."""
        trajectories = self.replay.trajectories.join(self.segments, on="trajectory_id", how="left")
        attempts = self.replay.attempts
        kept = trajectories.filter(pl.col("decision") == Decision.KEPT)
        # a failed trajectory's record may give no tokens: 0, as thrown_away counts them
        tokens_known = trajectories["response_tokens"].null_count() < trajectories.height
        weights = kept["response_tokens"].fill_null(0).cast(pl.Float64)

        def share(frame: pl.DataFrame, decision: str, stage: str | None = None) -> float | None:
            if not frame.height:
                return None
            chosen = frame.filter(pl.col("decision") == decision)
            if stage is not None:
                chosen = chosen.filter(pl.col("stage") == stage)
            return 100.0 * chosen.height / frame.height

        def weighted(column: str) -> float | None:
            values = kept[column].cast(pl.Float64)
            known = values.is_not_null() & (weights > 0)
            total = float(weights.filter(known).sum())
            if not tokens_known or not total:
                return None
            return float((values.filter(known) * weights.filter(known)).sum()) / total

        records = float(trajectories["segments"].fill_null(1).sum())
        kept_records = float(kept["segments"].fill_null(1).sum())
        all_tokens = (
            float(trajectories["response_tokens"].fill_null(0).sum()) if tokens_known else None
        )
        kept_tokens = float(weights.sum())
        batches = self.batches
        return {
            "groups_kept_pct": share(attempts, Decision.KEPT),
            "samples_kept_pct": 100.0 * kept_records / records if records else None,
            "tokens_kept_pct": 100.0 * kept_tokens / all_tokens if all_tokens else None,
            "dropped_stale_pct": share(attempts, Decision.DROPPED_STALE),
            "dropped_arrival_pct": share(attempts, Decision.DROPPED_STALE, Stage.ARRIVAL.value),
            "dropped_pending_pct": share(attempts, Decision.DROPPED_STALE, Stage.PENDING.value),
            "rejected_span_pct": share(attempts, Decision.REJECTED_SPAN),
            "failed_pct": share(attempts, Decision.FAILED),
            "batches_emitted": len(self.replay.call_starts),
            "version_gap_mean": kept["version_gap"].mean(),
            "version_gap_max": kept["version_gap"].max(),
            "version_span_mean": kept["span"].mean(),
            "version_span_max": kept["span"].max(),
            "version_gap_mean_tokens": weighted("version_gap"),
            "version_span_mean_tokens": weighted("span"),
            "loop": self.replay.loop,
            "leftover_pct": share(attempts, Decision.LEFTOVER),
            "discarded_surplus_pct": share(attempts, Decision.DISCARDED_SURPLUS),
            "unknown_pct": share(attempts, Decision.UNKNOWN),
            "unfilled_batches": int((batches["short"] > 0).sum()),
            "groups_short": int(batches["short"].sum()),
        }


def _replayed_metric(checks: pl.DataFrame) -> Callable[[str, int], int | None]:
    """The tracker's current or cutoff index the replay gives at the end of a step."""
    rows = checks.filter(
        pl.col("check").is_in(["staleness/current_version_index", "staleness/cutoff_version_index"])
    )
    found: dict[tuple[str, int], int | None] = {}
    for step, check, replayed in rows.select("step", "check", "replayed").iter_rows():
        which = "current" if check.endswith("current_version_index") else "cutoff"
        found[which, step] = None if replayed in (None, "") else int(float(replayed))
    return lambda which, step: found.get((which, step))


RunSettings = KeptReplays[LoopSetting]
"""The replays of a run folder's sweep, one per row."""


def _leftover(replay: LoopReplay) -> int:
    """Attempts the run made that the replay leaves unconsumed (leftover)."""
    return int((replay.attempts["decision"] == Decision.LEFTOVER).sum())


def own_max_preempts(run: RunLog) -> tuple[bool, int | None]:
    """Whether the run's files tell its M, and which: the one ``max_preempts`` its span
    rejections name (None, off or unknown, when they name none)."""
    named = run.max_preempts
    return len(named) <= 1, (named[0] if named else None)


def setting_of(run: RunLog, replay: LoopReplay) -> LoopSetting:
    """A run-loop replay as a setting the figures read."""
    _, own_m = own_max_preempts(run)
    segments = run.trajectories.select("trajectory_id", "segments")
    config = ReplayConfig(
        keep_versions=replay.keep_versions, max_preempts=own_m, batch_groups=run.target_groups
    )
    return LoopSetting(replay, config, segments)


def sweep_run(
    run: RunLog,
    *,
    keep_versions: Sequence[int],
    max_preempts: Sequence[int | None],
    loop: Literal["partial", "fully"] | None = None,
    max_retries: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> SweepResult:
    """Replay a run folder on Dressage's loop at every K (:func:`replay_what_if`, as
    ``replay RUN -k K`` does), one row per (K, M); rows ordered by M then K. Rows at another M
    than the run's carry ``max_preempts_applied`` false (the loop replays the run's own
    span rejections) and are not Pareto-efficient; no ``max_preempts`` at all: the run's
    own M (as its span rejections name it; none when they name none)."""
    m_known, own_m = own_max_preempts(run)
    ks = list(dict.fromkeys(keep_versions))
    ms = list(dict.fromkeys(max_preempts)) or [own_m]
    told = keep_versions_told(run.metrics)
    replayed: dict[int, LoopSetting] = {}
    # the run's own K first: a what-if's calls start where it found them (replay_what_if)
    wanted = ([told] if told is not None else []) + [k for k in ks if k != told]
    for done, k in enumerate(wanted, start=1):
        own = replayed[told].replay if told in replayed else None
        replayed[k] = setting_of(
            run,
            replay_what_if(run, keep_versions=k, loop=loop, max_retries=max_retries, own=own),
        )
        if progress is not None:
            progress(done, len(wanted))
    own_leftover = None if told is None else _leftover(replayed[told].replay)
    rows, settings = [], []
    notes: dict[str, None] = {}
    for m, k in itertools.product(ms, ks):
        setting = replayed[k]
        figures = setting.figures()
        applied = m_known and m == own_m
        at_own_k = told is not None and at_told_k(run.metrics, k)
        unneeded = (
            None if own_leftover is None else max(0, _leftover(setting.replay) - own_leftover)
        )
        rows.append(
            {
                "keep_versions": k,
                "max_preempts": m,
                "batch_groups": run.target_groups,
                **figures,
                "pareto": False,
                "engine": RUN_LOOP_ENGINE,
                "own_setting": None if told is None else at_own_k and applied,
                "max_preempts_applied": applied,
                "max_preempts_replayed": own_m,
                "unneeded_attempts": unneeded,
            }
        )
        settings.append(
            LoopSetting(
                setting.replay,
                ReplayConfig(keep_versions=k, max_preempts=m, batch_groups=run.target_groups),
                setting.segments,
            )
        )
        if told is None or at_own_k:  # a what-if's checks are expected to disagree
            notes.update(dict.fromkeys(setting.replay.warnings))
    frame = pl.DataFrame(rows, schema=RUN_SWEEP_SCHEMA)
    applied_rows = frame["max_preempts_applied"]
    front = pareto_front(frame.filter(applied_rows)) if frame.height else []
    marks = iter(front)
    pareto = [bool(next(marks)) if applied else False for applied in applied_rows.to_list()]
    frame = frame.with_columns(pareto=pl.Series(pareto, dtype=pl.Boolean))
    return SweepResult(
        rows=frame, results=RunSettings(settings), notes=tuple(notes), engine=RUN_LOOP_ENGINE
    )
