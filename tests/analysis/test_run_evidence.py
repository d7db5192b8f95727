"""What a run's files say of its retry limit, the log lines that cannot be read, and the
decisions of a step whose own checks disagree."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from analysis.engine.run_loop.records import kept_groups_by_step
from analysis.engine.run_loop.replay import replay_run
from analysis.formats.dressage.log import read_dressage_log
from analysis.formats.dressage.retries import infer_retry_limit
from analysis.formats.dressage.run import read_run


def test_retry_and_exhaustion_lines_bound_the_limit() -> None:
    retries = {10: 0, 11: 1, 12: 1}
    limit, warnings = infer_retry_limit([0, 1], retries, [("retried", 10)])
    assert (limit.low, limit.high, limit.words()) == (1, None, ">= 1")
    limit, _ = infer_retry_limit([0, 1], retries, [("retried", 10), ("exhausted", 11)])
    assert (limit.exact, limit.words()) == (1, "1")
    limit, warnings = infer_retry_limit([0, 1, 2], retries, [("exhausted", 11)])
    assert limit.exact is None and warnings and "contradicts" in warnings[0]
    assert infer_retry_limit([0], {}, [("exhausted", 99)])[0].high is None  # group unknown


def _line(n: int, message: str) -> str:
    return f"2026-12-01 14:00:{n:02d},000 dressage.rollout.partial_async_rollout INFO {message}\n"


def test_malformed_log_lines_are_warned_with_their_numbers(tmp_path: Path) -> None:
    log = tmp_path / "dressage_log.txt"
    text = (
        (
            _line(
                0,
                "starting Dressage partial async rollout: rollout_id=0 target_groups=2 "
                "target_samples=8 full_groups=2 full_samples=8",
            )
            + _line(1, "starting Dressage partial async rollout: rollout_id=abc target_groups=2")
            + "Traceback (most recent call last):\n"
            + _line(2, "returned group 3 to rollout buffer for retry during partial rollout: x")
        ).encode()
        + b"2026-12-01 14:00:03,000 x INFO bad \xff byte\n"
        + b"nul \x00 here\n"
    )
    log.write_bytes(text + b"2026-12-01 14:00:0")  # fmt: skip
    read = read_dressage_log(log, error_times={}, first_finish=None)
    assert [number for number, _ in read.malformed] == [2, 5, 6, 7]
    assert read.call_starts.keys() == {0} and len(read.events) == 1
    warning = read.warnings("dressage_log.txt")[0]
    assert re.search(r"4 malformed line\(s\).*line 2: .*line 5: .*UTF-8.*line 6: a NUL", warning)


def test_a_clean_log_has_no_malformed_line(run_folders: dict[str, Path]) -> None:
    for folder in run_folders.values():
        assert not any("malformed" in w for w in read_run(folder).warnings)


@pytest.mark.parametrize("given", [0, 3])
def test_a_given_limit_is_replayed_and_said(run_folders: dict[str, Path], given: int) -> None:
    replay = replay_run(read_run(run_folders["k2-m1"]), keep_versions=2, max_retries=given)
    assert (replay.max_retries, replay.max_retries_how) == (given, "given")
    failures = replay.attempts.filter(
        replay.attempts["decision"].is_in(["failed", "rejected_span"])
    )
    retried = failures.filter(failures["retry_count"] < given).height
    assert failures["retried"].sum() == retried


def test_an_exhaustion_line_pins_the_limit(run_folders: dict[str, Path], tmp_path: Path) -> None:
    folder = shutil.copytree(run_folders["k2-m1"], tmp_path / "run")
    log = folder / "dressage_log.txt"
    # the retry of group 27 (retry count 1) said as exhausted, yet a retry count 2 exists
    log.write_text(
        log.read_text().replace(
            "returned group 27 to rollout buffer for retry during partial rollout",
            "partial rollout group 27 exhausted retries and will be dropped",
        )
    )
    run = read_run(folder)
    assert run.retry_limit.high is None and "contradicts" in " ".join(run.warnings)


def _edit_metric(folder: Path, step: int, name: str, by: float) -> None:
    path = folder / "dressage_metrics.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for row in rows:
        if row["rollout_id"] == step:
            row[name] += by
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def test_a_step_whose_checks_disagree_leaves_its_decisions_unknown(
    run_folders: dict[str, Path], run_settings: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    own = run_settings["k2-m1"]["keep_versions"]
    intact = replay_run(read_run(run_folders["k2-m1"]), keep_versions=own)
    assert intact.consistent and intact.attempts.filter(pl.col("decision") == "unknown").is_empty()
    dropped = intact.attempts.filter(pl.col("decision") != "kept")["decided_in"].drop_nulls()
    step = min(
        int(s) for s in dropped.to_list()
    )  # the first step that decided more than what it kept
    folder = shutil.copytree(run_folders["k2-m1"], tmp_path / "run")
    _edit_metric(folder, step, "staleness/dropped_groups", 5)  # the step now disagrees
    run = read_run(folder)
    replay = replay_run(run, keep_versions=own)
    wrong = replay.checks.filter(~pl.col("agrees"))
    assert set(wrong["step"].to_list()) == {step}
    dumped = {
        s: set(replay.trajectories.filter(pl.col("trajectory_id").is_in(list(ids)))["group_id"])
        for s, ids in kept_groups_by_step(run).items()
    }
    decided = intact.attempts.filter(pl.col("decided_in").is_in([step]))
    assert decided.height > len(dumped[step])  # drops or leftovers decided there too
    rows = {row["group_id"]: row for row in replay.attempts.iter_rows(named=True)}
    for group in decided["group_id"]:
        row = rows[group]
        if group in dumped[step]:  # a dump holds it: kept in that dump's step
            assert (row["decision"], row["decided_in"]) == ("kept", step)
        elif row["decision"] != "failed":  # a failure traj_err/ records stays one
            assert row["decision"] == "unknown", group
            assert {"kept", "dropped_stale", "leftover"} & set(row["possible"].split("|"))
    elsewhere = replay.attempts.filter(~pl.col("group_id").is_in(decided["group_id"].to_list()))
    assert "unknown" not in set(elsewhere["decision"])
    what_if = replay_run(run, keep_versions=own + 1)
    assert what_if.checks.filter(~pl.col("agrees")).height
    assert "unknown" not in set(what_if.attempts["decision"])
    forced = replay_run(run, keep_versions=own + 1, unknown_where_checks_disagree=True)
    assert "unknown" in set(forced.attempts["decision"])
