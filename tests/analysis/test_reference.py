"""The reference model on its own: every docs/semantics.md §7 test vector, plus the fixed decisions.

The differential test trusts ``tests.reference``; these tests are why it may.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, strategies as st

from tests.reference import (
    derive_end_version,
    distinct_real_labels,
    expand_version_spans,
    group_records,
    real_label,
    replay_reference,
)
from tests.strategies import NOT_REAL_LABELS, REAL_LABELS, raw_logs, run_length_spans

_MISSING = object()


def record(
    group: Any,
    trajectory: str | None = None,
    end: Any = _MISSING,
    *,
    segment: int | None = None,
    full_versions: list[Any] | None = None,
    status: str = "completed",
    response_length: int | None = None,
    loss_mask: list[int] | None = None,
) -> dict[str, Any]:
    """A raw slime-style record with Dressage metadata; unset fields are left out."""
    metadata: dict[str, Any] = {}
    raw: dict[str, Any] = {"group_index": group, "status": status, "metadata": metadata}
    if trajectory is not None:
        metadata["parent_traj_id"] = trajectory
    if end is not _MISSING:
        metadata["dressage_end_token_version"] = end
    if segment is not None:
        metadata["segment_index"] = segment
    if full_versions is not None:
        metadata["full_versions"] = full_versions
        raw["tokens"] = list(range(len(full_versions)))
    if response_length is not None:
        raw["response_length"] = response_length
    if loss_mask is not None:
        raw["loss_mask"] = loss_mask
    return raw


def replay(
    records: list[dict[str, Any]], *, k: int = 0, m: int | None = None, b: int = 1
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    result = replay_reference(records, keep_versions=k, max_preempts=m, batch_groups=b)
    return result.decisions, result.summary


def outcomes(decisions: list[dict[str, Any]]) -> list[tuple[str, str, str | None]]:
    return [(d["group_id"], d["decision"], d["stage"]) for d in decisions]


# ---------------------------------------------------------------- §7 labels


@pytest.mark.parametrize("label", ["alpha", "release-candidate"])
def test_real_labels(label: str) -> None:
    assert real_label(label) == label


def test_real_label_is_used_stripped() -> None:
    assert real_label(" weight-current ") == "weight-current"


@pytest.mark.parametrize("label", ["unknown", "-1", None, -1, "", " None ", "UNKNOWN", "none"])
def test_not_real_labels(label: Any) -> None:
    assert real_label(label) is None


def test_integer_label_is_its_string_but_not_zero_padded() -> None:
    assert real_label(3) == real_label("3") == real_label(" 3 ") == "3"
    assert real_label("03") == "03"


def test_padded_and_integer_end_versions_are_one_observed_version() -> None:
    records = [
        record(0, "t", " weight-current "),
        record(1, "t", "weight-current"),
        record(2, "t", 3),
        record(3, "t", "3"),
        record(4, "t", "03"),
    ]
    decisions, summary = replay(records, k=1, b=5)
    assert summary["versions_observed"] == 3
    assert [d["version_index"] for d in decisions] == [0, 0, 1, 1, 2]


# ---------------------------------------------------------------- §7 trajectory version


def test_trajectory_version_is_end_version_of_highest_segment() -> None:
    records = [
        record(0, "t", "alpha", segment=0),
        record(0, "t", "gamma", segment=2),
        record(0, "t", "beta", segment=1),
    ]
    (group,) = group_records(records)
    assert group.trajectory_versions() == [("t", "gamma")]
    _, summary = replay(records)
    assert summary["versions_observed"] == 1


def test_trajectory_version_ties_on_segment_go_to_the_later_record() -> None:
    records = [record(0, "t", "alpha", segment=0), record(0, "t", "beta", segment=0)]
    (group,) = group_records(records)
    assert group.trajectory_versions() == [("t", "beta")]


def test_trajectory_version_comes_from_end_version_not_token_versions() -> None:
    records = [record(0, "t", "new", full_versions=["-1", "old", "new"], response_length=2)]
    (group,) = group_records(records)
    assert group.trajectory_versions() == [("t", "new")]
    decisions, summary = replay(records, k=1)
    assert summary["versions_observed"] == 1
    assert decisions[0]["version_index"] == 0
    # The token versions still give the span.
    assert summary["version_span"]["all"] == {"min": 2, "mean": 2.0, "max": 2}


# ---------------------------------------------------------------- §7 batch-level control


def test_late_seen_label_is_newer_whatever_its_sort_order() -> None:
    records = [
        record("fresh", "t", "alpha"),
        record("newer", "t", "aardvark"),
        record("again", "t", "alpha"),
    ]
    decisions, summary = replay(records, k=1, b=2)
    assert summary["versions_observed"] == 2
    assert outcomes(decisions) == [
        ("fresh", "dropped_stale", "pending"),
        ("newer", "kept", None),
        ("again", "dropped_stale", "arrival"),
    ]


def test_group_with_an_unversioned_record_and_an_old_trajectory_is_stale() -> None:
    records = [
        record(0, "t", "old"),
        record(1, "t", "new"),
        record(2, None),
        record(2, "t", "old"),
        record(3, None),
    ]
    decisions, _ = replay(records, k=1, b=10)
    assert outcomes(decisions) == [
        ("0", "dropped_stale", "pending"),
        ("1", "kept", None),
        ("2", "dropped_stale", "arrival"),
        ("3", "kept", None),
    ]
    assert decisions[2]["version_index"] == 0
    assert decisions[2]["version_gap"] == 1
    assert decisions[3]["version_index"] is None
    assert decisions[3]["version_gap"] is None


def test_pending_old_group_is_dropped_when_a_new_group_arrives() -> None:
    decisions, summary = replay([record(0, "t", "old"), record(1, "t", "new")], k=1, b=2)
    assert outcomes(decisions) == [("0", "dropped_stale", "pending"), ("1", "kept", None)]
    assert summary["groups"]["dropped_stale"] == 1
    assert summary["groups"]["dropped_stale_pending"] == 1
    assert decisions[0]["version_gap"] == 1


def test_gaps_of_a_group_mixing_versions() -> None:
    records = [
        record(0, "t", "middle", status="aborted"),
        record(1, "t", "new", status="aborted"),
        record(2, "long", "middle", segment=1),
        record(2, "short", "new"),
        record(2, "long", "old", segment=0),
    ]
    decisions, summary = replay(records, k=3, b=1)
    assert outcomes(decisions) == [
        ("0", "failed", None),
        ("1", "failed", None),
        ("2", "kept", None),
    ]
    assert summary["versions_observed"] == 2  # current index 1, cutoff max(0, 2 - 3) = 0
    assert summary["version_gap"] == {"min": 0, "mean": 0.5, "max": 1}
    assert decisions[2]["version_index"] == 0
    assert decisions[2]["version_gap"] == 1


def test_one_batch_of_second_and_third_group() -> None:
    records = [record(0, "t", "old"), record(1, "t", "new"), record(2, "t", "new")]
    decisions, summary = replay(records, k=1, b=2)
    assert outcomes(decisions) == [
        ("0", "dropped_stale", "pending"),
        ("1", "kept", None),
        ("2", "kept", None),
    ]
    assert [d["batch"] for d in decisions] == [None, 0, 0]
    assert summary["batches"] == {"emitted": 1, "last_partial": False}


def test_versions_are_observed_at_keep_versions_zero() -> None:
    records = [record(0, "t", "a"), record(1, "t", "b"), record(2, "t", "c")]
    decisions, summary = replay(records, k=0, b=3)
    assert [d["decision"] for d in decisions] == ["kept"] * 3
    assert [d["version_gap"] for d in decisions] == [2, 1, 0]
    assert summary["version_gap"] == {"min": 0, "mean": 1.0, "max": 2}
    assert summary["versions_observed"] == 3


def test_records_without_trajectory_id_never_advance_the_tracker() -> None:
    records = [record(0, "t", "old"), record(1, None, "new")]
    decisions, summary = replay(records, k=1, b=2)
    assert summary["versions_observed"] == 1
    assert [d["decision"] for d in decisions] == ["kept", "kept"]
    assert decisions[1]["version_index"] is None


# ---------------------------------------------------------------- §7 spans and partial rollouts


def test_spans_over_segments_and_trajectories() -> None:
    records = [
        record(0, "t1", full_versions=["-1", 1, 1]),
        record(0, "t1", full_versions=[1, 2]),
        record(0, "t2", full_versions=["-1", 3]),
    ]
    (group,) = group_records(records)
    assert [t.version_span() for t in group.trajectories()] == [2, 1]
    _, summary = replay(records)
    assert summary["version_span"]["all"] == {"min": 1, "mean": 1.5, "max": 2}
    assert summary["version_span"]["kept"] == {"min": 1, "mean": 1.5, "max": 2}


def test_span_counts_each_label_once() -> None:
    assert distinct_real_labels(["v1", "v1", "unknown", "v2", "v1", "v3"]) == ["v1", "v2", "v3"]


@pytest.mark.parametrize(("max_preempts", "decision"), [(1, "rejected_span"), (2, "kept")])
def test_span_three_is_two_switches(max_preempts: int, decision: str) -> None:
    records = [record(0, "t", "v3", full_versions=["v1", "v1", "unknown", "v2", "v1", "v3"])]
    decisions, _ = replay(records, m=max_preempts)
    assert decisions[0]["decision"] == decision


@pytest.mark.parametrize(
    ("labels", "decision"), [(["a", "b"], "rejected_span"), (["a", "a"], "kept")]
)
def test_max_preempts_zero_rejects_any_switch(labels: list[str], decision: str) -> None:
    decisions, _ = replay([record(0, "t", full_versions=labels)], m=0)
    assert decisions[0]["decision"] == decision


def test_rejected_group_is_not_observed_and_counted_as_lost() -> None:
    records = [
        record(0, "t", "new", full_versions=["old", "new"], response_length=2),
        record(0, "u", "new", full_versions=["new"], response_length=1),
        record(1, "t", "old", response_length=3),
    ]
    decisions, summary = replay(records, k=1, m=0, b=1)
    assert decisions[0] == {
        "group_id": "0",
        "decision": "rejected_span",
        "stage": None,
        "batch": None,
        "version_index": None,
        "version_gap": None,
    }
    assert decisions[1]["decision"] == "kept"
    assert summary["versions_observed"] == 1
    assert summary["samples"]["rejected_span"] == 2
    assert summary["trajectories"]["rejected_span"] == 2
    assert summary["tokens"]["rejected_span"] == 3
    assert summary["version_span"]["all"] == {"min": 1, "mean": 1.5, "max": 2}
    assert summary["version_span"]["kept"] == {"min": None, "mean": None, "max": None}


def test_trajectory_without_token_versions_is_never_rejected() -> None:
    decisions, summary = replay([record(0, "t", "a"), record(0, "t", "b", segment=1)], m=0)
    assert decisions[0]["decision"] == "kept"
    assert summary["version_span"]["all"] == {"min": None, "mean": None, "max": None}


def test_trajectory_with_only_unreal_token_versions_has_span_zero() -> None:
    _, summary = replay([record(0, "t", full_versions=["-1", "unknown", None])], m=0)
    assert summary["version_span"]["all"] == {"min": 0, "mean": 0.0, "max": 0}


def test_id_less_record_is_its_own_trajectory_for_the_span_check() -> None:
    records = [record(0, None, full_versions=["a"]), record(0, None, full_versions=["b"])]
    decisions, summary = replay(records, m=0)
    assert decisions[0]["decision"] == "kept"
    assert summary["trajectories"]["total"] == 2


def test_trajectory_identity_includes_the_group() -> None:
    records = [record(0, "t", full_versions=["a"]), record(1, "t", full_versions=["b"])]
    decisions, summary = replay(records, m=0)
    assert [d["decision"] for d in decisions] == ["kept", "kept"]
    assert summary["trajectories"]["total"] == 2


# ---------------------------------------------------------------- §7 derivation


def test_derivation_from_loss_mask() -> None:
    versions = ["-1", "v0", "v1", "-1", "v1"]
    assert derive_end_version(versions, response_length=5, loss_mask=[0, 1, 1, 0, 1]) == "v1"
    assert derive_end_version(versions, response_length=5, loss_mask=[0, 1, 0, 0, 0]) == "v0"


def test_run_length_spans_of_the_spec_example() -> None:
    versions = ["-1", "v0", "v1", "-1", "v1"]
    spans = run_length_spans(versions)
    assert [(s["start"], s["end"], s["version"]) for s in spans] == [
        (0, 1, "-1"),
        (1, 2, "v0"),
        (2, 3, "v1"),
        (3, 4, "-1"),
        (4, 5, "v1"),
    ]
    assert expand_version_spans(spans) == versions


@given(st.lists(st.sampled_from(REAL_LABELS + NOT_REAL_LABELS), max_size=12))
def test_run_length_spans_round_trip(labels: list[Any]) -> None:
    spans = run_length_spans(labels)
    assert expand_version_spans(spans) == labels
    assert [s["start"] for s in spans[1:]] == [s["end"] for s in spans[:-1]]


@pytest.mark.parametrize("form", ["full_versions", "version_spans"])
@pytest.mark.parametrize("end", [_MISSING, None])
def test_missing_or_null_end_version_is_derived(form: str, end: Any) -> None:
    versions = ["-1", "v0", "v1", "-1", "v1"]
    raw = record(0, "t", end, response_length=5, loss_mask=[0, 1, 0, 0, 0])
    if form == "full_versions":
        raw["metadata"]["full_versions"] = versions
    else:
        raw["metadata"]["version_spans"] = run_length_spans(versions)
    (group,) = group_records([raw])
    assert group.trajectory_versions() == [("t", "v0")]


def test_present_unreal_end_version_is_not_derived() -> None:
    raw = record(0, "t", "-1", full_versions=["v0"], response_length=1)
    (group,) = group_records([raw])
    assert group.trajectory_versions() == []


def test_derivation_without_loss_mask_uses_last_real_response_label() -> None:
    assert derive_end_version(["a", "b", "-1"], response_length=2, loss_mask=None) == "b"
    assert derive_end_version(["a", "-1"], response_length=1, loss_mask=None) is None


def test_derivation_response_is_last_loss_mask_tokens_else_whole_sequence() -> None:
    assert derive_end_version(["a", "b", "c"], response_length=None, loss_mask=[1, 0]) == "b"
    assert derive_end_version(["a", "b", "-1"], response_length=None, loss_mask=None) == "b"


def test_derivation_from_empty_response_finds_nothing() -> None:
    assert derive_end_version(["a", "b"], response_length=0, loss_mask=[]) is None


# ---------------------------------------------------------------- fixed decisions


def test_arrival_order_is_first_appearance_of_a_group() -> None:
    records = [record(5, "t", "a"), record(2, "t", "a"), record(5, "u", "a")]
    decisions, summary = replay(records, b=10)
    assert [d["group_id"] for d in decisions] == ["5", "2"]
    assert summary["samples"]["kept"] == 3


def test_group_field_precedence() -> None:
    records: list[dict[str, Any]] = [
        {"group_index": 7, "instance_id": "x", "metadata": {"dressage_return_async_group_id": "y"}},
        {
            "instance_id": "x",
            "metadata": {"dressage_return_async_group_id": "y", "instance_id": "z"},
        },
        {"instance_id": "x", "metadata": {"instance_id": "z"}},
        {"metadata": {"instance_id": "z"}},
        {"group_index": "7", "metadata": {}},
    ]
    decisions, summary = replay(records, b=10)
    assert [d["group_id"] for d in decisions] == ["7", "y", "x", "z"]
    assert summary["samples"]["total"] == 5


def test_trajectory_field_precedence() -> None:
    records = [
        {"group_index": 0, "trajectory_id": "a", "metadata": {"parent_traj_id": "p"}},
        {"group_index": 0, "trajectory_id": "a", "session_id": "s", "metadata": {}},
        {"group_index": 0, "session_id": "p", "metadata": {}},
    ]
    (group,) = group_records(records)
    assert [t.key for t in group.trajectories()] == ["id:p", "id:a"]


def test_segment_index_fields() -> None:
    records = [
        {
            "group_index": 0,
            "segment_index": 2,
            "metadata": {"parent_traj_id": "t", "dressage_end_token_version": "late"},
        },
        {
            "group_index": 0,
            "metadata": {
                "parent_traj_id": "t",
                "dressage_end_token_version": "meta",
                "segment_index": 1,
            },
        },
        {
            "group_index": 0,
            "metadata": {
                "parent_traj_id": "t",
                "dressage_end_token_version": "nul",
                "segment_index": None,
            },
        },
    ]
    (group,) = group_records(records)
    assert [r.segment_index for r in group.records] == [2, 1, 0]
    assert group.trajectory_versions() == [("t", "late")]


def test_rejection_takes_precedence_over_failure() -> None:
    records = [record(0, "t", full_versions=["a", "b"], status="aborted")]
    decisions, summary = replay(records, m=0)
    assert decisions[0]["decision"] == "rejected_span"
    assert summary["groups"]["failed"] == 0


def test_failed_group_is_observed_and_drops_pending_groups() -> None:
    records = [
        record(0, "t", "old"),
        record(1, "t", "new", status="Aborted"),
        record(2, "t", "old"),
    ]
    decisions, summary = replay(records, k=1, b=2)
    assert outcomes(decisions) == [
        ("0", "dropped_stale", "pending"),
        ("1", "failed", None),
        ("2", "dropped_stale", "arrival"),
    ]
    assert decisions[1]["version_index"] == 1
    assert decisions[1]["version_gap"] == 0
    assert summary["batches"] == {"emitted": 0, "last_partial": False}
    assert summary["version_gap"] == {"min": None, "mean": None, "max": None}


def test_failed_status_other_than_aborted_is_not_failed() -> None:
    decisions, _ = replay([record(0, "t", "a", status="failed")])
    assert decisions[0]["decision"] == "kept"


def test_batches_and_partial_last_batch() -> None:
    records = [record(g, "t", "a") for g in range(5)]
    decisions, summary = replay(records, k=1, b=2)
    assert [d["batch"] for d in decisions] == [0, 0, 1, 1, 2]
    assert summary["batches"] == {"emitted": 3, "last_partial": True}


def test_version_gap_is_taken_at_emission() -> None:
    # Group 0 waits in the batch while "b" is observed (K=0: nothing is dropped).
    records = [record(0, "t", "a"), record(1, "t", "b")]
    decisions, summary = replay(records, k=0, b=2)
    assert [d["version_gap"] for d in decisions] == [1, 0]
    assert summary["version_gap"] == {"min": 0, "mean": 0.5, "max": 1}


def test_token_counts_and_unknown_tokens() -> None:
    known = [record(0, "t", "a", response_length=4), record(1, "t", "a", loss_mask=[1, 0, 1])]
    _, summary = replay(known)
    assert summary["tokens"]["total"] == 7
    assert summary["tokens"]["kept"] == 7
    _, summary = replay([*known, record(2, "t", "a")])
    assert set(summary["tokens"].values()) == {None}


def test_summary_shape() -> None:
    _, summary = replay([record(0, "t", "a")], k=2, m=1, b=3)
    assert summary["config"] == {"keep_versions": 2, "max_preempts": 1, "batch_groups": 3}
    count_keys = {
        "total",
        "kept",
        "dropped_stale",
        "dropped_stale_arrival",
        "dropped_stale_pending",
        "rejected_span",
        "failed",
    }
    for section in ("groups", "samples", "trajectories", "tokens"):
        assert set(summary[section]) == count_keys


@pytest.mark.parametrize(("k", "m", "b"), [(-1, None, 1), (0, -1, 1), (0, None, 0)])
def test_invalid_settings(k: int, m: int | None, b: int) -> None:
    with pytest.raises(ValueError):
        replay([record(0, "t", "a")], k=k, m=m, b=b)


@pytest.mark.slow
@given(raw_logs())
def test_counts_add_up_on_generated_logs(records: list[dict[str, Any]]) -> None:
    for k, m, b in [(0, None, 1), (1, 0, 2), (2, 1, 3)]:
        decisions, summary = replay(records, k=k, m=m, b=b)
        for section in ("groups", "samples", "trajectories"):
            counts = summary[section]
            assert counts["dropped_stale"] == (
                counts["dropped_stale_arrival"] + counts["dropped_stale_pending"]
            )
            assert counts["total"] == sum(
                counts[d] for d in ("kept", "dropped_stale", "rejected_span", "failed")
            )
        assert summary["groups"]["total"] == len(decisions)
        assert summary["samples"]["total"] == len(records)
        kept_batches = [d["batch"] for d in decisions if d["decision"] == "kept"]
        assert sorted(kept_batches) == kept_batches
        assert all(kept_batches.count(n) <= b for n in set(kept_batches))
