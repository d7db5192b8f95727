"""docs/semantics.md §7: the test vectors from Dressage's own tests and docs, each with its exact outcome."""

from __future__ import annotations

from typing import Any

import pytest

import analysis
from analysis.table.labels import derive_end_version, real_label, run_length_spans


def record(
    group: Any, trajectory: str | None, version: Any = None, **metadata: Any
) -> dict[str, Any]:
    meta: dict[str, Any] = dict(metadata)
    if trajectory is not None:
        meta["parent_traj_id"] = trajectory
    if version is not None or "end_missing" not in meta:
        meta["dressage_end_token_version"] = version
    meta.pop("end_missing", None)
    return {"group_index": group, "metadata": meta}


def run(records: list[dict[str, Any]], **config: Any) -> analysis.ReplayResult:
    table = analysis.records_to_table(records)
    return analysis.replay(table, analysis.ReplayConfig(**config))


def decisions(result: analysis.ReplayResult) -> list[tuple[Any, ...]]:
    return result.decisions.select("group_id", "decision", "stage", "batch").rows()


@pytest.mark.parametrize(
    ("label", "expected"),
    [
        ("alpha", "alpha"),
        ("release-candidate", "release-candidate"),
        (" weight-current ", "weight-current"),
        ("unknown", None),
        ("-1", None),
        (None, None),
        (3, "3"),
        ("03", "03"),
        (" None ", None),
        ("", None),
    ],
)
def test_real_labels(label: Any, expected: str | None) -> None:
    assert real_label(label) == expected


def test_highest_segment_gives_trajectory_version() -> None:
    records = [
        {"group_index": 0, "metadata": {"parent_traj_id": "t", "segment_index": 0, "dressage_end_token_version": "alpha"}},
        {"group_index": 0, "metadata": {"parent_traj_id": "t", "segment_index": 2, "dressage_end_token_version": "gamma"}},
        {"group_index": 0, "metadata": {"parent_traj_id": "t", "segment_index": 1, "dressage_end_token_version": "beta"}},
    ]  # fmt: skip
    result = run(records, batch_groups=1)
    assert result.summary.versions == ("gamma",)


def test_same_segment_later_record_wins() -> None:
    records = [record(0, "t", "alpha"), record(0, "t", "beta")]
    assert run(records, batch_groups=1).summary.versions == ("beta",)


def test_late_seen_label_is_newer_whatever_its_sort_order() -> None:
    result = run(
        [record("fresh", "a", "alpha"), record("newer", "b", "aardvark")],
        keep_versions=1,
        batch_groups=2,
    )
    assert result.summary.versions == ("alpha", "aardvark")
    assert decisions(result) == [
        ("fresh", "dropped_stale", "pending", None),
        ("newer", "kept", None, 0),
    ]


def test_group_with_unversioned_record_and_old_trajectory_is_stale() -> None:
    records = [
        record("first", "a", "old"),
        record("second", "b", "new"),
        {"group_index": "mixed", "metadata": {}},
        record("mixed", "c", "old"),
    ]
    result = run(records, keep_versions=1, batch_groups=1)
    assert decisions(result)[2] == ("mixed", "dropped_stale", "arrival", None)


def test_new_version_drops_pending_old_group() -> None:
    result = run(
        [record("g-old", "a", "old"), record("g-new", "b", "new")], keep_versions=1, batch_groups=2
    )
    assert result.summary.counts["groups"]["dropped_stale_pending"] == 1
    assert result.summary.counts["groups"]["dropped_stale"] == 1


def test_gaps_of_mixed_segment_trajectories() -> None:
    records = [
        record("seed", "m", "middle"),
        record("seed2", "n", "new"),
        {"group_index": "g", "metadata": {"parent_traj_id": "long", "segment_index": 0, "dressage_end_token_version": "old"}},
        {"group_index": "g", "metadata": {"parent_traj_id": "long", "segment_index": 1, "dressage_end_token_version": "middle"}},
        {"group_index": "g", "metadata": {"parent_traj_id": "short", "dressage_end_token_version": "new"}},
    ]  # fmt: skip
    result = run(records, keep_versions=3, batch_groups=1)
    summary = result.summary
    assert summary.versions == ("middle", "new")
    batch = result.batches.row(2, named=True)
    assert batch["version_gap_mean"] == 0.5
    assert batch["version_gap_max"] == 1
    assert summary.current_version_index == 1
    assert summary.cutoff_version_index == 0
    group = result.decisions.filter(group_id="g").row(0, named=True)
    assert (group["version_index"], group["version_gap"]) == (0, 1)


def test_first_pending_group_dropped_when_second_arrives() -> None:
    records = [record(1, "a", "old"), record(2, "b", "new"), record(3, "c", "new")]
    result = run(records, keep_versions=1, batch_groups=2)
    assert decisions(result) == [
        ("1", "dropped_stale", "pending", None),
        ("2", "kept", None, 0),
        ("3", "kept", None, 0),
    ]
    assert result.summary.batches == {"emitted": 1, "last_partial": False}


def test_trajectory_version_comes_from_end_version_not_tokens() -> None:
    records = [
        {"group_index": 0, "tokens": [1, 2, 3], "metadata": {
            "parent_traj_id": "t", "full_versions": ["-1", "old", "new"],
            "dressage_end_token_version": "new"}},
    ]  # fmt: skip
    assert run(records, batch_groups=1).summary.versions == ("new",)


def spans_record(group: int, trajectory: str, labels: list[Any]) -> dict[str, Any]:
    return {
        "group_index": group,
        "tokens": list(range(len(labels))),
        "metadata": {"parent_traj_id": trajectory, "full_versions": labels},
    }


def test_span_mean_over_trajectories() -> None:
    records = [
        spans_record(0, "t1", ["-1", "1", "1"]),
        spans_record(0, "t1", ["1", "2"]),
        spans_record(0, "t2", ["-1", "3"]),
    ]
    span = run(records, batch_groups=1).summary.version_span["all"]
    assert (span["min"], span["mean"], span["max"]) == (1, 1.5, 2)


@pytest.mark.parametrize(
    ("max_preempts", "rejected"), [(None, False), (0, True), (1, True), (2, False)]
)
def test_span_three_switches_two(max_preempts: int | None, rejected: bool) -> None:
    records = [spans_record(0, "t", ["v1", "v1", "unknown", "v2", "v1", "v3"])]
    result = run(records, max_preempts=max_preempts, batch_groups=1)
    trajectory = result.summary.version_span["all"]
    assert trajectory["max"] == 3
    expected = "rejected_span" if rejected else "kept"
    assert result.decisions["decision"].to_list() == [expected]


def test_zero_preempts_rejects_any_switch_and_keeps_none() -> None:
    records = [spans_record(0, "a", ["-1", "v1", "v2"]), spans_record(1, "b", ["-1", "v1", "v1"])]
    result = run(records, max_preempts=0, batch_groups=1)
    assert result.decisions["decision"].to_list() == ["rejected_span", "kept"]


def test_derivation_from_loss_mask() -> None:
    labels = ["-1", "v0", "v1", "-1", "v1"]
    spans = run_length_spans(labels)
    assert spans == [(0, 1, "-1"), (1, 2, "v0"), (2, 3, "v1"), (3, 4, "-1"), (4, 5, "v1")]
    assert derive_end_version(spans, response_length=5, loss_mask=[0, 1, 1, 0, 1]) == "v1"
    table = analysis.records_to_table(
        [{"group_index": 0, "tokens": [0] * 5, "response_length": 5, "loss_mask": [0, 1, 1, 0, 1],
          "metadata": {"parent_traj_id": "t", "full_versions": labels}}]
    )  # fmt: skip
    assert table.row(0, named=True)["end_version"] == "v1"
    assert table.row(0, named=True)["end_version_derived"] is True
