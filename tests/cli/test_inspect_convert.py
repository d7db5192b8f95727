"""`inspect` and `convert` on every sample in sample_data/ and on simulated logs."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal
from typer.testing import CliRunner

import analysis
from cli.app import app

runner = CliRunner()
SAMPLES = Path(__file__).resolve().parents[2] / "sample_data"


@pytest.mark.parametrize("sample", ["rollouts.jsonl", "artifacts", "dumps"])
def test_inspect_every_sample(sample: str) -> None:
    result = runner.invoke(app, ["inspect", str(SAMPLES / sample), "--json"])
    assert result.exit_code == 0, result.stderr
    found = json.loads(result.stdout)
    assert found["records"] > 100 and found["groups"] >= 30
    assert found["versions_observed"] >= 3
    assert found["quality"]["records_without_trajectory_id"] == 0
    table_run = runner.invoke(app, ["inspect", str(SAMPLES / sample)])
    assert "versions in observation order" in table_run.stdout


@pytest.mark.parametrize("sample", ["rollouts.jsonl", "artifacts", "dumps"])
def test_convert_every_sample(sample: str, tmp_path: Path) -> None:
    target = tmp_path / "log.parquet"
    result = runner.invoke(app, ["convert", str(SAMPLES / sample), "-o", str(target)])
    assert result.exit_code == 0, result.stderr
    converted = pl.read_parquet(target)
    original = analysis.load_logs([SAMPLES / sample])
    assert_frame_equal(converted, original)


def test_inspect_counts_quality_problems(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    rows = [
        {"group_index": 0, "tokens": [1, 2, 3],
         "metadata": {"parent_traj_id": "s", "full_versions": ["-1", "9"]}},
        {"group_index": 2, "metadata": {"dressage_end_token_version": "8"}},
        {"group_index": 1, "response_length": 1, "loss_mask": [1], "tokens": [1, 2],
         "metadata": {"parent_traj_id": "t", "full_versions": ["-1", "10"]}},
    ]  # fmt: skip
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = runner.invoke(app, ["inspect", str(log), "--json"])
    found = json.loads(result.stdout)
    assert found["versions"] == ["9", "10"]
    quality = found["quality"]
    assert quality["records_without_trajectory_id"] == 1
    assert quality["records_with_derived_end_version"] == 2
    assert quality["records_without_token_versions"] == 1
    assert quality["token_version_length_mismatches"] == 1
    assert quality["records_without_response_tokens"] == 2
    assert quality["numeric_labels_misordered_by_sorting"] == 2
    assert found["warnings"] == []  # counted, not warned about: nothing is wrong


def test_convert_refuses_to_overwrite_its_input(
    tmp_path: Path, small_logs: dict[str, Path]
) -> None:
    target = tmp_path / "log.parquet"
    assert (
        runner.invoke(app, ["convert", str(small_logs["jsonl"]), "-o", str(target)]).exit_code == 0
    )
    before = target.read_bytes()
    result = runner.invoke(app, ["convert", str(target), "-o", str(target)])
    assert result.exit_code == 8 and "refusing to write over the input" in result.stderr
    assert target.read_bytes() == before


def test_convert_rejects_unknown_extension(tmp_path: Path, small_logs: dict[str, Path]) -> None:
    result = runner.invoke(
        app, ["convert", str(small_logs["jsonl"]), "-o", str(tmp_path / "x.csv")]
    )
    assert result.exit_code == 8
    assert "unknown canonical table extension .csv; use one of .parquet, .arrow" in (
        " ".join(result.stderr.replace("│", " ").split())
    )
    assert list(tmp_path.iterdir()) == []
