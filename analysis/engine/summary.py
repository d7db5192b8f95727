"""The summary of one replay: counts and rates by outcome, version gap and span, and the
same figures under Dressage's metric names (docs/semantics.md §6)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from analysis.engine.batching import (
    Collection,
    Observation,
)
from analysis.engine.config import ReplayConfig
from analysis.engine.decisions import DECISIONS, Decision, Outcome
from analysis.engine.prepare import PreparedLog
from analysis.errors import Message, counted, setting
from analysis.table.labels import late_older_note


@dataclass(frozen=True)
class ReplaySummary:
    """Figures of one replay (docs/semantics.md §6); :meth:`to_dict` gives the ``--json`` shape."""

    config: ReplayConfig
    counts: dict[str, dict[str, int | None]]
    batches: dict[str, Any]
    version_gap: dict[str, float | int | None]
    version_span: dict[str, dict[str, Any]]
    versions: tuple[str, ...]
    unchecked_trajectories: int
    notes: tuple[str, ...]
    token_weighted: dict[str, float | None] = field(default_factory=dict)
    """Mean version gap and span weighted by response tokens (docs/semantics.md §10.6)."""
    log_notes: tuple[str, ...] = ()
    """The notes of ``notes`` about the log rather than this setting's figures (a sweep
    prints them once under its table, as ``replay`` prints them)."""

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
            "staleness/dropped_groups": self.counts["groups"][Decision.DROPPED_STALE],
            "staleness/version_gap_min": self.version_gap["min"],
            "staleness/version_gap_max": self.version_gap["max"],
            "staleness/version_gap_mean": self.version_gap["mean"],
            "staleness/version_span_mean": span["mean"],
            "staleness/version_span_max": span["max"],
            "staleness/version_span_min": span["min"],
            "staleness/partial_rollout_rejected_groups": self.counts["groups"][
                Decision.REJECTED_SPAN
            ],
            "staleness/partial_rollout_rejected_samples": self.counts["samples"][
                Decision.REJECTED_SPAN
            ],
            "staleness/current_version_index": self.current_version_index,
            "staleness/cutoff_version_index": self.cutoff_version_index,
        }

    def __repr__(self) -> str:
        groups = self.counts["groups"]
        return (
            f"ReplaySummary({self.config.describe()}: {groups['kept']:,} of "
            f"{groups['total']:,} groups kept, {groups['dropped_stale']:,} dropped stale, "
            f"{groups['rejected_span']:,} rejected, {groups['failed']:,} failed)"
        )

    def _repr_html_(self) -> str:
        """A notebook shows the outcome table, as ``replay`` prints it."""
        import html

        units = list(self.counts)
        rows = "".join(
            f"<tr><td>{html.escape(outcome)}</td>"
            + "".join(
                f"<td>{'n/a' if self.counts[u][outcome] is None else format(self.counts[u][outcome], ',')}</td>"
                for u in units
            )
            + "</tr>"
            for outcome in ("total", *DECISIONS)
        )
        head = "".join(f"<th>{html.escape(u)}</th>" for u in units)
        return (
            f"<p>Replay {html.escape(self.config.describe())}</p>"
            f"<table><tr><th>outcome</th>{head}</tr>{rows}</table>"
        )

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
        out["token_weighted"] = dict(self.token_weighted)
        out["versions_observed"] = len(self.versions)
        out["versions"] = list(self.versions)
        out["dressage_metrics"] = self.dressage_metrics()
        out["notes"] = list(self.notes)
        return out


def summarise(
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
        by_code = (
            np.bincount(decision, weights=weights, minlength=len(Outcome)).astype(np.int64).tolist()
        )
        unit_counts: dict[str, int | None] = {
            "total": sum(by_code),
            Decision.KEPT.value: by_code[Outcome.KEPT],
            Decision.DROPPED_STALE.value: (
                by_code[Outcome.DROPPED_ARRIVAL] + by_code[Outcome.DROPPED_PENDING]
            ),
            Outcome.DROPPED_ARRIVAL.key: by_code[Outcome.DROPPED_ARRIVAL],
            Outcome.DROPPED_PENDING.key: by_code[Outcome.DROPPED_PENDING],
            Decision.REJECTED_SPAN.value: by_code[Outcome.REJECTED],
            Decision.FAILED.value: by_code[Outcome.FAILED],
        }
        if unit == "tokens" and not prepared.tokens_known:
            unit_counts = dict.fromkeys(unit_counts)
        counts[unit] = unit_counts

    kept, sums, smallest, largest = kept_gaps(observation, collection)
    gap_count = int(observation.versioned[kept].sum())
    version_gap: dict[str, float | int | None] = {
        "min": int(smallest.min()) if gap_count else None,
        "mean": int(sums.sum()) / gap_count if gap_count else None,
        "max": int(largest.max()) if gap_count else None,
    }
    version_span = {
        "kept": span_stats(prepared.span_histogram(decision == Outcome.KEPT)),
        "all": span_stats(prepared.span_histogram(None)),
    }

    notes: list[str] = []
    rejected = counts["groups"][Decision.REJECTED_SPAN] or 0
    if rejected:
        notes.append(
            f"{counted(rejected, 'rejected group')} would have been retried by Dressage as a "
            "new attempt; a log cannot show what the retry would produce, so "
            + ("it counts as lost" if rejected == 1 else "they count as lost")
        )
    if not prepared.tokens_known:
        notes.append(
            "some records have neither response_length nor loss_mask, so token figures are null"
        )
    uses_versions = config.keep_versions > 0 or config.max_preempts is not None
    if uses_versions and prepared.n_groups and not arrays.labels and not len(arrays.span):
        notes.append(
            Message(
                "no record carries version information (a real dressage_end_token_version, "
                "full_versions or version_spans), so the controls had nothing to act on; if "
                "the log keeps versions under other names, pass "
                + setting("fields", "end_version=PATH")
                + " or "
                + setting("fields", "token_versions=PATH")
            )
        )
    late = late_older_note(observation.versions, config.keep_versions, late=observation.late_older)
    if late is not None:
        notes.append(late)
    setting_notes = 1 if rejected else 0  # the rejected groups' note: this setting's count
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
        unchecked_trajectories=prepared.n_trajectories - len(arrays.span),
        notes=tuple(notes),
        token_weighted=token_weighted(prepared, observation, collection),
        log_notes=tuple(notes[setting_notes:]),
    )


def span_stats(histogram: np.ndarray) -> dict[str, Any]:
    """Min, mean, max and histogram of spans, from how many trajectories have each span."""
    present = np.flatnonzero(histogram)
    if len(present) == 0:
        return {"min": None, "mean": None, "max": None, "histogram": {}}
    counts = histogram[present]
    return {
        "min": int(present[0]),
        "mean": float((present * counts).sum() / counts.sum()),
        "max": int(present[-1]),
        "histogram": {
            str(k): int(c) for k, c in zip(present.tolist(), counts.tolist(), strict=True)
        },
    }


def kept_gaps(observation: Observation, collection: Collection) -> tuple[np.ndarray, ...]:
    """Per kept group with versions: (group positions, gap sums, smallest gap, largest gap)."""
    kept = np.flatnonzero((collection.decision == Outcome.KEPT) & (observation.versioned > 0))
    current = collection.current[kept]
    sums = observation.versioned[kept] * current - observation.sum_index[kept]
    return kept, sums, current - observation.max_index[kept], current - observation.min_index[kept]


TOKEN_WEIGHTED_KEYS = ("version_gap_mean", "version_span_mean_kept", "version_span_mean_all")


def token_weighted(
    prepared: PreparedLog, observation: Observation, collection: Collection
) -> dict[str, float | None]:
    """Mean gap of the kept versioned trajectories and mean span of the kept (and of all)
    checked trajectories, each trajectory weighted by its response tokens
    (docs/semantics.md §10.6); None when token counts are unknown or sum to zero.

    A sweep asks this for every setting, so the sums are taken per group once (per
    observation order for the gaps) and each setting adds up its kept groups: the same
    whole numbers, so the same means, as summing the kept trajectories themselves."""
    if not prepared.tokens_known:
        return dict.fromkeys(TOKEN_WEIGHTED_KEYS)
    kept = collection.decision == Outcome.KEPT
    gap_tokens, gap_sums = _group_gap_sums(prepared, observation)
    gap_total = int(gap_tokens[kept].sum())
    gap_numerator = int((collection.current[kept] * gap_tokens[kept]).sum()) - int(
        gap_sums[kept].sum()
    )
    span_tokens, span_sums = _group_span_sums(prepared)
    kept_tokens, all_tokens = int(span_tokens[kept].sum()), int(span_tokens.sum())
    return {
        "version_gap_mean": gap_numerator / gap_total if gap_total else None,
        "version_span_mean_kept": int(span_sums[kept].sum()) / kept_tokens if kept_tokens else None,
        "version_span_mean_all": int(span_sums.sum()) / all_tokens if all_tokens else None,
    }


def _per_group(groups: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """The sum of ``values`` over each group's members, exactly (int64)."""
    sums = np.zeros(n, dtype=np.int64)
    np.add.at(sums, groups, values.astype(np.int64, copy=False))
    return sums


def _group_gap_sums(
    prepared: PreparedLog, observation: Observation
) -> tuple[np.ndarray, np.ndarray]:
    """Per group: the response tokens of its versioned trajectories, and the sum of each
    one's version index (in this observation order) times its tokens."""
    key = ("token_weighted_gaps", observation.versions)
    if key not in prepared._cache:
        arrays = prepared.arrays
        index_of_code = version_index_of_codes(prepared, observation)
        tokens = entry_tokens(prepared)
        prepared._cache[key] = (
            _per_group(arrays.owner, tokens, arrays.n),
            _per_group(arrays.owner, index_of_code[arrays.codes] * tokens, arrays.n),
        )
    sums: tuple[np.ndarray, np.ndarray] = prepared._cache[key]
    return sums


def version_index_of_codes(prepared: PreparedLog, observation: Observation) -> np.ndarray:
    """The index in ``observation.versions`` of each of ``prepared.arrays.labels`` (-1
    for a label not observed), found once per observation order."""
    key = ("index_of_code", observation.versions)
    if key not in prepared._cache:
        index = {label: position for position, label in enumerate(observation.versions)}
        prepared._cache[key] = np.array(
            [index.get(label, -1) for label in prepared.arrays.labels], dtype=np.int64
        )
    index_of_code: np.ndarray = prepared._cache[key]
    return index_of_code


def kept_trajectory_gaps(
    prepared: PreparedLog, observation: Observation, collection: Collection
) -> np.ndarray:
    """The version gap of each kept trajectory that has a version (groups in arrival
    order): the non-null ``version_gap`` of :func:`analysis.trajectory_outcomes`, from
    the per-group arrays rather than a frame of every trajectory."""
    arrays = prepared.arrays
    kept = collection.decision[arrays.owner] == Outcome.KEPT
    index_of_code = version_index_of_codes(prepared, observation)
    gaps: np.ndarray = collection.current[arrays.owner[kept]] - index_of_code[arrays.codes[kept]]
    return gaps


def _group_span_sums(prepared: PreparedLog) -> tuple[np.ndarray, np.ndarray]:
    """Per group: the response tokens of its checked trajectories, and the sum of each
    one's span times its tokens."""
    if "token_weighted_spans" not in prepared._cache:
        trajectories, n = prepared.per_trajectory, prepared.arrays.n
        checked = trajectories.span >= 0
        groups, tokens = trajectories.arrival[checked], trajectories.tokens[checked]
        prepared._cache["token_weighted_spans"] = (
            _per_group(groups, tokens, n),
            _per_group(groups, trajectories.span[checked] * tokens, n),
        )
    sums: tuple[np.ndarray, np.ndarray] = prepared._cache["token_weighted_spans"]
    return sums


def entry_tokens(prepared: PreparedLog) -> np.ndarray:
    """Response tokens of each versioned trajectory, in the order of ``arrays.codes``
    (groups in arrival order, trajectories by their first versioned record)."""
    if "entry_tokens" not in prepared._cache:
        trajectories = prepared.per_trajectory
        versioned = trajectories.version_row >= 0
        order = np.lexsort(
            (trajectories.first_versioned_row[versioned], trajectories.arrival[versioned])
        )
        prepared._cache["entry_tokens"] = trajectories.tokens[versioned][order]
    tokens: np.ndarray = prepared._cache["entry_tokens"]
    return tokens
