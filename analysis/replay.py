"""Replay Dressage's two staleness controls over a loaded log (SPEC §2-§6).

The work that does not depend on the setting (arrival order, trajectory versions,
spans, counts) is done once by :func:`prepare`; :func:`replay` then runs the
sequential collection loop for one :class:`ReplayConfig` over compact per-group values.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from analysis.engine import (
    DROPPED_ARRIVAL,
    DROPPED_PENDING,
    FAILED,
    KEPT,
    NO_VERSION,
    REJECTED,
    Collection,
    GroupArrays,
    Observation,
    collect,
    group_arrays,
    observe,
)
from analysis.errors import ConfigError, MissingFieldError
from analysis.labels import real_label

DECISIONS = ("kept", "dropped_stale", "rejected_span", "failed")


@dataclass(frozen=True)
class ReplayConfig:
    """One setting of the two controls and the trainer batch size, validated on construction.

    Examples
    --------
    >>> ReplayConfig(keep_versions=2, max_preempts=None, batch_groups=8).keep_versions
    2
    >>> ReplayConfig(keep_versions=-1)
    Traceback (most recent call last):
    ...
    analysis.errors.ConfigError: require `keep_versions` >= 0 (found -1); pass --keep-versions 0 to disable the batch-level control
    """

    keep_versions: int = 0
    max_preempts: int | None = None
    batch_groups: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.keep_versions, bool) or not isinstance(self.keep_versions, int):
            raise ConfigError(
                f"require `keep_versions` to be an integer (found {self.keep_versions!r})"
            )
        if self.keep_versions < 0:
            raise ConfigError(
                f"require `keep_versions` >= 0 (found {self.keep_versions}); "
                "pass --keep-versions 0 to disable the batch-level control"
            )
        if self.max_preempts is not None and (
            isinstance(self.max_preempts, bool)
            or not isinstance(self.max_preempts, int)
            or self.max_preempts < 0
        ):
            raise ConfigError(
                f"require `max_preempts` >= 0 or none (found {self.max_preempts!r}); "
                "pass --max-preempts none to disable the partial-rollout control"
            )
        if self.batch_groups is not None and (
            isinstance(self.batch_groups, bool)
            or not isinstance(self.batch_groups, int)
            or self.batch_groups < 1
        ):
            raise ConfigError(
                f"require `batch_groups` >= 1 (found {self.batch_groups!r}); "
                "pass --batch-groups with the number of GRPO groups per trainer step"
            )

    def describe(self) -> str:
        """``K=2, M=none, B=8``, for titles and legends."""
        limit = "none" if self.max_preempts is None else self.max_preempts
        return f"K={self.keep_versions}, M={limit}, B={self.batch_groups}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "keep_versions": self.keep_versions,
            "max_preempts": self.max_preempts,
            "batch_groups": self.batch_groups,
        }


@dataclass(frozen=True)
class PreparedLog:
    """Setting-independent facts of a log, one row per group (arrival order) and per trajectory."""

    groups: pl.DataFrame
    trajectories: pl.DataFrame
    tokens_known: bool
    inferred_batch_groups: int | None
    _cache: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def n_groups(self) -> int:
        return self.groups.height

    @property
    def arrays(self) -> GroupArrays:
        """The groups as flat arrays for the collection loop (computed once)."""
        if "arrays" not in self._cache:
            self._cache["arrays"] = group_arrays(self.groups, self.trajectories)
        return self._cache["arrays"]

    def observation(self, max_preempts: int | None) -> Observation:
        """Observation order under one ``max_preempts`` (computed once per value)."""
        key = ("observation", max_preempts)
        if key not in self._cache:
            self._cache[key] = observe(self.arrays, max_preempts)
        return self._cache[key]


def prepare(table: pl.DataFrame, *, order_by: str | None = None) -> PreparedLog:
    """Compute per-group and per-trajectory facts that no setting changes.

    ``order_by`` names a column whose per-group maximum (the moment the group was
    complete) orders arrival instead of first appearance; ties keep first appearance.
    """
    if order_by is not None and order_by not in table.columns:
        raise MissingFieldError(
            f"no column {order_by!r} to order arrival by (columns: {', '.join(table.columns)}); "
            "pass --order-by with a field that the log has"
        )
    rows = table.select(*_PREPARE_COLUMNS, *([order_by] if order_by else [])).with_row_index("row")
    rows = rows.with_columns(
        pl.col("row").cast(pl.Int64),
        response_tokens=pl.coalesce("response_length", "loss_mask_length"),
        # Integer keys: grouping and joining a million rows on strings costs several times more.
        group_key=pl.col("group_id").cast(pl.Categorical).to_physical().cast(pl.Int64),
    )
    groups = rows.group_by("group_key").agg(
        group_id=pl.col("group_id").first(),
        first_row=pl.col("row").min(),
        samples=pl.len().cast(pl.Int64),
        tokens=pl.when(pl.col("response_tokens").null_count() == 0).then(
            pl.col("response_tokens").sum()
        ),
        failed=(pl.col("status") == "aborted").any(),
        **({"order_key": pl.col(order_by).max()} if order_by else {}),
    )
    groups = groups.sort(*(["order_key"] if order_by else []), "first_row", nulls_last=True)
    groups = groups.with_row_index("arrival").with_columns(pl.col("arrival").cast(pl.Int64))

    trajectories = _trajectory_facts(rows).join(
        groups.select("group_key", "arrival"), on="group_key"
    )
    per_group = trajectories.group_by("group_key").agg(
        trajectories=pl.len().cast(pl.Int64), max_switches=pl.col("switches").max()
    )
    # One version per versioned trajectory, in order of first appearance (SPEC §2).
    versioned = (
        trajectories.filter(pl.col("version").is_not_null())
        .sort("first_versioned_row")
        .group_by("group_key", maintain_order=True)
        .agg(trajectory_versions=pl.col("version"))
    )
    groups = (
        groups.join(per_group, on="group_key", how="left", maintain_order="left")
        .join(versioned, on="group_key", how="left", maintain_order="left")
        .with_columns(pl.col("trajectory_versions").fill_null([]))
        .select(
            "arrival",
            "group_id",
            "samples",
            "trajectories",
            pl.exclude("arrival", "group_id", "samples", "trajectories", "group_key", "first_row"),
        )
    )
    return PreparedLog(
        groups=groups,
        trajectories=trajectories.sort("first_row").drop("group_key"),
        tokens_known=rows.height == 0 or rows["response_tokens"].null_count() == 0,
        inferred_batch_groups=_infer_batch_groups(rows),
    )


_PREPARE_COLUMNS = (
    "group_id", "trajectory_id", "segment_index", "end_version", "version_spans", "status",
    "response_length", "loss_mask_length", "trainer_step",
)  # fmt: skip


def real_token_labels(rows: pl.DataFrame, *, by: str) -> pl.DataFrame:
    """(``by``, label) for every real token-version label of each record, normalised.

    Labels are few, so realness is decided once per distinct label, not once per span.
    """
    exploded = (
        rows.filter(pl.col("version_spans").is_not_null())
        .select(by, label=pl.col("version_spans").list.eval(pl.element().struct.field("version")))
        .explode("label")
    )
    distinct = exploded["label"].drop_nulls().unique().to_list()
    mapping = {label: real_label(label) for label in distinct}
    return exploded.with_columns(
        pl.col("label").replace_strict(mapping, default=None, return_dtype=pl.String)
    ).drop_nulls("label")


def _trajectory_facts(rows: pl.DataFrame) -> pl.DataFrame:
    """Per trajectory: its group, version (SPEC §2), span and switches (SPEC §4).

    A trajectory is (group, trajectory id); a record without an id is its own. Most
    trajectories have one record: their facts are that record's, read without grouping;
    only the others are grouped.
    """
    valid = pl.col("trajectory_id").is_not_null() & pl.col("end_version").is_not_null()
    labels = real_token_labels(rows, by="row")
    single_record = (
        pl.col("trajectory_id").is_null() | pl.struct("group_key", "trajectory_id").is_unique()
    )
    flagged = rows.with_columns(single=single_record)
    single = (
        flagged.filter("single")
        .select(
            "group_key",
            "group_id",
            "trajectory_id",
            first_row="row",
            records=pl.lit(1, dtype=pl.Int64),
            tokens="response_tokens",
            has_token_versions=pl.col("version_spans").is_not_null(),
            version=pl.when(valid).then("end_version"),
            first_versioned_row=pl.when(valid).then("row"),
        )
        .join(
            labels.group_by("row").agg(real_labels=pl.col("label").n_unique().cast(pl.Int64)),
            left_on="first_row",
            right_on="row",
            how="left",
        )
    )
    multi_rows = flagged.filter(~pl.col("single"))
    keys = ["group_key", "trajectory_id"]
    multi = (
        multi_rows.group_by(keys)
        .agg(
            group_id=pl.col("group_id").first(),
            first_row=pl.col("row").min(),
            records=pl.len().cast(pl.Int64),
            tokens=pl.when(pl.col("response_tokens").null_count() == 0).then(
                pl.col("response_tokens").sum()
            ),
            has_token_versions=pl.col("version_spans").is_not_null().any(),
        )
        # The record with the highest (segment_index, position in the group) gives the
        # version; within a group, row order is position order.
        .join(
            multi_rows.filter(valid)
            .group_by(keys)
            .agg(
                version=pl.col("end_version").sort_by("segment_index", "row").last(),
                first_versioned_row=pl.col("row").min(),
            ),
            on=keys,
            how="left",
        )
        .join(
            labels.join(multi_rows.select("row", *keys), on="row")
            .group_by(keys)
            .agg(real_labels=pl.col("label").n_unique().cast(pl.Int64)),
            on=keys,
            how="left",
        )
    )
    return (
        pl.concat([single, multi.select(single.columns)], how="vertical_relaxed")
        .with_columns(
            span=pl.when(pl.col("has_token_versions")).then(pl.col("real_labels").fill_null(0))
        )
        .with_columns(switches=(pl.col("span") - 1).clip(lower_bound=0))
        .drop("real_labels", "has_token_versions")
    )


def _infer_batch_groups(rows: pl.DataFrame) -> int | None:
    """Most common number of groups per trainer step (ties: the larger), or None."""
    steps = rows.filter(pl.col("trainer_step").is_not_null())
    if steps.height == 0:
        return None
    per_step = steps.group_by("trainer_step").agg(n=pl.col("group_key").n_unique())["n"]
    counts = Counter(per_step.to_list())
    return max(counts, key=lambda n: (counts[n], n))


@dataclass(frozen=True)
class ReplaySummary:
    """Figures of one replay (SPEC §6); :meth:`to_dict` gives the ``--json`` shape."""

    config: ReplayConfig
    counts: dict[str, dict[str, int | None]]
    batches: dict[str, Any]
    version_gap: dict[str, float | int | None]
    version_span: dict[str, dict[str, Any]]
    versions: tuple[str, ...]
    unchecked_trajectories: int
    notes: tuple[str, ...]

    @property
    def current_version_index(self) -> int | None:
        return len(self.versions) - 1 if self.versions else None

    @property
    def cutoff_version_index(self) -> int | None:
        if not self.versions or self.config.keep_versions == 0:
            return None
        return max(0, len(self.versions) - self.config.keep_versions)

    def dressage_metrics(self) -> dict[str, float | int | None]:
        """The same figures under the names of Dressage's training dashboard."""
        span = self.version_span["kept"]
        return {
            "staleness/dropped_groups": self.counts["groups"]["dropped_stale"],
            "staleness/version_gap_min": self.version_gap["min"],
            "staleness/version_gap_max": self.version_gap["max"],
            "staleness/version_gap_mean": self.version_gap["mean"],
            "staleness/version_span_mean": span["mean"],
            "staleness/version_span_max": span["max"],
            "staleness/version_span_min": span["min"],
            "staleness/partial_rollout_rejected_groups": self.counts["groups"]["rejected_span"],
            "staleness/partial_rollout_rejected_samples": self.counts["samples"]["rejected_span"],
            "staleness/current_version_index": self.current_version_index,
            "staleness/cutoff_version_index": self.cutoff_version_index,
        }

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"config": self.config.to_dict()}
        for unit, counts in self.counts.items():
            total = counts["total"]
            rates = {
                key: (None if value is None or not total else value / total)
                for key, value in counts.items()
                if key != "total"
            }
            out[unit] = {**counts, "rates": rates}
        out["batches"] = dict(self.batches)
        out["version_gap"] = dict(self.version_gap)
        out["version_span"] = {k: dict(v) for k, v in self.version_span.items()}
        out["version_span"]["unchecked_trajectories"] = self.unchecked_trajectories
        out["versions_observed"] = len(self.versions)
        out["versions"] = list(self.versions)
        out["dressage_metrics"] = self.dressage_metrics()
        out["notes"] = list(self.notes)
        return out


@dataclass(frozen=True)
class ReplayResult:
    """Everything one replay produced: per-group decisions, emitted batches, summary."""

    config: ReplayConfig
    decisions: pl.DataFrame
    batches: pl.DataFrame
    summary: ReplaySummary


def resolve_config(prepared: PreparedLog, config: ReplayConfig) -> ReplayConfig:
    """Fill in ``batch_groups`` from the log's trainer steps when it was not given (SPEC §5)."""
    if config.batch_groups is not None:
        return config
    if prepared.inferred_batch_groups is None:
        raise ConfigError(
            "batch_groups cannot be inferred: the log has no trainer steps "
            "(rollout_id / metadata.dressage_return_rollout_id); pass --batch-groups B "
            "(or --field trainer_step=PATH if the steps are under another name)"
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
        decisions=_decisions_frame(prepared, observation, collection),
        batches=_batches_frame(observation, collection, config),
        summary=_summarise(prepared, config, observation, collection),
    )


_DECISION_NAMES = ["kept", "dropped_stale", "dropped_stale", "rejected_span", "failed"]
_STAGE_NAMES = [None, "arrival", "pending", None, None]

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
        decision=code.replace_strict(dict(enumerate(_DECISION_NAMES)), return_dtype=pl.String),
        stage=code.replace_strict(dict(enumerate(_STAGE_NAMES)), return_dtype=pl.String),
        batch=pl.Series(collection.batch).replace(-1, None),
        version_index=pl.Series(observation.min_index).set(pl.Series(~versioned), None),
        version_gap=pl.Series(gap).set(pl.Series(~(versioned & decided)), None),
        samples=prepared.groups["samples"],
        trajectories=prepared.groups["trajectories"],
        tokens=prepared.groups["tokens"],
        versioned_trajectories=pl.Series(observation.versioned, dtype=pl.Int64),
    )


def _kept_gaps(observation: Observation, collection: Collection) -> tuple[np.ndarray, ...]:
    """Per kept group with versions: (group positions, gap sums, smallest gap, largest gap)."""
    kept = np.flatnonzero((collection.decision == KEPT) & (observation.versioned > 0))
    current = collection.current[kept]
    sums = observation.versioned[kept] * current - observation.sum_index[kept]
    return kept, sums, current - observation.max_index[kept], current - observation.min_index[kept]


def _batches_frame(
    observation: Observation, collection: Collection, config: ReplayConfig
) -> pl.DataFrame:
    kept, sums, _, largest = _kept_gaps(observation, collection)
    emitted = len(collection.batch_rows)
    batch = collection.batch[kept]
    gap_sum = np.bincount(batch, weights=sums, minlength=emitted)
    gap_count = np.bincount(batch, weights=observation.versioned[kept], minlength=emitted)
    gap_max = np.full(emitted, -1, dtype=np.int64)
    np.maximum.at(gap_max, batch, largest)
    rows = []
    for (number, size, partial, now, arrivals, pendings), total, count, high in zip(
        collection.batch_rows, gap_sum, gap_count, gap_max, strict=True
    ):
        known = now + 1
        cutoff = max(0, known - config.keep_versions) if config.keep_versions and known else None
        rows.append(
            (
                number, size, partial, now if known else None, cutoff,
                total / count if count else None, int(high) if count else None,
                arrivals, pendings,
            )
        )  # fmt: skip
    return pl.DataFrame(rows, schema=_BATCH_SCHEMA, orient="row")


def _summarise(
    prepared: PreparedLog, config: ReplayConfig, observation: Observation, collection: Collection
) -> ReplaySummary:
    arrays = prepared.arrays
    decision = collection.decision
    counts: dict[str, dict[str, int | None]] = {}
    for unit, weights in (
        ("groups", None),
        ("samples", arrays.samples),
        ("trajectories", arrays.trajectories),
        ("tokens", arrays.tokens),
    ):
        by_code = np.bincount(decision, weights=weights, minlength=5).astype(np.int64).tolist()
        unit_counts: dict[str, int | None] = {
            "total": sum(by_code),
            "kept": by_code[KEPT],
            "dropped_stale": by_code[DROPPED_ARRIVAL] + by_code[DROPPED_PENDING],
            "dropped_stale_arrival": by_code[DROPPED_ARRIVAL],
            "dropped_stale_pending": by_code[DROPPED_PENDING],
            "rejected_span": by_code[REJECTED],
            "failed": by_code[FAILED],
        }
        if unit == "tokens" and not prepared.tokens_known:
            unit_counts = dict.fromkeys(unit_counts)
        counts[unit] = unit_counts

    kept, sums, smallest, largest = _kept_gaps(observation, collection)
    gap_count = int(observation.versioned[kept].sum())
    version_gap: dict[str, float | int | None] = {
        "min": int(smallest.min()) if gap_count else None,
        "mean": int(sums.sum()) / gap_count if gap_count else None,
        "max": int(largest.max()) if gap_count else None,
    }
    kept_spans = arrays.span[decision[arrays.span_owner] == KEPT]
    version_span = {"kept": _span_stats(kept_spans), "all": _span_stats(arrays.span)}

    notes: list[str] = []
    rejected = counts["groups"]["rejected_span"] or 0
    if rejected:
        notes.append(
            f"{rejected} rejected group(s) would have been retried by Dressage as a new "
            "attempt; a log cannot show what the retry would produce, so they count as lost"
        )
    if not prepared.tokens_known:
        notes.append(
            "some records have neither response_length nor loss_mask, so token figures are null"
        )
    uses_versions = config.keep_versions > 0 or config.max_preempts is not None
    if uses_versions and prepared.n_groups and not arrays.labels and not len(arrays.span):
        notes.append(
            "no record carries version information (a real dressage_end_token_version, "
            "full_versions or version_spans), so the controls had nothing to act on; if the "
            "log keeps versions under other names, pass --field end_version=PATH or "
            "--field token_versions=PATH"
        )
    emitted = len(collection.batch_rows)
    return ReplaySummary(
        config=config,
        counts=counts,
        batches={
            "emitted": emitted,
            "last_partial": bool(emitted and collection.batch_rows[-1][2]),
        },
        version_gap=version_gap,
        version_span=version_span,
        versions=observation.versions,
        unchecked_trajectories=prepared.trajectories.height - len(arrays.span),
        notes=tuple(notes),
    )


def _span_stats(spans: np.ndarray) -> dict[str, Any]:
    if len(spans) == 0:
        return {"min": None, "mean": None, "max": None, "histogram": {}}
    histogram = np.bincount(spans)
    return {
        "min": int(spans.min()),
        "mean": float(spans.mean()),
        "max": int(spans.max()),
        "histogram": {str(k): int(c) for k, c in enumerate(histogram.tolist()) if c},
    }


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
    minus the index of its own version (SPEC §3); null when it has no version or was not kept.
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
            version_gap=pl.when(pl.col("decision") == "kept").then(
                pl.col("current") - pl.col("version_index")
            )
        )
        .drop("current")
    )
