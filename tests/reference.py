"""Slow, obviously-correct reference model of a replay, transcribed from docs/semantics.md §1-§6.

Plain loops over plain dicts, one group at a time, no polars: it exists only so the
fast engine in ``analysis`` can be checked against it (see
``tests/analysis/test_differential.py``). Where docs/semantics.md is silent it follows the
decisions fixed for the engine (arrival order = first appearance; trajectory identity =
(group id, trajectory id); rejection before failure; ...).

Examples
--------
>>> records = [
...     {"group_index": 0, "metadata": {"parent_traj_id": "t", "dressage_end_token_version": "old"}},
...     {"group_index": 1, "metadata": {"parent_traj_id": "t", "dressage_end_token_version": "new"}},
... ]
>>> result = replay_reference(records, keep_versions=1, max_preempts=None, batch_groups=2)
>>> [d["decision"] for d in result.decisions]
['dropped_stale', 'kept']
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

NOT_REAL = {"", "-1", "unknown", "none"}
DECISIONS = ("kept", "dropped_stale", "rejected_span", "failed")
COUNT_KEYS = (
    "total",
    "kept",
    "dropped_stale",
    "dropped_stale_arrival",
    "dropped_stale_pending",
    "rejected_span",
    "failed",
)

Record = dict[str, Any]


# ---------------------------------------------------------------- labels (§2)


def real_label(value: Any) -> str | None:
    """The stripped label if it is real, else None (an int 3 is the label "3")."""
    if value is None:
        return None
    text = str(value).strip()
    if text.lower() in NOT_REAL:
        return None
    return text


def expand_version_spans(spans: list[dict[str, Any]]) -> list[Any]:
    """Per-token labels from run-length ``version_spans`` ({start, end, version})."""
    labels: list[Any] = []
    for span in spans:
        for _ in range(span["start"], span["end"]):
            labels.append(span["version"])
    return labels


def distinct_real_labels(labels: list[Any]) -> list[str]:
    """Real labels in order of first appearance, each once."""
    seen: list[str] = []
    for value in labels:
        label = real_label(value)
        if label is not None and label not in seen:
            seen.append(label)
    return seen


def derive_end_version(
    token_versions: list[Any],
    *,
    response_length: int | None,
    loss_mask: list[Any] | None,
) -> str | None:
    """Last real label among trainable response tokens, as Dressage derives it."""
    total = len(token_versions)
    if response_length is not None:
        response_size = min(response_length, total)
    elif loss_mask is not None:
        response_size = min(len(loss_mask), total)
    else:
        response_size = total
    response = token_versions[total - response_size :]
    last: str | None = None
    for i, value in enumerate(response):
        # The mask is response-aligned: its i-th entry is the i-th response token.
        if loss_mask is not None and (i >= len(loss_mask) or not loss_mask[i]):
            continue
        label = real_label(value)
        if label is not None:
            last = label
    return last


# ---------------------------------------------------------------- records (§1)


def _first_present(*candidates: tuple[dict[str, Any], str]) -> Any:
    """Value of the first (mapping, key) whose key exists with a non-null value."""
    for mapping, key in candidates:
        if key in mapping and mapping[key] is not None:
            return mapping[key]
    return None


@dataclass
class ParsedRecord:
    """One record reduced to what docs/semantics.md uses."""

    position_in_log: int
    group_id: str
    trajectory_id: str | None
    segment_index: int
    token_versions: list[Any] | None
    end_version: str | None
    response_tokens: int | None
    aborted: bool
    position_in_group: int = 0
    trainer_step: int | None = None
    """``metadata.dressage_return_rollout_id`` (or top level): the step the record came back at."""


def parse_record(raw: Record, position_in_log: int) -> ParsedRecord:
    """Read one raw slime-style record by the field mapping of docs/semantics.md §1."""
    metadata: dict[str, Any] = raw.get("metadata") or {}

    group = _first_present(
        (raw, "group_index"),
        (metadata, "dressage_return_async_group_id"),
        (raw, "instance_id"),
        (metadata, "instance_id"),
    )
    if group is None:
        raise ValueError(f"record {position_in_log} has no group field")

    trajectory = _first_present(
        (metadata, "parent_traj_id"), (raw, "trajectory_id"), (raw, "session_id")
    )

    segment = _first_present((metadata, "segment_index"), (raw, "segment_index"))
    segment_index = 0 if segment is None else int(segment)

    token_versions: list[Any] | None = None
    if metadata.get("full_versions") is not None:
        token_versions = list(metadata["full_versions"])
    elif metadata.get("version_spans") is not None:
        token_versions = expand_version_spans(metadata["version_spans"])

    response_length = raw.get("response_length")
    loss_mask = raw.get("loss_mask")

    if metadata.get("dressage_end_token_version") is not None:
        # A present label is used as it is, even when not real: never derived from.
        end_version = real_label(metadata["dressage_end_token_version"])
    elif token_versions is not None:
        end_version = derive_end_version(
            token_versions, response_length=response_length, loss_mask=loss_mask
        )
    else:
        end_version = None

    if response_length is not None:
        response_tokens: int | None = int(response_length)
    elif loss_mask is not None:
        response_tokens = len(loss_mask)
    else:
        response_tokens = None

    status = raw.get("status")
    aborted = isinstance(status, str) and status.lower() == "aborted"

    return ParsedRecord(
        position_in_log=position_in_log,
        group_id=str(group),
        trajectory_id=None if trajectory is None else str(trajectory),
        segment_index=segment_index,
        token_versions=token_versions,
        end_version=end_version,
        response_tokens=response_tokens,
        aborted=aborted,
        trainer_step=_first_present(
            (metadata, "dressage_return_rollout_id"), (raw, "dressage_return_rollout_id")
        ),
    )


# ---------------------------------------------------------------- groups and trajectories


@dataclass
class Trajectory:
    """The records of one trajectory of a group (a record without id is its own)."""

    key: str
    records: list[ParsedRecord] = field(default_factory=list)

    def ordered_records(self) -> list[ParsedRecord]:
        """Records by (segment_index, position in the group)."""
        return sorted(self.records, key=lambda r: (r.segment_index, r.position_in_group))

    def has_token_versions(self) -> bool:
        return any(r.token_versions is not None for r in self.records)

    def version_span(self) -> int | None:
        """Number of distinct real labels over the token versions; None if there are none."""
        if not self.has_token_versions():
            return None
        labels: list[Any] = []
        for record in self.ordered_records():
            if record.token_versions is not None:
                labels.extend(record.token_versions)
        return len(distinct_real_labels(labels))


@dataclass
class Group:
    """One GRPO group: its records in input order."""

    group_id: str
    records: list[ParsedRecord] = field(default_factory=list)

    def trajectories(self) -> list[Trajectory]:
        """Trajectories in order of first appearance; id-less records are their own."""
        by_key: dict[str, Trajectory] = {}
        ordered: list[Trajectory] = []
        for record in self.records:
            if record.trajectory_id is None:
                trajectory = Trajectory(key=f"<record {record.position_in_log}>")
                trajectory.records.append(record)
                ordered.append(trajectory)
                continue
            key = "id:" + record.trajectory_id
            if key not in by_key:
                by_key[key] = Trajectory(key=key)
                ordered.append(by_key[key])
            by_key[key].records.append(record)
        return ordered

    def trajectory_versions(self) -> list[tuple[str, str]]:
        """(trajectory id, version) per versioned trajectory, docs/semantics.md §2."""
        best: dict[str, ParsedRecord] = {}
        order: list[str] = []
        for record in self.records:
            if record.trajectory_id is None or record.end_version is None:
                continue
            tid = record.trajectory_id
            if tid not in best:
                order.append(tid)
                best[tid] = record
            elif (record.segment_index, record.position_in_group) > (
                best[tid].segment_index,
                best[tid].position_in_group,
            ):
                best[tid] = record
        return [(tid, best[tid].end_version) for tid in order]  # type: ignore[misc]

    def is_failed(self) -> bool:
        return any(r.aborted for r in self.records)


def group_records(records: list[Record]) -> list[Group]:
    """Parse records and collect them into groups in order of first appearance."""
    groups: dict[str, Group] = {}
    ordered: list[Group] = []
    for position, raw in enumerate(records):
        parsed = parse_record(raw, position)
        if parsed.group_id not in groups:
            groups[parsed.group_id] = Group(group_id=parsed.group_id)
            ordered.append(groups[parsed.group_id])
        group = groups[parsed.group_id]
        parsed.position_in_group = len(group.records)
        group.records.append(parsed)
    return ordered


# ---------------------------------------------------------------- replay (§3-§5)


@dataclass
class ReferenceResult:
    """Per-group decisions (arrival order) and the summary of one configuration."""

    decisions: list[dict[str, Any]]
    summary: dict[str, Any]


def _stats(values: list[int]) -> dict[str, Any]:
    if not values:
        return {"min": None, "mean": None, "max": None}
    return {"min": min(values), "mean": sum(values) / len(values), "max": max(values)}


# The reference model is one plain loop on purpose: read top to bottom against
# docs/semantics.md §3-§5, it is obviously right; split into helpers it would not be.
def replay_reference(  # noqa: C901
    records: list[Record],
    *,
    keep_versions: int,
    max_preempts: int | None,
    batch_groups: int,
) -> ReferenceResult:
    """Replay the collection loop of docs/semantics.md §3-§5 over raw records, one group at a time."""
    if keep_versions < 0:
        raise ValueError("keep_versions must be >= 0")
    if max_preempts is not None and max_preempts < 0:
        raise ValueError("max_preempts must be >= 0 or None")
    if batch_groups < 1:
        raise ValueError("batch_groups must be >= 1")

    groups = group_records(records)
    versions: list[str] = []
    decisions: dict[str, dict[str, Any]] = {}
    batch: list[Group] = []
    batch_count = 0
    last_partial = False
    # Gap (current index at emission - trajectory version index) per kept trajectory.
    kept_gaps: list[int] = []

    def current_index() -> int:
        return len(versions) - 1

    def version_indices(group: Group) -> list[int]:
        return [versions.index(version) for _, version in group.trajectory_versions()]

    def group_version_index(group: Group) -> int | None:
        indices = version_indices(group)
        return min(indices) if indices else None

    def is_stale(group: Group) -> bool:
        if keep_versions == 0 or not versions:
            return False
        cutoff = max(0, len(versions) - keep_versions)
        return any(index < cutoff for index in version_indices(group))

    def decide(group: Group, decision: str, stage: str | None, batch_no: int | None) -> None:
        version_index = group_version_index(group)
        gap = None if version_index is None else current_index() - version_index
        decisions[group.group_id] = {
            "group_id": group.group_id,
            "decision": decision,
            "stage": stage,
            "batch": batch_no,
            "version_index": version_index,
            "version_gap": gap,
        }

    def emit_batch() -> None:
        nonlocal batch, batch_count
        for member in batch:
            decide(member, "kept", None, batch_count)
            for index in version_indices(member):
                kept_gaps.append(current_index() - index)
        batch_count += 1
        batch = []

    for group in groups:
        # §4: the span check comes first; a rejected group is never observed.
        if max_preempts is not None:
            rejected = False
            for trajectory in group.trajectories():
                span = trajectory.version_span()
                if span is not None and max(0, span - 1) > max_preempts:
                    rejected = True
            if rejected:
                decisions[group.group_id] = {
                    "group_id": group.group_id,
                    "decision": "rejected_span",
                    "stage": None,
                    "batch": None,
                    "version_index": None,
                    "version_gap": None,
                }
                continue

        # Step 1: observe.
        size_before = len(versions)
        for _, version in group.trajectory_versions():
            if version not in versions:
                versions.append(version)
        advanced = len(versions) > size_before

        # Step 2: an advance may make groups of the pending batch stale.
        if advanced and batch:
            still_pending: list[Group] = []
            for member in batch:
                if is_stale(member):
                    decide(member, "dropped_stale", "pending", None)
                else:
                    still_pending.append(member)
            batch = still_pending

        # Step 3: failed groups never enter a batch; stale ones are dropped on arrival.
        if group.is_failed():
            decide(group, "failed", None, None)
            continue
        if is_stale(group):
            decide(group, "dropped_stale", "arrival", None)
            continue
        batch.append(group)

        # Step 4: a full batch is emitted.
        if len(batch) == batch_groups:
            emit_batch()

    if batch:
        emit_batch()
        last_partial = True

    ordered_decisions = [decisions[group.group_id] for group in groups]
    summary = _summary(
        groups,
        decisions,
        versions=versions,
        kept_gaps=kept_gaps,
        batch_count=batch_count,
        last_partial=last_partial,
        config={
            "keep_versions": keep_versions,
            "max_preempts": max_preempts,
            "batch_groups": batch_groups,
        },
    )
    return ReferenceResult(decisions=ordered_decisions, summary=summary)


# ---------------------------------------------------------------- summary (§6)


def _count_keys(decision: dict[str, Any]) -> list[str]:
    """Summary keys a group's figures are added to."""
    keys = ["total", decision["decision"]]
    if decision["decision"] == "dropped_stale":
        keys.append("dropped_stale_" + decision["stage"])
    return keys


def _summary(
    groups: list[Group],
    decisions: dict[str, dict[str, Any]],
    *,
    versions: list[str],
    kept_gaps: list[int],
    batch_count: int,
    last_partial: bool,
    config: dict[str, Any],
) -> dict[str, Any]:
    group_counts = dict.fromkeys(COUNT_KEYS, 0)
    sample_counts = dict.fromkeys(COUNT_KEYS, 0)
    trajectory_counts = dict.fromkeys(COUNT_KEYS, 0)
    token_counts: dict[str, int | None] = dict.fromkeys(COUNT_KEYS, 0)
    tokens_known = True
    spans_kept: list[int] = []
    spans_all: list[int] = []

    for group in groups:
        decision = decisions[group.group_id]
        trajectories = group.trajectories()
        for key in _count_keys(decision):
            group_counts[key] += 1
            sample_counts[key] += len(group.records)
            trajectory_counts[key] += len(trajectories)
            for record in group.records:
                if record.response_tokens is None:
                    tokens_known = False
                else:
                    token_counts[key] += record.response_tokens  # type: ignore[operator]
        for trajectory in trajectories:
            span = trajectory.version_span()
            if span is None:
                continue
            spans_all.append(span)
            if decision["decision"] == "kept":
                spans_kept.append(span)

    if not tokens_known:
        token_counts = dict.fromkeys(COUNT_KEYS, None)

    return {
        "config": config,
        "groups": group_counts,
        "samples": sample_counts,
        "trajectories": trajectory_counts,
        "tokens": token_counts,
        "batches": {"emitted": batch_count, "last_partial": last_partial},
        "version_gap": _stats(kept_gaps),
        "version_span": {"kept": _stats(spans_kept), "all": _stats(spans_all)},
        "versions_observed": len(versions),
    }
