"""A sweep keeps one row per setting, not each setting's full replay (issue 18: a log of
a version per group made every full result as large as the log, times every setting),
and the figures draw a bounded number of bars whatever the log."""

from __future__ import annotations

import gc
import tracemalloc
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import analysis
from analysis.engine import grid
from analysis.engine.prepare import real_token_labels
from analysis.engine.results import replay as replay_of_grid  # the replay grid.py calls
from analysis.views._figures import MAX_BARS, capped_bars
from analysis.views.bias import arrival_delays
from tests.strategies import raw_logs

ROOT = Path(__file__).resolve().parents[2]
GRID: dict[str, Any] = {"keep_versions": [0, 1, 2, 3, 4], "max_preempts": [None, 0, 1, 2, 3]}


def flood(groups: int) -> analysis.PreparedLog:
    """``groups`` groups, each its own end version, one or two trajectories each, every
    third trajectory spanning the version before its own."""
    records: list[dict[str, Any]] = []
    for group in range(groups):
        for trajectory in range(1 + group % 2):
            meta: dict[str, Any] = {
                "parent_traj_id": f"g{group}-{trajectory}",
                "dressage_end_token_version": str(group),
            }
            if group and len(records) % 3 == 0:
                meta["version_spans"] = [
                    {"start": 0, "end": 4, "version": str(group - 1)},
                    {"start": 4, "end": 10, "version": str(group)},
                ]
            records.append({"group_index": group, "response_length": 10, "metadata": meta})
    return analysis.prepare(analysis.records_to_table(records))


def peak_bytes(work: Callable[[], object]) -> int:
    """The most Python and NumPy memory ``work`` held at once (tracemalloc)."""
    gc.collect()
    tracemalloc.start()
    try:
        work()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("batch_groups", [1, 4])
def test_a_sweep_holds_about_one_replay_not_one_per_setting(batch_groups: int) -> None:
    prepared = flood(20_000)
    run = dict(GRID, batch_groups=batch_groups)
    analysis.sweep(prepared, **run)  # the caches every setting shares, filled once
    config = analysis.ReplayConfig(keep_versions=1, max_preempts=1, batch_groups=batch_groups)
    one = peak_bytes(lambda: analysis.replay(prepared, config))
    every = peak_bytes(lambda: analysis.sweep(prepared, **run))
    # Kept, the 25 full results took 25 times one (and more: a tuple per batch).
    assert every < 2 * one, (every, one)


def test_each_full_result_is_released_once_its_row_is_taken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    prepared = flood(500)
    alive: list[weakref.ref[analysis.ReplayResult]] = []
    real = replay_of_grid

    def spy(*args: Any, **kwargs: Any) -> analysis.ReplayResult:
        for earlier in alive:
            assert earlier() is None, "an earlier setting's full result is still held"
        result = real(*args, **kwargs)
        alive.append(weakref.ref(result))
        return result

    monkeypatch.setattr(grid, "replay", spy)
    swept = analysis.sweep(prepared, **GRID, batch_groups=2)
    assert len(alive) == swept.rows.height == 25
    gc.collect()
    assert all(ref() is None for ref in alive)


def test_a_setting_replayed_again_is_the_one_that_gave_its_row() -> None:
    prepared = flood(300)
    swept = analysis.sweep(prepared, **GRID, batch_groups=3)
    assert len(swept.results) == swept.rows.height
    for position in (0, 7, 24):
        again = swept.results[position]
        row = swept.rows.row(position, named=True)
        assert (again.config.keep_versions, again.config.max_preempts) == (
            row["keep_versions"], row["max_preempts"],
        )  # fmt: skip
        fresh = analysis.replay(prepared, again.config)
        assert again.summary == fresh.summary
        assert again.batches.equals(fresh.batches)
        assert row["batches_emitted"] == again.batches.height
    same_m = swept.results.where(max_preempts=1)
    assert [c.keep_versions for c in same_m.configs] == GRID["keep_versions"]
    assert all(r.config.max_preempts == 1 for r in same_m)


def test_capped_bars_sum_the_tail_into_the_last_bar() -> None:
    assert capped_bars([3, 5]) == ([3, 4, 5], None)
    bars, tail = capped_bars([0, 10**6])
    assert len(bars) == MAX_BARS and tail == MAX_BARS - 1


def test_a_gap_of_hundreds_of_thousands_draws_a_bounded_histogram() -> None:
    """With K off, a group of the first version arriving after 100,000 others has a gap
    of 100,000: one bar per gap value was a figure of 100,000 bars per setting."""
    records = [
        {
            "group_index": g,
            "metadata": {"parent_traj_id": f"t{g}", "dressage_end_token_version": str(g)},
        }
        for g in range(1, 100_001)
    ] + [
        {
            "group_index": 0,
            "metadata": {"parent_traj_id": "late", "dressage_end_token_version": "1"},
        }
    ]
    prepared = analysis.prepare(analysis.records_to_table(records))
    figure = analysis.make_plot(
        "gaps", prepared, keep_versions=[0], max_preempts=[None], batch_groups=1
    )
    ax = figure.axes[0]
    bars = [patch for container in ax.containers for patch in container]
    assert 0 < len(bars) <= MAX_BARS
    ticks = [tick.get_text() for tick in ax.get_xticklabels()]
    assert ticks[-1] == f">={MAX_BARS - 1}"
    # Every kept trajectory is counted: the bars add up to 100%.
    assert sum(bar.get_height() for bar in bars) == pytest.approx(100.0)


@pytest.mark.parametrize("source", ["sample", "flood"])
def test_kept_gaps_are_the_trajectory_outcomes_gaps(source: str) -> None:
    """The gaps figure reads the kept gaps from the per-group arrays: the same values as
    the non-null version gaps of trajectory_outcomes, setting by setting."""
    if source == "sample":
        prepared = analysis.prepare(analysis.load_logs([ROOT / "sample_data" / "rollouts.jsonl"]))
    else:
        prepared = flood(2_000)
    gaps = 0
    for keep, limit, batch in [(0, None, 3), (1, 0, 2), (2, 1, 4), (3, None, 1)]:
        config = analysis.ReplayConfig(keep_versions=keep, max_preempts=limit, batch_groups=batch)
        result = analysis.replay(prepared, config)
        outcomes = analysis.trajectory_outcomes(prepared, result)["version_gap"].drop_nulls()
        assert sorted(result.kept_gaps().tolist()) == sorted(outcomes.to_list())
        gaps += len(outcomes.filter(outcomes > 0))
    assert gaps  # some gaps are not 0


def arrival_delays_one_group_at_a_time(
    prepared: analysis.PreparedLog, table: pl.DataFrame
) -> list[int | None]:
    """The plain loop ``arrival_delays`` was: each group's labels indexed as observed."""
    labels = (
        real_token_labels(table, by="group_id").group_by("group_id").agg(pl.col("label").unique())
    )
    token_labels = prepared.groups.select("group_id").join(
        labels, on="group_id", how="left", maintain_order="left"
    )["label"]
    index: dict[str, int] = {}
    delays: list[int | None] = []
    for own, versions in zip(
        token_labels.to_list(), prepared.trajectory_versions().to_list(), strict=True
    ):
        for label in versions:
            index.setdefault(label, len(index))
        known = [index[label] for label in (*(own or ()), *versions) if label in index]
        delays.append(len(index) - 1 - min(known) if known else None)
    return delays


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=raw_logs())
def test_arrival_delays_on_arrays_agree_with_the_plain_loop(records: list[dict[str, Any]]) -> None:
    table = analysis.records_to_table(records)
    prepared = analysis.prepare(table)
    fast = arrival_delays(prepared, table)
    assert fast["group_id"].to_list() == prepared.groups["group_id"].to_list()
    assert fast["arrival_delay"].to_list() == arrival_delays_one_group_at_a_time(prepared, table)


@settings(max_examples=300, deadline=None)
@given(
    labels=st.lists(
        st.integers(0, 40).map(str)
        | st.integers(0, 9).map(lambda n: f"0{n}")
        | st.sampled_from(["alpha", "٣", "1" * 19]),
        max_size=30,
    )
)
def test_late_older_labels_on_arrays_agree_with_the_plain_loop(labels: list[str]) -> None:
    from analysis.table import labels as module

    def plain(versions: list[str]) -> list[tuple[str, str]]:
        found = []
        highest: tuple[tuple[int, str], str] | None = None
        for label in versions:
            if not (label.isascii() and label.isdigit()):
                continue
            digits = label.lstrip("0")
            number = (len(digits), digits)
            if highest is not None and number < highest[0]:
                found.append((label, highest[1]))
            elif highest is None or number > highest[0]:
                highest = (number, label)
        return found

    assert module.late_older_labels(labels) == plain(labels)
    numbers = [label for label in labels if label.isascii() and label.isdigit() and len(label) < 19]
    assert module._late_older_numbers(numbers) == (plain(numbers) if numbers else None)


def test_decision_names_are_the_frames_decisions() -> None:
    """who_gets_dropped reads decisions from the arrays: the same as the frames'."""
    prepared = analysis.prepare(analysis.load_logs([ROOT / "sample_data" / "rollouts.jsonl"]))
    for keep, limit in [(1, 0), (2, None), (0, 1)]:
        config = analysis.ReplayConfig(keep_versions=keep, max_preempts=limit, batch_groups=2)
        result = analysis.replay(prepared, config)
        assert result.decision_names().to_list() == result.decisions["decision"].to_list()
        outcomes = analysis.trajectory_outcomes(prepared, result)
        by_trajectory = result.decision_names(per="trajectory")
        assert by_trajectory.to_list() == outcomes["decision"].to_list()
        assert len(set(by_trajectory.to_list())) > 1
