"""``replay RUN --trajectories`` and ``verify RUN`` on real Dressage run folders: the replay
reproduces what Dressage decided, and verify says so step by step, or says where not."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

from cli.app import app
from tests.real_runs import RUNS, disagreements

runner = CliRunner()


@pytest.mark.parametrize("name", RUNS)
def test_replay_of_a_run_folder_reproduces_what_dressage_decided(
    name: str,
    run_folders: dict[str, Path],
    run_settings: dict[str, dict[str, Any]],
    truth: dict[str, list[dict[str, Any]]],
    tmp_path: Path,
) -> None:
    """At the run's own K and M, given only what the run left (run.json and truth.jsonl are
    in the folder but never read), every consumed or dropped trajectory gets Dressage's
    decision, stage and batch, and the attempts are grouped as Dressage grouped them."""
    run = run_settings[name]
    limit = "none" if run["max_preempts"] is None else str(run["max_preempts"])
    out = tmp_path / "trajectories.csv"
    result = runner.invoke(
        app,
        ["replay", str(run_folders[name]), "-k", str(run["keep_versions"]), "-m", limit,
         "--trajectories", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "wrote" in result.stderr
    rows = pl.read_csv(out, schema_overrides={"stage": pl.String})
    assert rows.columns == [
        "trajectory_id", "group_id", "decision", "stage", "batch", "version_gap", "span",
    ]  # fmt: skip
    assert disagreements(rows, truth[name], run["rollout_ids"]) == []
    summary = json.loads(
        runner.invoke(
            app, ["replay", str(run_folders[name]), "-k", str(run["keep_versions"]), "--json"]
        ).stdout
    )
    kept = sum(1 for attempt in truth[name] if attempt["outcome"] == "kept")
    assert summary["model"] == "dressage-loop" and summary["groups"]["kept"] == kept
    assert summary["checks"]["agree"] == summary["checks"]["total"] > 0


@pytest.mark.parametrize("name", RUNS)
def test_verify_finds_the_runs_k_and_full_agreement(
    name: str, run_folders: dict[str, Path], run_settings: dict[str, dict[str, Any]]
) -> None:
    result = runner.invoke(app, ["verify", str(run_folders[name]), "--json"])
    assert result.exit_code == 0, result.output
    verdict = json.loads(result.stdout)
    assert verdict["keep_versions"] == run_settings[name]["keep_versions"]
    assert verdict["keep_versions_reproducing"] == [run_settings[name]["keep_versions"]]
    assert verdict["agree"] == verdict["total"] > 100
    assert "agrees with the run's own files" in result.stderr


def test_verify_with_the_wrong_k_shows_where_the_replay_disagrees(
    run_folders: dict[str, Path],
) -> None:
    result = runner.invoke(app, ["verify", str(run_folders["k2-m1"]), "-k", "1"])
    assert result.exit_code == 9
    assert "disagree" in result.stderr
    # the per-step table names the checks that differ; the detail shows both sides
    assert "kept_groups" in result.stdout and "NO" in result.stdout


def test_verify_flags_a_run_whose_own_records_disagree_with_the_replay(
    run_folders: dict[str, Path], tmp_path: Path
) -> None:
    """A metrics file that does not match the run (edited, or from another run) is flagged
    at the step where it differs, not only in the total."""
    folder = tmp_path / "run"
    shutil.copytree(run_folders["k3-m2-n8"], folder)
    metrics = folder / "dressage_metrics.jsonl"
    lines = [json.loads(line) for line in metrics.read_text().splitlines()]
    lines[4]["staleness/dropped_groups"] = lines[4]["staleness/dropped_groups"] + 3
    metrics.write_text("".join(json.dumps(line) + "\n" for line in lines))
    result = runner.invoke(app, ["verify", str(folder), "-k", "3", "--json"])
    assert result.exit_code == 9
    wrong = [check for check in json.loads(result.stdout)["checks"] if not check["agrees"]]
    assert [(c["step"], c["check"]) for c in wrong] == [
        (lines[4]["rollout_id"], "staleness/dropped_groups")
    ]
