"""`simulate --like RUN`: the simulator fitted to a real run, judged on the run's own figures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

import analysis
from analysis.simulation.fit import _quantile, fit_run, fit_simulation, log_figures
from cli.app import app
from tests.conftest import SMALL_RUN
from tests.real_runs import RUNS

runner = CliRunner()


def _fit(folder: Path, **given: Any) -> Any:
    return fit_run(folder, given=given)


@pytest.fixture(scope="module")
def fits(run_folders: dict[str, Path]) -> dict[str, Any]:
    return {name: _fit(run_folders[name]) for name in RUNS}


@pytest.mark.parametrize("name", RUNS)
@pytest.mark.parametrize(
    "figure",
    ["length_q50", "length_q90", "length_max", "step_time", "samples_per_prompt",
     "groups_per_step", "tokens_per_second"],
)  # fmt: skip
def test_the_fitted_simulation_has_the_runs_figures_within_10_percent(
    fits: dict[str, Any], name: str, figure: str
) -> None:
    fit = fits[name]
    real, simulated = getattr(fit.log, figure), getattr(fit.simulated, figure)
    assert real is not None and simulated is not None, figure  # every run carries them
    assert simulated == pytest.approx(real, rel=0.10), (name, figure, real, simulated)


@pytest.mark.parametrize("name", RUNS)
def test_the_runs_own_settings_are_fitted(
    fits: dict[str, Any], name: str, run_settings: dict[str, dict[str, Any]]
) -> None:
    config = fits[name].config
    settings = run_settings[name]
    assert config.n_samples_per_prompt == settings["samples_per_prompt"]
    assert config.batch_groups == settings["target_groups"]
    # the step time is calibrated to the run's rollout calls, which the run's trainer set
    assert config.train_step_time == pytest.approx(fits[name].log.step_time)


def test_options_given_win_over_the_fit(run_folders: dict[str, Path]) -> None:
    fit = _fit(run_folders["k2-m1"], max_active_groups=9, train_step_time=5.0)
    assert fit.config.max_active_groups == 9 and fit.config.train_step_time == 5.0
    fitted = {name for name, _, source in fit.fitted if source != "given"}
    assert "train_step_time" not in fitted and "max_active_groups" not in fitted
    assert ("train_step_time", "5", "given") in fit.fitted
    assert "token_time" in fitted  # still calibrated, to the clock given


def test_log_figures_on_a_hand_made_log() -> None:
    """Two steps of two groups of two one-record trajectories; the second step's last
    record completes 3 s after the first step's."""
    rows = []
    for group, (step, done) in enumerate([(0, 10.0), (0, 11.0), (1, 12.0), (1, 14.0)]):
        for member, tokens in enumerate((10 * (group + 1), 5)):
            rows.append({
                "group_index": group, "index": 2 * group + member, "response_length": tokens,
                "tokens": list(range(4 + tokens)), "status": "completed",
                "metadata": {
                    "session_id": f"s{group}-{member}", "full_versions": ["-1"] * 4 + ["0"] * tokens,
                    "dressage_return_rollout_id": step,
                    "proxy_extra_info": {"timestamp": repr(done - member)},
                },
            })  # fmt: skip
    figures = log_figures(analysis.records_to_table(rows))
    lengths = [10, 5, 20, 5, 30, 5, 40, 5]
    assert figures.groups == 4 and figures.trajectories == 8
    assert figures.samples_per_prompt == 2
    assert figures.length_q50 == _quantile(lengths, 0.5) == 7.5
    assert figures.length_max == 40
    assert figures.step_time == pytest.approx(3.0)
    # 120 tokens from the first completion (9.0) to the last (14.0)
    assert figures.tokens_per_second == pytest.approx(120 / 5.0)
    assert figures.failed_groups_pct == 0 and figures.multi_segment_pct == 0


def test_quantile_is_linear_between_neighbours() -> None:
    assert _quantile([], 0.5) is None
    assert _quantile([4], 0.9) == 4
    assert _quantile([1, 2, 3, 4], 0.5) == 2.5
    assert _quantile([0, 10], 0.9) == pytest.approx(9.0)
    series = pl.Series([3, 1, 4, 1, 5, 9, 2, 6])
    assert _quantile(series.to_list(), 0.3) == pytest.approx(series.quantile(0.3, "linear"))


def test_simulate_like_a_log_prints_the_fit_and_writes_the_runs_pipeline(
    small_logs: dict[str, Path], tmp_path: Path
) -> None:
    """A log (not a run folder: that one is simulated from its model, tests/cli/
    test_simulate_like.py) fits the generic simulator."""
    out, log = tmp_path / "like.jsonl", small_logs["jsonl"]
    result = runner.invoke(app, ["simulate", "--like", str(log), "-o", str(out), "--seed", "4"])
    assert result.exit_code == 0, result.stderr
    for words in ("Fitted to", "calibrated to the step time", "the run", "simulated (400 groups)",
                  "response tokens, median", "not in a log: a guess"):  # fmt: skip
        assert words in result.stdout, words
    records = [json.loads(line) for line in out.read_text().splitlines()]
    groups = {r["group_index"] for r in records}
    assert len(groups) == analysis.prepare(analysis.load_logs([log])).n_groups
    per_group = {
        len([r for r in records if r["group_index"] == g and r["metadata"]["segment_index"] == 0])
        for g in groups
    }
    assert per_group == {SMALL_RUN.n_samples_per_prompt}
    assert result.stderr == f"wrote {len(records):,} records ({len(groups):,} groups) to {out}\n"
    printed = runner.invoke(
        app, ["simulate", "--like", str(log), "-o", str(tmp_path / "j.jsonl"), "--json"]
    )
    assert printed.exit_code == 0, printed.stderr
    fit = json.loads(printed.stdout)
    assert fit["model"] == "simulator" and fit["run"]["groups"] == len(groups)
    assert {row["parameter"] for row in fit["fitted"]} >= {"batch_groups", "token_time"}


def test_simulate_like_a_missing_run_is_a_one_line_error(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["simulate", "--like", str(tmp_path / "nope"), "-o", str(tmp_path / "o.jsonl")]
    )
    assert result.exit_code == analysis.ExitCode.INPUT_NOT_FOUND
    assert len(result.stderr.strip().splitlines()) == 1 and "nope" in result.stderr
    assert not (tmp_path / "o.jsonl").exists()


def test_a_length_distribution_given_wins_over_the_logs_lengths(
    run_folders: dict[str, Path],
) -> None:
    fit = _fit(run_folders["k2-m1"], median_response_tokens=500)
    assert fit.config.response_lengths == () and fit.config.median_response_tokens == 500
    assert ("median_response_tokens", "500", "given") in fit.fitted
    assert fit.simulated.length_q50 == pytest.approx(500, rel=0.3)


def test_a_plain_log_is_timed_by_completions_on_both_sides_and_says_so(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    config = analysis.SimulationConfig(n_groups=80, seed=2)
    from analysis.output.raw_logs import write_jsonl

    write_jsonl(analysis.simulate(config), log)
    fit = fit_simulation(analysis.load_logs([log]))
    assert any("no rollout calls" in note for note in fit.notes)
    # read off completions on both sides (the trainer's 20 s step is not in such a log)
    assert fit.simulated.step_time == pytest.approx(fit.log.step_time, rel=0.5)
    assert fit.log.step_time is not None and fit.log.step_time < 10


def test_a_filtered_log_is_said_to_be_one(run_folders: dict[str, Path]) -> None:
    fit = fit_simulation(analysis.load_logs([run_folders["k2-m1"] / "rollout_data"]))
    assert any("returned to the trainer" in note for note in fit.notes)


def test_an_empty_log_is_a_config_error_naming_no_flag(tmp_path: Path) -> None:
    (tmp_path / "empty.jsonl").write_text("")
    result = runner.invoke(
        app, ["simulate", "--like", str(tmp_path / "empty.jsonl"), "-o", str(tmp_path / "o.jsonl")]
    )
    assert result.exit_code in (
        analysis.ExitCode.CONFIG,
        analysis.ExitCode.LOG_FORMAT,
        analysis.ExitCode.UNKNOWN_FORMAT,
    )
    assert "--groups" not in result.stderr and result.stderr.count("\n") == 1
