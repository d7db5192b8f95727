"""The loop replay against three real Dressage runs and what Dressage itself decided.

Each fixture archive holds a run folder as Dressage left it, plus ``run.json`` (the
settings) and ``truth.jsonl`` (Dressage's own decision for every group attempt, recorded by
observers around its functions). The replay reads neither: they are only compared with.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from analysis.engine.run_loop.replay import RUN_DECISION_COLUMNS, LoopReplay, replay_run
from analysis.errors import LogFormatError
from analysis.formats.dressage.run import RunLog, find_run_root, is_run_folder, read_run
from analysis.formats.dressage.run_metrics import USED_METRICS
from tests.real_runs import (
    FULLY_FIXTURES,
    FULLY_RUNS,
    RUNS,
    TIE_RUNS,
    by_trajectory,
    disagreements,
    extract_runs,
)


@pytest.fixture(scope="session")
def runs(run_folders: dict[str, Path]) -> dict[str, RunLog]:
    return {name: read_run(folder) for name, folder in run_folders.items()}


@pytest.fixture(scope="session")
def replays(
    runs: dict[str, RunLog], run_settings: dict[str, dict[str, Any]]
) -> dict[str, LoopReplay]:
    return {
        name: replay_run(run, keep_versions=run_settings[name]["keep_versions"])
        for name, run in runs.items()
    }


@pytest.mark.parametrize("name", RUNS)
def test_every_consumed_or_dropped_trajectory_matches_dressage(
    name: str,
    replays: dict[str, LoopReplay],
    truth: dict[str, list[dict[str, Any]]],
    run_settings: dict[str, Any],
) -> None:
    problems = disagreements(
        replays[name].trajectories, truth[name], run_settings[name]["rollout_ids"]
    )
    assert problems == []
    # one group_id per truth attempt, different attempts differ
    first = by_trajectory(replays[name].trajectories)
    ids = [first[a["session_ids"][0]]["group_id"] for a in truth[name]]
    assert len(set(ids)) == len(truth[name])


@pytest.mark.parametrize("name", RUNS)
def test_calls_retries_verdicts_and_leftovers_match_dressage(
    name: str, replays: dict[str, LoopReplay], truth: dict[str, list[dict[str, Any]]]
) -> None:
    rows = by_trajectory(replays[name].trajectories)
    for attempt in truth[name]:
        row = rows[attempt["session_ids"][0]]
        if attempt["outcome"] in ("dropped_stale", "failed", "rejected_span", "leftover"):
            assert row["decided_in"] == attempt["rollout_id"], attempt["group_id"]
        if attempt["outcome"] in ("failed", "rejected_span"):
            assert row["retried"] == attempt["retried"], attempt["group_id"]
            assert row["span_verdict"] == attempt["dressage_span_verdict"], attempt["group_id"]
        if attempt["outcome"] == "leftover":
            assert (row["decision"], row["leftover"]) == ("leftover", attempt["leftover"])


@pytest.mark.parametrize("name", RUNS)
def test_self_checks_agree_at_the_runs_own_k(name: str, replays: dict[str, LoopReplay]) -> None:
    checks = replays[name].checks
    assert checks.height > 50
    assert {"kept_groups", "log/dropped_stale", "staleness/version_gap_mean"} <= set(
        checks["check"]
    )
    assert checks.filter(~pl.col("agrees")).rows() == []
    assert replays[name].consistent


@pytest.mark.parametrize("name", RUNS)
@pytest.mark.parametrize("wrong", ["zero", "one more"])
def test_a_wrong_k_shows_in_the_self_checks(
    name: str, wrong: str, runs: dict[str, RunLog], run_settings: dict[str, Any]
) -> None:
    k = 0 if wrong == "zero" else run_settings[name]["keep_versions"] + 1
    replay = replay_run(runs[name], keep_versions=k)
    assert not replay.consistent
    assert replay.checks.filter(~pl.col("agrees")).height >= 1


@pytest.mark.parametrize("name", RUNS)
def test_attempt_keys_rebuild_dressages_groups(
    name: str, runs: dict[str, RunLog], truth: dict[str, list[dict[str, Any]]]
) -> None:
    trajectories = runs[name].trajectories
    rebuilt = {
        frozenset(ids)
        for ids in trajectories.group_by("attempt_id")
        .agg("trajectory_id")["trajectory_id"]
        .to_list()
    }
    assert rebuilt == {frozenset(a["session_ids"]) for a in truth[name]}
    draws = dict(runs[name].attempts.select("attempt_id", "draw").iter_rows())
    owner = dict(trajectories.select("trajectory_id", "attempt_id").iter_rows())
    assert all(draws[owner[a["session_ids"][0]]] == a["group_index"] for a in truth[name])


@pytest.mark.parametrize("name", RUNS)
def test_failures_are_classified_from_the_error_not_stale_metadata(
    name: str, runs: dict[str, RunLog], truth: dict[str, list[dict[str, Any]]]
) -> None:
    wanted = {}
    for attempt in truth[name]:
        wanted.update(dict.fromkeys(attempt["rejected_sessions"], "span"))
        wanted.update(attempt["failed_sessions"])
    found = {
        session: kind
        for session, kind in runs[name]
        .trajectories.select("trajectory_id", "fail_kind")
        .iter_rows()
        if kind is not None
    }
    assert found == wanted


def test_span_verdict_is_sticky_across_retries(
    runs: dict[str, RunLog], truth: dict[str, list[dict[str, Any]]]
) -> None:
    """k2-m1: a retry of a span-rejected draw that fails for another reason still counts."""
    rows = by_trajectory(runs["k2-m1"].trajectories)
    verdicts = dict(runs["k2-m1"].attempts.select("attempt_id", "span_verdict").iter_rows())
    sticky = 0
    for attempt in truth["k2-m1"]:
        if attempt["outcome"] in ("failed", "rejected_span"):
            verdict = verdicts[rows[attempt["session_ids"][0]]["attempt_id"]]
            assert verdict == attempt["dressage_span_verdict"]
            sticky += attempt["outcome"] == "failed" and verdict
    assert sticky >= 1


def copy_without(folder: Path, missing: str, into: Path) -> Path:
    copy = into / folder.name
    shutil.copytree(folder, copy)
    target = copy / missing
    shutil.rmtree(target) if target.is_dir() else target.unlink(missing_ok=True)
    return copy


@pytest.mark.parametrize("name", ["k2-m1", "k3-m2-n8"])
def test_without_traj_err_the_replay_degrades_with_a_warning(
    name: str, run_folders: dict[str, Path], run_settings: dict[str, Any], tmp_path: Path
) -> None:
    run = read_run(copy_without(run_folders[name], "traj_err", tmp_path))
    replay = replay_run(run, keep_versions=run_settings[name]["keep_versions"])
    assert any("traj_err" in w for w in replay.warnings)
    assert replay.trajectories.filter(pl.col("decision") == "kept").height > 0


@pytest.mark.parametrize("name", RUNS)
def test_without_the_log_call_starts_are_inferred(
    name: str, run_folders: dict[str, Path], run_settings: dict[str, Any], tmp_path: Path
) -> None:
    run = read_run(copy_without(run_folders[name], "dressage_log.txt", tmp_path))
    assert run.calls.height == 0
    replay = replay_run(run, keep_versions=run_settings[name]["keep_versions"])
    assert any("dressage_log.txt" in w for w in replay.warnings)
    assert replay.trajectories.filter(pl.col("decision") == "kept").height > 0


def _definite_disagreements(
    replay: LoopReplay, attempts: list[dict[str, Any]], rollout_ids: list[int]
) -> list[str]:
    """Where a row with a definite decision differs from Dressage's (unknown rows aside)."""
    rows = by_trajectory(replay.trajectories)
    problems = []
    for attempt in attempts:
        for session in attempt["session_ids"]:
            row = rows.get(session)
            if row is None or row["decision"] == "unknown":
                continue
            wanted = (attempt["outcome"], attempt["stage"])
            if attempt["outcome"] == "leftover":
                wanted = ("leftover", None)
            batch = rollout_ids.index(attempt["rollout_id"]) if wanted[0] == "kept" else None
            # a kept row whose step the files cannot tell has no batch
            got_batch = batch if wanted[0] == "kept" and row["batch"] is None else row["batch"]
            if (row["decision"], row["stage"], got_batch) != (*wanted, batch):
                problems.append(f"{session}: {row['decision']} != {wanted}")
            elif row["retried"] not in (None, attempt.get("retried")):
                problems.append(f"{session}: retried {row['retried']}")
    return problems


@pytest.fixture(scope="session")
def every_run_folder(
    run_folders: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    """The partial-async, compressed-timing and fully-async fixture runs."""
    fully = extract_runs(FULLY_FIXTURES, tmp_path_factory.mktemp("fully_async_runs"))
    return {**run_folders, **fully}


REMOVALS = [("traj_err",), ("dressage_log.txt",), ("traj_err", "dressage_log.txt")]


@pytest.mark.parametrize("name", RUNS + TIE_RUNS + FULLY_RUNS)
@pytest.mark.parametrize("removed", REMOVALS, ids="+".join)
def test_missing_evidence_gives_unknown_rows_never_a_wrong_definite_one(
    name: str, removed: tuple[str, ...], every_run_folder: dict[str, Path], tmp_path: Path
) -> None:
    folder = every_run_folder[name]
    settings = json.loads((folder / "run.json").read_text())
    truth = [json.loads(line) for line in (folder / "truth.jsonl").read_text().splitlines()]
    for i, part in enumerate(removed):
        folder = copy_without(folder, part, tmp_path / str(i))
    # without the log nothing may tell the fully-async loop: given, as a user would
    loop = settings.get("loop", "partial")
    replay = replay_run(read_run(folder), keep_versions=settings["keep_versions"], loop=loop)
    assert _definite_disagreements(replay, truth, settings["rollout_ids"]) == []
    unknown = replay.trajectories.filter(pl.col("decision") == "unknown")
    assert replay.to_dict()["trajectories"]["unknown"] == unknown.height
    assert unknown.filter(pl.col("possible").is_null()).height == 0
    failures = any(a["outcome"] in ("failed", "rejected_span") for a in truth)
    if "traj_err" in removed and failures:  # their kind is open without traj_err/
        assert unknown.height > 0
        assert any("unknown" in w for w in replay.warnings)


def test_with_every_file_no_row_is_unknown(every_run_folder: dict[str, Path]) -> None:
    """The unknown readings apply to missing files only: a complete run is decided."""
    for name in (RUNS[0], TIE_RUNS[0], FULLY_RUNS[0]):
        folder = every_run_folder[name]
        settings = json.loads((folder / "run.json").read_text())
        replay = replay_run(
            read_run(folder),
            keep_versions=settings["keep_versions"],
            loop=settings.get("loop", "partial"),
        )
        assert replay.to_dict()["trajectories"]["unknown"] == 0, name


def test_run_folder_is_found_with_or_without_its_run_level(run_folders: dict[str, Path]) -> None:
    folder = run_folders["k2-m1"]
    assert is_run_folder(folder)
    assert find_run_root(folder.parent) is None  # three runs: which one is ambiguous
    assert find_run_root(folder / "traj_payload") == folder
    assert not is_run_folder(folder / "rollout_data")


def test_a_single_run_below_the_given_folder_is_read(
    run_folders: dict[str, Path], tmp_path: Path
) -> None:
    shutil.copytree(run_folders["k1-mnone"], tmp_path / "artifacts" / "k1-mnone")
    assert find_run_root(tmp_path / "artifacts") == tmp_path / "artifacts" / "k1-mnone"
    run = read_run(tmp_path / "artifacts", trajectories_only=True)
    assert run.trajectories.height == 196
    assert run.calls.height == 0


def test_metrics_exported_from_a_dashboard_as_csv_are_checked_the_same(
    run_folders: dict[str, Path], tmp_path: Path
) -> None:
    """A wandb-style export: a Step column, '<run> - metric' columns, __MIN/__MAX columns."""
    folder = copy_without(run_folders["k2-m1"], "dressage_metrics.jsonl", tmp_path)
    rows = [
        json.loads(line)
        for line in (run_folders["k2-m1"] / "dressage_metrics.jsonl").read_text().splitlines()
    ]
    exported = pl.DataFrame(
        [
            {
                "Step": row["rollout_id"],
                **{f"k2-m1 - {k}": v for k, v in row.items() if k != "rollout_id"},
                "k2-m1 - staleness/dropped_groups__MIN": 0,
            }
            for row in rows
        ]
    )
    exported.write_csv(folder / "dressage_metrics.csv")
    from_csv = replay_run(read_run(folder), keep_versions=2)
    from_jsonl = replay_run(read_run(run_folders["k2-m1"]), keep_versions=2)
    assert from_csv.checks.equals(from_jsonl.checks) and from_csv.consistent
    (folder / "dressage_metrics.csv").write_text("when,what\nnow,1\n")
    with pytest.raises(LogFormatError, match="no integer step column"):
        read_run(folder)


def test_the_metrics_read_are_the_metrics_checked(replays: dict[str, LoopReplay]) -> None:
    """read_metrics checks the metrics the replay uses to be numbers: every metric a check
    compares is one of them (a new check must be added to USED_METRICS too)."""
    checked = {
        name
        for replay in replays.values()
        for name in replay.checks["check"].unique()
        if not name.startswith(("log/", "kept_groups"))
    }
    assert checked and checked <= set(USED_METRICS)


def test_the_decision_table_gives_each_attempt_its_stalest_gap(
    replays: dict[str, LoopReplay],
) -> None:
    replay = replays["k2-m1"]
    table = replay.decision_table()
    assert tuple(table.columns) == RUN_DECISION_COLUMNS
    assert table.height == replay.attempts.height
    stalest = replay.trajectories.group_by("group_id").agg(pl.col("version_gap").max())
    joined = table.join(stalest, on="group_id", suffix="_expected")
    assert joined["version_gap"].equals(joined["version_gap_expected"])


def _allows(words: str, limit: int) -> bool:
    """Whether a retry limit in words (``2``, ``>= 1``, ``1..3``) allows ``limit``."""
    if words.startswith(">= "):
        return limit >= int(words[3:])
    low, _, high = words.partition("..")
    return int(low) <= limit <= int(high or low)


@pytest.mark.parametrize("name", RUNS + TIE_RUNS + FULLY_RUNS)
def test_without_traj_err_the_retry_limit_allowed_holds_the_runs_own(
    name: str, every_run_folder: dict[str, Path], tmp_path: Path
) -> None:
    """Without the failed trajectories a failure's step is a guess, so the checks of the
    retry and failure counts may agree best at a limit the run did not have: the bound
    named is the files' own, which the run's limit never leaves."""
    folder = every_run_folder[name]
    settings = json.loads((folder / "run.json").read_text())
    own = settings.get("max_retries", 2)
    run = read_run(copy_without(folder, "traj_err", tmp_path))
    replay = replay_run(
        run, keep_versions=settings["keep_versions"], loop=settings.get("loop", "partial")
    )
    assert _allows(replay.max_retries_words, own), (replay.max_retries_words, own)
    assert _allows(replay.max_retries_words, replay.max_retries)
    assert _allows(run.retry_limit.words(), own)


def test_without_traj_err_the_search_of_call_starts_is_bounded(
    every_run_folder: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fully-loop run without traj_err/ reproduces few steps: each search of where its
    calls begin stops after SEARCH_WITHOUT_FAILURES call replays in all and says so (it
    spent 20,000 on one unreproduced step, and minutes per replay on a run of 50 steps)."""
    import analysis.engine.run_loop.inference as inference
    import analysis.engine.run_loop.readings as readings

    searches: list[int] = []  # the calls each search replayed
    search, replays = inference.search_call_starts, inference._call_replays

    def counted_search(*args: Any, **kwargs: Any) -> Any:
        searches.append(0)
        return search(*args, **kwargs)

    def counted_replays(*args: Any, **kwargs: Any) -> Any:
        for each in replays(*args, **kwargs):
            searches[-1] += 1
            yield each

    monkeypatch.setattr(readings, "search_call_starts", counted_search)
    monkeypatch.setattr(inference, "_call_replays", counted_replays)
    folder = every_run_folder["fa-k2-m1-n4-s37-p16"]
    keep_versions = json.loads((folder / "run.json").read_text())["keep_versions"]
    complete = replay_run(read_run(folder), keep_versions=keep_versions)
    assert searches and not any("cut short after" in w for w in complete.warnings)
    searches.clear()
    replay = replay_run(
        read_run(copy_without(folder, "traj_err", tmp_path)), keep_versions=keep_versions
    )
    assert searches and max(searches) <= readings.SEARCH_WITHOUT_FAILURES
    assert any("search of where the calls begin was cut short" in w for w in replay.warnings)
