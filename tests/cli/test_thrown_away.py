"""The generation a fully-async run threw away (docs/semantics.md §12.4), as ``replay``,
``inspect`` and ``report`` show it, against what Dressage discarded (``truth.jsonl``'s
``discarded_surplus`` attempts, which the tools do not read): groups, trajectories, the
response tokens of those trajectories, and the calls that threw them away."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

import analysis
from analysis.engine.run_loop.replay import replay_run
from analysis.formats.dressage.run import read_run
from analysis.verification import keep_versions_told
from cli.app import app
from tests.real_runs import FULLY_FIXTURES, FULLY_RUNS, extract_runs

runner = CliRunner()

SHOWN = "fa-k3-mnone-n4-s36"
"""The run the commands are run on (one whose queue order the files tell)."""


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return extract_runs(FULLY_FIXTURES, tmp_path_factory.mktemp("thrown_away"))


def truth_thrown_away(folder: Path) -> dict[str, Any]:
    """What Dressage discarded, counted from truth.jsonl; tokens are those the run's
    records give the discarded sessions."""
    truth = [json.loads(line) for line in (folder / "truth.jsonl").read_text().splitlines()]
    discarded = [a for a in truth if a["outcome"] == "discarded_surplus"]
    tokens = dict(
        read_run(folder).trajectories.select("trajectory_id", "response_tokens").iter_rows()
    )
    per_call: dict[int, list[int]] = {}
    for attempt in discarded:
        row = per_call.setdefault(attempt["rollout_id"], [0, 0, 0])
        row[0] += 1
        row[1] += len(attempt["session_ids"])
        row[2] += sum(tokens[s] or 0 for s in attempt["session_ids"])
    return {
        "groups": len(discarded),
        "trajectories": sum(len(a["session_ids"]) for a in discarded),
        "response_tokens": sum(row[2] for row in per_call.values()),
        "per_call": [
            {"rollout_id": r, "groups": g, "trajectories": t, "response_tokens": n}
            for r, (g, t, n) in sorted(per_call.items())
        ],
    }


@pytest.mark.parametrize("name", FULLY_RUNS)
def test_thrown_away_is_what_dressage_discarded(name: str, folders: dict[str, Path]) -> None:
    folder = folders[name]
    settings = json.loads((folder / "run.json").read_text())
    replay = replay_run(read_run(folder), keep_versions=settings["keep_versions"])
    expected = truth_thrown_away(folder)
    assert expected["groups"] > 0
    assert replay.thrown_away().to_dict() == expected
    assert replay.to_dict()["thrown_away"] == expected


def test_inspect_shows_the_thrown_away_generation(folders: dict[str, Path]) -> None:
    folder = folders[SHOWN]
    expected = truth_thrown_away(folder)
    found = runner.invoke(app, ["inspect", str(folder), "--json"])
    assert found.exit_code == 0, found.output
    shown = json.loads(found.stdout)["thrown_away"]
    assert {k: v for k, v in shown.items() if k != "setting"} == expected
    keep_versions = json.loads((folder / "run.json").read_text())["keep_versions"]
    assert f"keep_versions={keep_versions}" in shown["setting"]
    text = runner.invoke(app, ["inspect", str(folder)], env={"COLUMNS": "200"})
    assert text.exit_code == 0, text.output
    assert re.search(
        rf"thrown away \(surplus\)\s*│\s*{expected['groups']:,} groups, "
        rf"{expected['trajectories']:,} traj\., {expected['response_tokens']:,} tokens",
        text.stdout,
    ), text.stdout


def test_the_report_shows_the_thrown_away_generation(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    folder = folders[SHOWN]
    expected = truth_thrown_away(folder)
    out = tmp_path / "report.html"
    written = runner.invoke(app, ["report", str(folder), "-o", str(out), "-k", "0,3", "-q"])
    assert written.exit_code == 0, written.output
    page = out.read_text()
    assert "Generation thrown away" in page
    assert (
        f"Thrown away: {expected['groups']:,} groups, {expected['trajectories']:,} "
        f"trajectories, {expected['response_tokens']:,} response tokens"
    ) in page
    for row in expected["per_call"]:
        cells = (row["rollout_id"], row["groups"], row["trajectories"], row["response_tokens"])
        assert "".join(f"<td>{cell:,}</td>" for cell in cells) in page


def test_a_partial_loop_run_throws_nothing_away(run_folders: dict[str, Path]) -> None:
    """The partial loop puts its surplus back: nothing is said thrown away."""
    folder = run_folders["k2-m1"]
    assert analysis.run_thrown_away(folder) is None
    found = runner.invoke(app, ["inspect", str(folder), "--json"])
    assert found.exit_code == 0, found.output
    assert json.loads(found.stdout)["thrown_away"] is None


def test_the_metrics_tell_each_fixture_runs_k(
    folders: dict[str, Path], run_folders: dict[str, Path]
) -> None:
    """The K Dressage's staleness metrics imply is the one each run was made with."""
    for folder in [*folders.values(), *run_folders.values()]:
        made_with = json.loads((folder / "run.json").read_text())["keep_versions"]
        assert keep_versions_told(read_run(folder).metrics) == (made_with or 0), folder.name


def test_the_metrics_tell_k_off_and_k_never_reached() -> None:
    current, cutoff = "staleness/current_version_index", "staleness/cutoff_version_index"
    assert keep_versions_told(pl.DataFrame()) is None
    assert keep_versions_told(pl.DataFrame({"rollout_id": [0, 1]})) == 0
    never = pl.DataFrame({"rollout_id": [0, 1, 2], current: [0.0, 3.0, None], cutoff: [0.0] * 3})
    assert keep_versions_told(never) == 4  # every K above the 4 versions acts alike
    reached = never.with_columns(pl.Series(cutoff, [0.0, 2.0, None]))
    assert keep_versions_told(reached) == 2
