"""Differential test: the fast engine agrees with the reference model on generated logs.

Each example writes a hypothesis-generated raw log to a JSONL file, loads it with
``analysis.load_logs`` and replays it under a few (K, M, B) settings; every decision
and every summary figure of ``tests.reference`` must come out the same.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from polars.testing import assert_frame_equal

import analysis
from tests.reference import replay_reference
from tests.strategies import raw_logs

# The module, not the function of the same name that the package exports.
prepare_module = importlib.import_module("analysis.engine.prepare")

DECISION_COLUMNS = ["group_id", "decision", "stage", "batch", "version_index", "version_gap"]

replay_settings = st.tuples(
    st.integers(0, 4),  # keep_versions
    st.none() | st.integers(0, 3),  # max_preempts
    st.integers(1, 6),  # batch_groups
)


def write_jsonl(records: list[dict[str, Any]], path: Path) -> Path:
    """Write one record per line, as a slime-style JSONL log."""
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path


def expected_summary(reference: Any) -> Any:
    """The reference summary with every mean wrapped in ``pytest.approx``."""
    if isinstance(reference, dict):
        return {
            key: pytest.approx(value)
            if key == "mean" and value is not None
            else expected_summary(value)
            for key, value in reference.items()
        }
    return reference


def project(engine: Any, reference: Any) -> Any:
    """The part of the engine's summary that has the reference's shape (extra keys left out)."""
    if isinstance(reference, dict) and isinstance(engine, dict):
        return {
            key: project(engine.get(key, "<missing>"), value) for key, value in reference.items()
        }
    return engine


@pytest.mark.slow
@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    records=raw_logs(),
    configurations=st.lists(replay_settings, min_size=1, max_size=3, unique=True),
)
def test_engine_agrees_with_reference(
    tmp_path: Path,
    records: list[dict[str, Any]],
    configurations: list[tuple[int, int | None, int]],
) -> None:
    table = analysis.load_logs([write_jsonl(records, tmp_path / "log.jsonl")])
    for keep_versions, max_preempts, batch_groups in configurations:
        expected = replay_reference(
            records,
            keep_versions=keep_versions,
            max_preempts=max_preempts,
            batch_groups=batch_groups,
        )
        result = analysis.replay(
            table,
            analysis.ReplayConfig(
                keep_versions=keep_versions,
                max_preempts=max_preempts,
                batch_groups=batch_groups,
            ),
        )
        assert result.decisions.select(DECISION_COLUMNS).to_dicts() == expected.decisions
        summary = result.summary.to_dict()
        assert project(summary, expected.summary) == expected_summary(expected.summary)


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(records=raw_logs())
def test_single_record_shortcut_agrees_with_grouping(records: list[dict[str, Any]]) -> None:
    """prepare() reads single-record trajectories without grouping; grouping every
    trajectory instead must give the same facts, arrays and replay."""
    table = analysis.records_to_table(records)
    fast = analysis.prepare(table)
    with pytest.MonkeyPatch.context() as patch:
        # Only id-less records count as single: every other trajectory is grouped.
        patch.setattr(
            prepare_module,
            "single_record_rows",
            lambda groups, ids, codes: ids.is_null().to_numpy(),
        )
        grouped = analysis.prepare(table)
    assert_frame_equal(fast.groups, grouped.groups)
    assert_frame_equal(fast.trajectories, grouped.trajectories)
    assert fast.trajectory_versions().to_list() == grouped.trajectory_versions().to_list()
    for name in ("codes", "owner", "samples", "trajectories", "tokens", "max_switches", "span"):
        assert getattr(fast.arrays, name).tolist() == getattr(grouped.arrays, name).tolist(), name
    assert fast.arrays.labels == grouped.arrays.labels
    config = analysis.ReplayConfig(keep_versions=1, max_preempts=0, batch_groups=2)
    assert_frame_equal(
        analysis.replay(fast, config).decisions, analysis.replay(grouped, config).decisions
    )
