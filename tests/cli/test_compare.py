"""`dressage-replay compare`: two logs side by side, with drift and a plot."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

import analysis
from analysis.output.raw_logs import write_jsonl
from analysis.simulation.parameters import SimulationConfig
from analysis.simulation.simulator import simulate
from cli.app import app

runner = CliRunner()


def test_compare_two_simulated_runs(tmp_path: Path) -> None:
    slow, fast = tmp_path / "slow.jsonl", tmp_path / "fast.jsonl"
    base = SimulationConfig(n_groups=60, log_prob_drift=0.05, seed=3)
    write_jsonl(simulate(base), slow)
    write_jsonl(
        simulate(SimulationConfig(n_groups=60, log_prob_drift=0.05, seed=3, train_step_time=2.0)),
        fast,
    )
    figure = tmp_path / "compare.png"
    args = [
        "compare",
        str(slow),
        str(fast),
        "--names",
        "slow,fast",
        "--plot",
        str(figure),
        "--json",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    metrics = {row["metric"]: row for row in data["table"]}
    observed = metrics["versions observed"]
    for name, path in (("slow", slow), ("fast", fast)):
        single = analysis.replay(analysis.load_logs([path]), analysis.ReplayConfig())
        assert observed[name] == len(single.summary.versions)
    assert observed["fast"] > observed["slow"]
    assert {row["run"] for row in data["drift_by_gap"]} == {"slow", "fast"}
    assert figure.read_bytes().startswith(b"\x89PNG")
    assert result.stderr == f"wrote {figure}\n"
    table = runner.invoke(app, ["compare", str(slow), str(fast)])
    assert "Log-prob drift by version gap" in table.stdout


def test_compare_needs_two_names(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    write_jsonl(simulate(SimulationConfig(n_groups=4)), log)
    result = runner.invoke(app, ["compare", str(log), str(log), "--names", "only"])
    assert result.exit_code == 2 and "two different names" in result.stderr


def test_skipped_records_of_either_log_are_reported(tmp_path: Path) -> None:
    """compare dropped each log's load report: what it skipped went unsaid."""
    good, broken = tmp_path / "good.jsonl", tmp_path / "broken.jsonl"
    analysis.write_log(simulate(SimulationConfig(n_groups=8, seed=1)), good, "jsonl")
    broken.write_text(good.read_text() + "{oops\n")
    result = runner.invoke(app, ["compare", str(good), str(broken), "--on-bad-record", "skip"])
    assert result.exit_code == 0, result.stderr
    assert result.stderr.startswith("warning: skipped 1 bad record; the first:\n")
    assert f"{broken}:" in result.stderr
