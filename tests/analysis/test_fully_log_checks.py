"""The fully-async loop's log lines checked against the replay (docs/semantics.md §12.4): its
log has no call lines, so its drop, retry and exhausted lines are counted over the whole
run (checks with a null step) against the replay's decisions, and a line the replay does not
reproduce makes ``verify`` disagree."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from analysis.engine.run_loop.replay import replay_run
from analysis.formats.dressage.run import read_run
from cli.app import app
from tests.real_runs import FULLY_FIXTURES, FULLY_RUNS, extract_runs

runner = CliRunner()

LINES = {
    "dropped_stale": r"dropping stale Dressage fully async rollout group \d+",
    "retried": r"returned group \d+ to rollout buffer for retry",
    "exhausted": r"rollout group \d+ exhausted retries",
}
"""The lines of ``fully_async_rollout.py`` / ``staleness.py`` each check counts."""
REPRODUCED = "fa-k3-mnone-n4-s36"
"""A run the replay reproduces on every trajectory (test_fully_async_runs)."""


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return extract_runs(FULLY_FIXTURES, tmp_path_factory.mktemp("fully_log"))


@pytest.mark.parametrize("name", FULLY_RUNS)
def test_the_log_lines_are_counted_over_the_run(name: str, folders: dict[str, Path]) -> None:
    folder = folders[name]
    keep_versions = json.loads((folder / "run.json").read_text())["keep_versions"]
    replay = replay_run(read_run(folder), keep_versions=keep_versions)
    log = (folder / "dressage_log.txt").read_text()
    run_level = {
        row["check"]: row
        for row in replay.checks.filter(replay.checks["step"].is_null()).to_dicts()
    }
    decisions = replay.attempts
    replayed = {
        "dropped_stale": (decisions["decision"] == "dropped_stale").sum(),
        "retried": (decisions["retried"].fill_null(False)).sum(),
        "exhausted": (
            decisions["decision"].is_in(["failed", "rejected_span"])
            & ~decisions["retried"].fill_null(True)
        ).sum(),
    }
    assert set(run_level) == {f"log/{kind}" for kind in LINES}
    for kind, pattern in LINES.items():
        row = run_level[f"log/{kind}"]
        assert row["expected"] == str(len(re.findall(pattern, log))), kind
        assert row["replayed"] == str(replayed[kind]), kind
        assert row["agrees"] == (row["expected"] == row["replayed"]), kind


def test_a_log_line_the_replay_does_not_reproduce_makes_verify_disagree(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    folder = tmp_path / "run"
    shutil.copytree(folders[REPRODUCED], folder)
    keep_versions = str(json.loads((folder / "run.json").read_text())["keep_versions"])
    agreed = runner.invoke(app, ["verify", str(folder), "-k", keep_versions])
    assert agreed.exit_code == 0, agreed.output
    log = folder / "dressage_log.txt"
    lines = log.read_text().splitlines()
    drop = next(line for line in lines if "dropping stale" in line)
    log.write_text("\n".join([*lines, drop.replace(" group ", " group 9") + ""]) + "\n")
    disagreed = runner.invoke(app, ["verify", str(folder), "-k", keep_versions])
    assert disagreed.exit_code == 9, disagreed.output
    assert re.search(r"run\s+log/dropped_stale", disagreed.stdout), disagreed.stdout
