"""A run folder's sweep on Dressage's own loop (docs/semantics.md §12.7): its row at the
run's own setting is ``replay RUN`` at that setting, for both loops; a row at another M
says it is not applied; a row at another K says how much of it rests on attempts the run
did not make, counted here again from the replay's own decisions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import analysis
from tests.real_runs import FULLY_FIXTURES, RUNS, extract_runs


@pytest.fixture(scope="module")
def every_run(
    run_folders: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    fully = extract_runs(FULLY_FIXTURES, tmp_path_factory.mktemp("fully_sweep"))
    return {
        **{name: run_folders[name] for name in RUNS},
        "fa-k2-m1-n4-s33": fully["fa-k2-m1-n4-s33"],
    }


def _own(folder: Path) -> tuple[int, int | None]:
    """The run's K and M as its builder recorded them (run.json: the replay never reads it)."""
    made = json.loads((folder / "run.json").read_text())
    return int(made["keep_versions"] or 0), made["max_preempts"]


def _pct(part: int, total: int) -> float:
    return 100.0 * part / total


@pytest.mark.parametrize("name", [*RUNS, "fa-k2-m1-n4-s33"])
def test_the_row_at_the_runs_own_setting_is_replay_run(
    name: str, every_run: dict[str, Path]
) -> None:
    folder = every_run[name]
    k, m = _own(folder)
    swept = analysis.sweep_log(folder, keep_versions=[k, k + 1], max_preempts=[m])
    assert swept.engine is analysis.Engine.RUN_LOOP
    assert isinstance(swept.result, analysis.SweepResult)
    rows = swept.result.rows
    assert rows["engine"].unique().to_list() == ["dressage-loop"]
    own = rows.filter(pl.col("own_setting"))
    assert own.height == 1 and own["keep_versions"][0] == k
    row = own.row(0, named=True)
    replayed = analysis.replay(folder, analysis.ReplayConfig(keep_versions=k))
    assert replayed.engine is analysis.Engine.RUN_LOOP
    figures = replayed.to_dict()
    assert figures["engine"] == "dressage-loop" and row["loop"] == figures["loop"]
    groups, total = figures["groups"], figures["groups"]["total"]
    for column, key in [
        ("groups_kept_pct", "kept"), ("dropped_stale_pct", "dropped_stale"),
        ("dropped_arrival_pct", "dropped_stale_arrival"),
        ("dropped_pending_pct", "dropped_stale_pending"), ("rejected_span_pct", "rejected_span"),
        ("failed_pct", "failed"), ("leftover_pct", "leftover"),
        ("discarded_surplus_pct", "discarded_surplus"), ("unknown_pct", "unknown"),
    ]:  # fmt: skip
        assert row[column] == pytest.approx(_pct(groups[key], total)), column
    assert row["version_gap_mean"] == pytest.approx(figures["version_gap"]["mean"])
    assert row["version_gap_max"] == figures["version_gap"]["max"]
    assert row["batches_emitted"] == figures["batches"]["emitted"]
    assert row["max_preempts_applied"] and row["max_preempts_replayed"] == m
    # the run filled every batch with attempts it made, and needed none of them less
    assert (row["unfilled_batches"], row["groups_short"], row["unneeded_attempts"]) == (0, 0, 0)


def _short(figures: dict[str, Any], attempts: pl.DataFrame, batch_groups: int) -> tuple[int, int]:
    """Rollout calls with fewer than B kept attempts, and the attempts they lack."""
    kept = attempts.filter(pl.col("decision") == "kept").group_by("batch").len()
    per_call = dict(kept.iter_rows())
    lacking = [
        max(0, batch_groups - per_call.get(i, 0)) for i in range(figures["batches"]["emitted"])
    ]
    return sum(1 for n in lacking if n), sum(lacking)


@pytest.mark.parametrize("name", ["k2-m1", "k3-m2-n8"])
def test_a_what_if_says_what_rests_on_attempts_the_run_did_not_make(
    name: str, every_run: dict[str, Path]
) -> None:
    folder = every_run[name]
    k, m = _own(folder)
    swept = analysis.sweep_log(
        folder, keep_versions=[k - 1, k, k + 2], max_preempts=[m], what_if="replay"
    )
    assert isinstance(swept.result, analysis.SweepResult)
    rows = {row["keep_versions"]: row for row in swept.result.rows.iter_rows(named=True)}
    own_leftover = analysis.replay(folder, analysis.ReplayConfig(keep_versions=k)).to_dict()[
        "groups"
    ]["leftover"]
    stricter_short = 0
    for other in (k - 1, k + 2):
        replayed = analysis.replay(folder, analysis.ReplayConfig(keep_versions=other))
        assert isinstance(replayed.result, analysis.LoopReplay)
        figures = replayed.to_dict()
        row = rows[other]
        assert not row["own_setting"]
        batches, groups = _short(figures, replayed.result.attempts, row["batch_groups"])
        assert (row["unfilled_batches"], row["groups_short"]) == (batches, groups)
        assert row["unneeded_attempts"] == max(0, figures["groups"]["leftover"] - own_leftover)
        if other < k:
            stricter_short = groups
    # a stricter K drops more than the run did: the run's attempts cannot fill its batches
    assert stricter_short > 0


def test_a_row_at_another_m_says_it_is_not_applied(every_run: dict[str, Path]) -> None:
    folder = every_run["k2-m1"]
    swept = analysis.sweep_log(
        folder, keep_versions=[1, 2], max_preempts=[None, 1, 3], what_if="replay"
    )
    assert isinstance(swept.result, analysis.SweepResult)
    rows = swept.result.rows
    applied = rows.filter(pl.col("max_preempts_applied"))
    assert applied["max_preempts"].unique().to_list() == [1]
    others = rows.filter(~pl.col("max_preempts_applied"))
    assert others.height == 4 and not others["pareto"].any()
    assert others["max_preempts_replayed"].unique().to_list() == [1]
    figures = ["groups_kept_pct", "rejected_span_pct", "version_gap_mean"]
    for k in (1, 2):
        same = rows.filter(pl.col("keep_versions") == k).select(figures).unique()
        assert same.height == 1  # the run's own span rejections, whatever M the row names
    own_m_only = analysis.sweep_log(folder, keep_versions=[2])
    assert isinstance(own_m_only.result, analysis.SweepResult)
    assert own_m_only.result.rows["max_preempts"].to_list() == [1]


def test_the_simple_loop_is_named_and_kept_for_logs(small_logs: dict[str, Path]) -> None:
    path = small_logs["jsonl"]
    swept = analysis.sweep_log(path, keep_versions=[1], max_preempts=[None])
    assert swept.engine is analysis.Engine.SIMPLE_LOOP
    assert isinstance(swept.result, analysis.SweepResult)
    assert swept.result.rows["engine"].to_list() == ["simple-loop"]
    assert analysis.replay(path, analysis.ReplayConfig(keep_versions=1)).to_dict()["engine"] == (
        "simple-loop"
    )


def test_the_library_sweep_picks_the_runs_loop_for_a_folder(
    every_run: dict[str, Path], small_logs: dict[str, Path]
) -> None:
    swept = analysis.sweep(every_run["k2-m1"], keep_versions=[2])
    assert isinstance(swept, analysis.Swept) and swept.engine is analysis.Engine.RUN_LOOP
    prepared = analysis.load_log(small_logs["jsonl"]).prepared
    rows = analysis.sweep(prepared, keep_versions=[1], max_preempts=[None], batch_groups=4)
    assert isinstance(rows, analysis.SweepResult) and rows.engine == "simple-loop"
