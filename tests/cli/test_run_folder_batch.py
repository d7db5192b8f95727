"""A run folder and other systems' logs without -b: the run's own batch size
(dressage_log.txt's target_groups), on its own loop, or said when its records are replayed
on the simple loop (--format artifacts); an error that remains names the input and speaks
of its own kind (not of slime's fields)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

import analysis
from cli.app import app
from tests.fixtures import peer_logs

runner = CliRunner()
NOTE = "note: batch_groups=2, the run's own batch size"


def test_sweep_of_a_run_folder_uses_its_own_batch_size(run_folders: dict[str, Path]) -> None:
    folder = str(run_folders["k2-m1"])
    assert analysis.read_run(folder).target_groups == 2
    result = runner.invoke(app, ["sweep", folder, "-k", "2", "-m", "1", "--json"])
    assert result.exit_code == 0, result.stderr
    (row,) = json.loads(result.stdout)
    assert row["batch_groups"] == 2 and row["engine"] == "dressage-loop"
    given = runner.invoke(app, ["sweep", folder, "-k", "2", "-m", "1", "-b", "2", "--json"])
    assert given.exit_code == 2 and "--format artifacts" in given.stderr  # its loop's own B
    log = ["sweep", folder, "-k", "2", "-m", "1", "--format", "artifacts", "--json"]
    simple = runner.invoke(app, log)
    assert simple.exit_code == 0 and NOTE in simple.stderr
    assert json.loads(simple.stdout)[0]["engine"] == "simple-loop"
    with_b = runner.invoke(app, [*log, "-b", "2"])
    assert json.loads(simple.stdout) == json.loads(with_b.stdout)
    assert NOTE not in with_b.stderr


@pytest.mark.parametrize("command", ["plot", "report", "replay-log", "compare"])
def test_every_simple_loop_command_reads_a_run_folder_without_b(
    command: str, run_folders: dict[str, Path], tmp_path: Path
) -> None:
    folder = str(run_folders["k2-m1"])
    log = ["--format", "artifacts"]
    args = {
        "plot": ["plot", "heatmap", folder, *log, "-o", str(tmp_path / "h.png")],
        "report": ["report", folder, *log, "-o", str(tmp_path / "r.html")],
        "replay-log": ["replay", folder, *log, "-k", "1"],
        "compare": ["compare", folder, str(run_folders["k1-mnone"]), *log, "-k", "1"],
    }[command]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.stderr
    assert NOTE in result.stderr


def test_inspect_of_a_run_folder_shows_its_batch_size(run_folders: dict[str, Path]) -> None:
    folder = str(run_folders["k2-m1"])
    found = json.loads(runner.invoke(app, ["inspect", folder, "--json"]).stdout)
    # the run's own steps (its dumps, log and metrics), not the 0 its records carry
    steps = len(list((run_folders["k2-m1"] / "rollout_data").glob("*.pt")))
    assert found["trainer_steps"] == steps == found["run_trainer_steps"] and steps > 1
    assert found["run_batch_groups"] == 2
    table = runner.invoke(app, ["inspect", folder], terminal_width=200).stdout
    assert "batch groups (the run's)" in table and "n/a" not in table
    assert re.search(rf"trainer steps\s*│\s*{steps}\s", table)


def test_inspect_admission_of_a_run_folder_says_why_nothing_is_checked(
    run_folders: dict[str, Path],
) -> None:
    result = runner.invoke(
        app, ["inspect", str(run_folders["k2-m1"]), "--admission", "areal:eta=1"],
        terminal_width=300,
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert "not checked: a Dressage run folder's trajectory records carry no trainer step" in (
        result.stdout
    )
    assert "can and cannot tell" not in result.stdout
    row = next(line for line in result.stdout.splitlines() if "areal:" in line and " 47 " in line)
    assert "0.0%" not in row and row.split()[4] == "-"  # broke it: no share of none checked


def test_a_peer_log_without_trainer_steps_names_the_file_and_its_kind(tmp_path: Path) -> None:
    areal = peer_logs.write_all(tmp_path)["areal"]
    result = runner.invoke(app, ["replay", str(areal), "-k", "1"], terminal_width=400)
    assert result.exit_code == 7
    message = result.stderr.strip()
    assert message.startswith(f"Error: {areal}: batch_groups cannot be inferred: AReaL logs")
    assert "slime" not in message and "dressage_return_rollout_id" not in message
    assert "--batch-groups B" in message
    for command in (["sweep"], ["plot", "sweep"]):
        out = ["-o", str(tmp_path / "s.png")] if command[0] == "plot" else []
        other = runner.invoke(app, [*command, str(areal), *out], terminal_width=400)
        assert other.exit_code == 7 and "AReaL logs record no trainer step" in other.stderr


def test_a_slime_log_without_steps_names_the_file(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps({"group_index": 0, "metadata": {"parent_traj_id": "t",
                   "dressage_end_token_version": "1"}}) + "\n")  # fmt: skip
    result = runner.invoke(app, ["sweep", str(log)], terminal_width=400)
    assert result.exit_code == 7
    assert result.stderr.startswith(f"Error: {log}: batch_groups cannot be inferred")
    assert "--field trainer_step=PATH" in result.stderr


def test_policy_and_compare_paths_speak_of_the_peer_log_too(tmp_path: Path) -> None:
    areal = str(peer_logs.write_all(tmp_path)["areal"])
    for args in (
        ["replay", areal, "--policy", "prime-rl:max_off_policy_steps=1"],
        ["sweep", areal, "--policy", "dressage:k=1,m=0"],
        ["compare", areal, areal, "--names", "a,b"],
    ):
        result = runner.invoke(app, args, terminal_width=400)
        assert result.exit_code == 7, (args, result.stderr)
        assert f"Error: {areal}: batch_groups cannot be inferred: AReaL logs" in result.stderr
