"""``verify RUN`` without options names the loop, K, M and retry limit each fixture run was
made with (its run.json, never read by the replay), K as its staleness metrics tell; metrics
edited to tell another K are said to contradict the K that agrees best."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cli.app import app
from tests.real_runs import FULLY_FIXTURES, FULLY_RUNS, RUNS, TIE_RUNS, extract_runs

runner = CliRunner()


@pytest.fixture(scope="module")
def fully_folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return extract_runs(FULLY_FIXTURES, tmp_path_factory.mktemp("verify_fully"))


def _allows(words: str, value: int) -> bool:
    """Whether verify's retry limit in words (``2``, ``>= 1``, ``1..3``) allows ``value``."""
    if words.startswith(">="):
        return value >= int(words[2:])
    low, _, high = words.partition("..")
    return int(low) <= value <= int(high or low)


@pytest.mark.parametrize("name", (*RUNS, *TIE_RUNS, *FULLY_RUNS))
def test_verify_names_the_settings_the_run_was_made_with(
    name: str, run_folders: dict[str, Path], fully_folders: dict[str, Path]
) -> None:
    folder = fully_folders[name] if name in FULLY_RUNS else run_folders[name]
    settings: dict[str, Any] = json.loads((folder / "run.json").read_text())
    result = runner.invoke(app, ["verify", str(folder), "--json"])
    verdict = json.loads(result.stdout)
    # exit 9 exactly when the best settings still disagree with a check
    assert result.exit_code == (0 if verdict["agree"] == verdict["total"] else 9), result.output
    assert verdict["loop"] == settings.get("loop", "partial")
    assert verdict["keep_versions"] == settings["keep_versions"]
    assert verdict["keep_versions_told"] == settings["keep_versions"]
    assert verdict["keep_versions_from"].startswith("as the run's staleness metrics tell")
    assert "as the run's staleness metrics tell" in result.stderr
    wanted_m = settings["max_preempts"]  # none: no rejection tells M
    assert verdict["max_preempts"] == (None if wanted_m is None else [wanted_m])
    retries = settings.get("max_retries", 2)
    assert verdict["max_retries"] == retries or _allows(verdict["max_retries_allowed"], retries)
    assert verdict["warnings"] == []
    assert "1 groups" not in result.stderr and "1 settings" not in result.stderr


def _retell(folder: Path, keep_versions: int) -> None:
    """Rewrite the metrics' cutoff index as a run at ``keep_versions`` would have written it."""
    metrics = folder / "dressage_metrics.jsonl"
    lines = [json.loads(line) for line in metrics.read_text().splitlines()]
    for line in lines:
        current = line.get("staleness/current_version_index")
        if current is not None:
            line["staleness/cutoff_version_index"] = max(0, current + 1 - keep_versions)
    metrics.write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_metrics_that_tell_another_k_are_a_warning_naming_both(
    run_folders: dict[str, Path], run_settings: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    folder = shutil.copytree(run_folders["k2-m1"], tmp_path / "run")
    own = run_settings["k2-m1"]["keep_versions"]
    _retell(folder, own + 1)
    result = runner.invoke(app, ["verify", str(folder), "--json"])
    verdict = json.loads(result.stdout)
    # the K that agrees best is still found, and its cutoff checks disagree: exit 9
    assert verdict["keep_versions"] == own and verdict["keep_versions_told"] == own + 1
    assert result.exit_code == 9
    assert not verdict["keep_versions_from"].startswith("as the run's staleness")
    [warning] = verdict["warnings"]
    assert f"keep_versions={own + 1}" in warning and f"keep_versions={own}" in warning
    assert "warning: the run's staleness metrics tell" in result.stderr
    wrong = {c["check"] for c in verdict["checks"] if not c["agrees"]}
    assert "staleness/cutoff_version_index" in wrong


def test_without_the_cutoff_index_verify_scans_and_still_finds_k(
    run_folders: dict[str, Path], run_settings: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    folder = shutil.copytree(run_folders["k3-m2-n8"], tmp_path / "run")
    metrics = folder / "dressage_metrics.jsonl"
    lines = [json.loads(line) for line in metrics.read_text().splitlines()]
    for line in lines:
        line.pop("staleness/cutoff_version_index", None)
    metrics.write_text("".join(json.dumps(line) + "\n" for line in lines))
    result = runner.invoke(app, ["verify", str(folder), "--json"])
    assert result.exit_code == 0, result.output
    verdict = json.loads(result.stdout)
    assert verdict["keep_versions"] == run_settings["k3-m2-n8"]["keep_versions"]
    assert verdict["keep_versions_told"] is None and verdict["warnings"] == []
    assert verdict["settings_tried"] > 1  # not told: every K that could agree is replayed
    assert verdict["keep_versions_from"] == "the K whose replay agrees with the most checks"
