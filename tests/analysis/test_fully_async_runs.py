"""The loop replay against three runs of Dressage's fully-async loop
(``fully_async_rollout.py``) and what Dressage decided (``truth.jsonl``, which the replay
does not read): the loop told from the files, attempts without a start rollout kept apart,
and the surplus a call polled and threw away (docs/semantics.md §12.1, §12.4)."""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from analysis.engine.run_loop.replay import LoopReplay, replay_run
from analysis.formats.dressage.run import RunLog, read_run
from tests.real_runs import (
    FULLY_DECIDED,
    FULLY_FIXTURES,
    FULLY_RUNS,
    by_trajectory,
    disagreements,
    extract_runs,
)


@pytest.fixture(scope="module")
def fully_folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return extract_runs(FULLY_FIXTURES, tmp_path_factory.mktemp("fully_async"))


@pytest.fixture(scope="module")
def fully_runs(fully_folders: dict[str, Path]) -> dict[str, RunLog]:
    return {name: read_run(folder) for name, folder in fully_folders.items()}


@pytest.fixture(scope="module")
def fully_settings(fully_folders: dict[str, Path]) -> dict[str, dict[str, Any]]:
    return {n: json.loads((f / "run.json").read_text()) for n, f in fully_folders.items()}


@pytest.fixture(scope="module")
def fully_truth(fully_folders: dict[str, Path]) -> dict[str, list[dict[str, Any]]]:
    return {
        name: [json.loads(line) for line in (folder / "truth.jsonl").read_text().splitlines()]
        for name, folder in fully_folders.items()
    }


@pytest.fixture(scope="module")
def fully_replays(
    fully_runs: dict[str, RunLog], fully_settings: dict[str, dict[str, Any]]
) -> dict[str, LoopReplay]:
    return {
        name: replay_run(run, keep_versions=fully_settings[name]["keep_versions"])
        for name, run in fully_runs.items()
    }


def test_the_fixtures_are_the_fully_async_runs(fully_folders: dict[str, Path]) -> None:
    assert sorted(fully_folders) == sorted(FULLY_RUNS)


@pytest.mark.parametrize("name", FULLY_RUNS)
def test_the_loop_is_told_by_the_log(name: str, fully_runs: dict[str, RunLog]) -> None:
    run = fully_runs[name]
    assert run.loop == "fully"
    assert "dressage_log.txt" in run.loop_reason


@pytest.mark.parametrize("name", FULLY_RUNS)
def test_attempts_are_dressages_own_without_a_start_rollout(
    name: str, fully_runs: dict[str, RunLog], fully_truth: dict[str, list[dict[str, Any]]]
) -> None:
    """Every truth attempt is one replayed attempt and no two share one (the 16-prompt run
    draws each prompt three times or more)."""
    owner = dict(fully_runs[name].trajectories.select("trajectory_id", "attempt_id").iter_rows())
    truth_of: dict[str, set[int]] = defaultdict(set)
    for attempt in fully_truth[name]:
        ids = {owner[s] for s in attempt["session_ids"]}
        assert len(ids) == 1, (attempt["group_id"], ids)
        truth_of[ids.pop()].add(attempt["group_id"])
    assert [a for a, groups in truth_of.items() if len(groups) > 1] == []
    assert len(truth_of) == fully_runs[name].attempts.height
    # retries are linked to the attempt they retry
    retry_of = dict(fully_runs[name].attempts.select("attempt_id", "retry_of").iter_rows())
    gid = {next(iter(groups)): a for a, groups in truth_of.items()}
    for attempt in fully_truth[name]:
        expected = None if attempt["retry_of"] is None else gid[attempt["retry_of"]]
        assert retry_of[gid[attempt["group_id"]]] == expected, attempt["group_id"]


def test_prompts_drawn_again_are_apart_in_the_16_prompt_run(
    fully_runs: dict[str, RunLog],
) -> None:
    attempts = fully_runs["fa-k2-m1-n4-s37-p16"].attempts
    firsts = attempts.filter(attempts["retry_count"] == 0)["instance_id"].to_list()
    # the same prompt, in three epochs: three attempts
    assert max(firsts.count(instance) for instance in set(firsts)) >= 3


@pytest.mark.parametrize("name", FULLY_RUNS)
def test_every_trajectory_matches_dressage(
    name: str,
    fully_replays: dict[str, LoopReplay],
    fully_truth: dict[str, list[dict[str, Any]]],
    fully_settings: dict[str, dict[str, Any]],
) -> None:
    problems = disagreements(
        fully_replays[name].trajectories,
        fully_truth[name],
        fully_settings[name]["rollout_ids"],
        outcomes=FULLY_DECIDED,
    )
    assert problems == []


@pytest.mark.parametrize("name", FULLY_RUNS)
def test_most_trajectories_match_and_surplus_is_discarded(
    name: str,
    fully_replays: dict[str, LoopReplay],
    fully_truth: dict[str, list[dict[str, Any]]],
    fully_settings: dict[str, dict[str, Any]],
) -> None:
    replay = fully_replays[name]
    problems = disagreements(
        replay.trajectories,
        fully_truth[name],
        fully_settings[name]["rollout_ids"],
        outcomes=FULLY_DECIDED,
    )
    total = sum(len(a["session_ids"]) for a in fully_truth[name])
    assert len(problems) <= 0.15 * total
    assert replay.loop == "fully"
    counts = replay.to_dict()
    assert counts["loop"] == "fully"
    surplus = sum(a["outcome"] == "discarded_surplus" for a in fully_truth[name])
    assert surplus > 0
    assert counts["groups"]["discarded_surplus"] > 0
    rows = by_trajectory(replay.trajectories)
    discarded = [a for a in fully_truth[name] if a["outcome"] == "discarded_surplus"]
    agree = sum(rows[a["session_ids"][0]]["decision"] == "discarded_surplus" for a in discarded)
    assert agree > 0


def test_the_run_replayed_as_the_partial_loop_disagrees(
    fully_runs: dict[str, RunLog],
) -> None:
    """The loop matters: replayed as the partial loop, the surplus is put back and kept."""
    run = fully_runs["fa-k3-mnone-n4-s36"]
    partial = replay_run(run, keep_versions=3, loop="partial")
    assert partial.loop == "partial"
    assert partial.to_dict()["groups"]["discarded_surplus"] == 0
    fully = replay_run(run, keep_versions=3)
    assert fully.to_dict()["groups"]["discarded_surplus"] > 0


def test_without_a_log_nothing_tells_and_the_partial_loop_is_assumed_with_a_warning(
    fully_folders: dict[str, Path], tmp_path: Path
) -> None:
    folder = tmp_path / "run"
    shutil.copytree(fully_folders["fa-k3-mnone-n4-s36"], folder)
    (folder / "dressage_log.txt").unlink()
    run = read_run(folder)
    assert run.loop is None
    replay = replay_run(run, keep_versions=3)
    assert replay.loop == "partial"
    assert any("--loop fully" in w for w in replay.warnings)
    told = replay_run(run, keep_versions=3, loop="fully")
    assert told.loop == "fully" and told.loop_reason.startswith("given")
    assert not any("--loop fully" in w for w in told.warnings)


@pytest.mark.parametrize("name", FULLY_RUNS)
def test_without_the_trainers_weight_lines_nothing_wrong_is_definite(
    name: str,
    fully_runs: dict[str, RunLog],
    fully_truth: dict[str, list[dict[str, Any]]],
    fully_settings: dict[str, dict[str, Any]],
) -> None:
    """Dressage's own log may lack the trainer's "weights updated" lines that time the
    fully loop's calls: the calls are then placed at the earliest and at the latest cuts
    that reproduce the run, and every trajectory the replay gets wrong is unknown (the
    two placements decide it otherwise) or order-ambiguous, never a definite wrong row."""
    run = fully_runs[name]
    assert run.weight_updates  # the fixture has them: removing them changes the reading
    replayed = replay_run(
        replace(run, weight_updates=()), keep_versions=fully_settings[name]["keep_versions"]
    )
    rows = by_trajectory(replayed.trajectories)
    wrong = {
        problem.split(":")[0]
        for problem in disagreements(
            replayed.trajectories,
            fully_truth[name],
            fully_settings[name]["rollout_ids"],
            outcomes=FULLY_DECIDED,
        )
    }
    open_rows = {
        f"group {a['group_id']}"
        for a in fully_truth[name]
        for s in a["session_ids"]
        if rows[s]["decision"] == "unknown" or rows[s]["order_ambiguous"]
    }
    assert wrong <= open_rows
