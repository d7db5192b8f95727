"""Replay Dressage's two staleness controls over a loaded log (docs/semantics.md §2-§6).

The work that does not depend on the setting (arrival order, trajectory versions,
spans, counts) is done once by :func:`prepare`; :func:`replay` then runs the
sequential collection loop for one :class:`ReplayConfig` over compact per-group values.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from analysis.engine.batching import (
    NO_VERSION,
    Collection,
    Observation,
    batch_columns,
    collect,
)
from analysis.engine.config import ReplayConfig
from analysis.engine.decisions import DECISION_NAMES, STAGE_NAMES, Decision, Outcome
from analysis.engine.prepare import PreparedLog, prepare
from analysis.engine.summary import ReplaySummary, kept_gaps, kept_trajectory_gaps, summarise
from analysis.errors import ConfigError, setting


@dataclass(frozen=True)
class ReplayResult:
    """Everything one replay produced: per-group decisions, emitted batches, summary.

    The two frames are built on first use: a sweep of many settings reads only the
    summaries of most of them.
    """

    config: ReplayConfig
    summary: ReplaySummary
    _prepared: PreparedLog = field(repr=False, compare=False)
    _observation: Observation = field(repr=False, compare=False)
    _collection: Collection = field(repr=False, compare=False)

    def __repr__(self) -> str:
        return f"ReplayResult({self.summary!r})"

    def _repr_html_(self) -> str:
        return self.summary._repr_html_()

    @functools.cached_property
    def decisions(self) -> pl.DataFrame:
        """One row per group in arrival order: decision, stage, batch, version index and gap."""
        return _decisions_frame(self._prepared, self._observation, self._collection)

    def kept_gaps(self) -> np.ndarray:
        """The version gap of every kept trajectory that has a version: the non-null
        ``version_gap`` of :func:`trajectory_outcomes`, without its frame."""
        return kept_trajectory_gaps(self._prepared, self._observation, self._collection)

    def decision_names(self, *, per: str = "group") -> pl.Series:
        """The decision of each group (arrival order), or with ``per="trajectory"`` of
        each trajectory's group (trajectories in ``prepared.trajectories`` order): the
        ``decision`` column of :attr:`decisions` and :func:`trajectory_outcomes`,
        without their frames."""
        codes = self._collection.decision
        if per == "trajectory":
            codes = codes[self._prepared.per_trajectory.arrival]
        return pl.Series("decision", codes).replace_strict(DECISION_NAMES, return_dtype=pl.String)

    def span_histograms(self) -> tuple[np.ndarray, np.ndarray]:
        """How many checked trajectories have each span (index = span): of all groups,
        and of the kept ones; the ``span`` column of :func:`trajectory_outcomes` counted
        without its frame."""
        prepared, decision = self._prepared, self._collection.decision
        return prepared.span_histogram(None), prepared.span_histogram(decision == Outcome.KEPT)

    @functools.cached_property
    def batches(self) -> pl.DataFrame:
        """One row per emitted batch."""
        return _batches_frame(self._observation, self._collection, self.config)


def resolve_config(prepared: PreparedLog, config: ReplayConfig) -> ReplayConfig:
    """Fill in ``batch_groups`` from the log's trainer steps when it was not given (docs/semantics.md §5)."""
    if config.batch_groups is not None:
        return config
    if prepared.n_groups == 0:
        # Said first: "no trainer steps" would send the user after the wrong problem.
        raise ConfigError(
            "batch_groups cannot be inferred: the log has no records (an empty input, or "
            "every record skipped); check the input, or pass "
            + setting("batch_groups", "B")
            + " to "
            "replay nothing"
        )
    if prepared.inferred_batch_groups is None:
        raise ConfigError(
            "batch_groups cannot be inferred: the log has no trainer steps (the rollout_id of "
            "a slime dump file, or metadata.dressage_return_rollout_id; a sample's own "
            "rollout_id is not one: Dressage sets it to the sample index); "
            "pass "
            + setting("batch_groups", "B")
            + " (or "
            + setting("fields", "trainer_step=PATH")
            + " "
            "if the steps are under another name)"
        )
    return ReplayConfig(
        keep_versions=config.keep_versions,
        max_preempts=config.max_preempts,
        batch_groups=prepared.inferred_batch_groups,
    )


def replay(
    log: pl.DataFrame | PreparedLog,
    config: ReplayConfig,
    *,
    order_by: str | None = None,
) -> ReplayResult:
    """Replay one setting of ``keep_versions``, ``max_preempts`` and ``batch_groups``.

    Examples
    --------
    >>> import analysis
    >>> table = analysis.records_to_table([
    ...     {"group_index": 0, "metadata": {"parent_traj_id": "a", "dressage_end_token_version": "old"}},
    ...     {"group_index": 1, "metadata": {"parent_traj_id": "b", "dressage_end_token_version": "new"}},
    ...     {"group_index": 2, "metadata": {"parent_traj_id": "c", "dressage_end_token_version": "new"}},
    ... ])
    >>> result = analysis.replay(table, analysis.ReplayConfig(keep_versions=1, batch_groups=2))
    >>> result.decisions.select("group_id", "decision", "stage", "batch").rows()
    [('0', 'dropped_stale', 'pending', None), ('1', 'kept', None, 0), ('2', 'kept', None, 0)]
    """
    prepared = log if isinstance(log, PreparedLog) else prepare(log, order_by=order_by)
    config = resolve_config(prepared, config)
    observation = prepared.observation(config.max_preempts)
    collection = collect(
        observation, keep_versions=config.keep_versions, batch_groups=config.batch_groups or 1
    )
    return ReplayResult(
        config=config,
        summary=summarise(prepared, config, observation, collection),
        _prepared=prepared,
        _observation=observation,
        _collection=collection,
    )


_BATCH_SCHEMA = {
    "batch": pl.Int64,
    "groups": pl.Int64,
    "partial": pl.Boolean,
    "current_version_index": pl.Int64,
    "cutoff_version_index": pl.Int64,
    "version_gap_mean": pl.Float64,
    "version_gap_max": pl.Int64,
    "dropped_arrival": pl.Int64,
    "dropped_pending": pl.Int64,
}


def _decisions_frame(
    prepared: PreparedLog, observation: Observation, collection: Collection
) -> pl.DataFrame:
    versioned = observation.min_index != NO_VERSION
    decided = collection.current >= 0
    gap = np.where(versioned & decided, collection.current - observation.min_index, 0)
    code = pl.Series(collection.decision)
    return prepared.groups.select("group_id", "arrival").with_columns(
        decision=code.replace_strict(DECISION_NAMES, return_dtype=pl.String),
        stage=code.replace_strict(STAGE_NAMES, return_dtype=pl.String),
        batch=pl.Series(collection.batch).replace(-1, None),
        version_index=pl.Series(observation.min_index).set(pl.Series(~versioned), None),
        version_gap=pl.Series(gap).set(pl.Series(~(versioned & decided)), None),
        samples=prepared.groups["samples"],
        trajectories=prepared.groups["trajectories"],
        tokens=prepared.groups["tokens"],
        # Of every group, rejected ones too (the observation counts only observed groups).
        versioned_trajectories=pl.Series(
            np.bincount(prepared.arrays.owner, minlength=prepared.arrays.n), dtype=pl.Int64
        ),
    )


def _batches_frame(
    observation: Observation, collection: Collection, config: ReplayConfig
) -> pl.DataFrame:
    kept, sums, _, largest = kept_gaps(observation, collection)
    rows = batch_columns(collection.batch_rows)
    emitted = len(rows)
    batch = collection.batch[kept]
    gap_sum = np.bincount(batch, weights=sums, minlength=emitted)
    gap_count = np.bincount(batch, weights=observation.versioned[kept], minlength=emitted)
    gap_max = np.full(emitted, -1, dtype=np.int64)
    np.maximum.at(gap_max, batch, largest)
    known = rows.current + 1
    gapped = gap_count > 0
    return pl.DataFrame(
        {
            "batch": np.arange(emitted, dtype=np.int64),
            "groups": rows.groups,
            "partial": rows.partial,
            "current_version_index": _valid(rows.current, known > 0),
            "cutoff_version_index": _valid(
                np.maximum(0, known - config.keep_versions),
                (known > 0) & (config.keep_versions > 0),
            ),
            "version_gap_mean": _valid(
                np.divide(gap_sum, gap_count, out=np.zeros(emitted), where=gapped), gapped
            ),
            "version_gap_max": _valid(gap_max, gapped),
            "dropped_arrival": rows.dropped_arrival,
            "dropped_pending": rows.dropped_pending,
        },
        schema=_BATCH_SCHEMA,
    )


def _valid(values: np.ndarray, valid: np.ndarray) -> pl.Series:
    """``values`` with null where not ``valid``."""
    series = pl.Series(values)
    return series if valid.all() else series.set(pl.Series(~valid), None)


def replay_many(
    log: pl.DataFrame | PreparedLog,
    configs: Sequence[ReplayConfig],
    *,
    order_by: str | None = None,
) -> list[ReplayResult]:
    """Replay several settings over one preparation of the log."""
    prepared = log if isinstance(log, PreparedLog) else prepare(log, order_by=order_by)
    return [replay(prepared, config) for config in configs]


def trajectory_outcomes(prepared: PreparedLog, result: ReplayResult) -> pl.DataFrame:
    """One row per trajectory: its group's decision, span, version index and version gap.

    The gap of a kept trajectory is the current version index when its batch was emitted
    minus the index of its own version (docs/semantics.md §3); null when it has no version or was not kept.
    """
    index = {label: position for position, label in enumerate(result.summary.versions)}
    decisions = result.decisions.select(
        "group_id",
        "decision",
        "stage",
        "batch",
        current=pl.col("version_gap") + pl.col("version_index"),
    )
    return (
        prepared.trajectories.select(
            "group_id", "trajectory_id", "arrival", "records", "tokens", "span", "version"
        )
        .join(decisions, on="group_id", how="left", maintain_order="left")
        .with_columns(
            version_index=pl.col("version").replace_strict(
                index, default=None, return_dtype=pl.Int64
            )
        )
        .with_columns(
            version_gap=pl.when(pl.col("decision") == Decision.KEPT).then(
                pl.col("current") - pl.col("version_index")
            )
        )
        .drop("current")
    )
