"""compare_logs and plot_compare over simulated fast- and slow-trainer runs."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

import analysis
from analysis.compare import compare_logs
from analysis.errors import ConfigError
from analysis.simulation.parameters import SimulationConfig
from analysis.simulation.simulator import simulate
from analysis.views.comparison import (
    DRIFT_SCHEMA,
    METRICS,
    CompareResult,
    plot_compare,
)

BASE = SimulationConfig(
    n_groups=60,
    n_samples_per_prompt=4,
    max_active_groups=12,
    batch_groups=4,
    median_response_tokens=120,
    max_response_tokens=2000,
    prompt_tokens=16,
    multi_turn_fraction=0.5,
    multi_segment_fraction=0.5,
    abort_fraction=0.05,
    log_prob_drift=0.05,
    seed=5,
)
SETTING = analysis.ReplayConfig(keep_versions=2, max_preempts=2)


def simulated_table(**changes: Any) -> pl.DataFrame:
    return analysis.records_to_table(list(simulate(dataclasses.replace(BASE, **changes))))


@pytest.fixture(scope="module")
def fast() -> pl.DataFrame:
    return simulated_table(train_step_time=1.0)


@pytest.fixture(scope="module")
def slow() -> pl.DataFrame:
    return simulated_table(train_step_time=4.0)


@pytest.fixture(scope="module")
def result(fast: pl.DataFrame, slow: pl.DataFrame) -> CompareResult:
    return compare_logs(fast, slow, config_a=SETTING, config_b=SETTING, names=("fast", "slow"))


def column(result: CompareResult, name: str) -> dict[str, float | None]:
    return dict(zip(result.table["metric"], result.table[name], strict=True))


@pytest.mark.parametrize("run", ["fast", "slow"])
def test_table_repeats_each_single_replay_summary(
    result: CompareResult, run: str, request: pytest.FixtureRequest
) -> None:
    table = request.getfixturevalue(run)
    summary = analysis.replay(analysis.prepare(table), SETTING).summary.to_dict()
    figures = column(result, run)
    assert result.table["metric"].to_list() == list(METRICS)
    assert figures["versions observed"] == summary["versions_observed"]
    assert figures["groups total"] == summary["groups"]["total"]
    for unit in ("groups", "samples", "tokens"):
        rates = summary[unit]["rates"]
        lost = rates["dropped_stale"] + rates["rejected_span"] + rates["failed"]
        assert figures[f"{unit} kept (%)"] == pytest.approx(100 * rates["kept"])
        assert figures[f"{unit} lost (%)"] == pytest.approx(100 * lost)
    for stat in ("min", "mean", "max"):
        assert figures[f"version gap {stat} (versions)"] == pytest.approx(
            summary["version_gap"][stat]
        )
    for stat in ("mean", "max"):
        assert figures[f"version span {stat} (versions)"] == pytest.approx(
            summary["version_span"]["kept"][stat]
        )


def test_the_two_runs_differ_as_a_faster_trainer_should(result: CompareResult) -> None:
    fast, slow = column(result, "fast"), column(result, "slow")
    assert fast["versions observed"] > slow["versions observed"]  # type: ignore[operator]
    assert fast["groups lost (%)"] > slow["groups lost (%)"]  # type: ignore[operator]


def test_distributions_are_shares_of_kept_trajectories(result: CompareResult) -> None:
    for frame, value in (
        (result.gap_distribution, "version_gap"),
        (result.span_distribution, "span"),
    ):
        assert frame.columns == ["run", value, "trajectories", "share"]
        totals = frame.group_by("run").agg(pl.col("share").sum(), pl.col("trajectories").sum())
        assert sorted(totals["run"].to_list()) == ["fast", "slow"]
        assert totals["share"].to_list() == pytest.approx([1.0, 1.0])
    for name, summary in zip(result.names, result.summaries, strict=True):
        spans = result.span_distribution.filter(pl.col("run") == name)
        histogram = summary.version_span["kept"]["histogram"]
        assert dict(zip(map(str, spans["span"]), spans["trajectories"], strict=True)) == histogram
        gaps = result.gap_distribution.filter(pl.col("run") == name)
        mean = (gaps["version_gap"] * gaps["share"]).sum()
        assert mean == pytest.approx(summary.version_gap["mean"])


def test_drift_rises_with_the_version_gap(result: CompareResult) -> None:
    drift = result.drift_by_gap
    assert drift.columns == list(DRIFT_SCHEMA)
    for name in result.names:
        run = drift.filter(pl.col("run") == name)
        by_gap = dict(zip(run["version_gap"], run["mean_abs_log_prob_diff"], strict=True))
        assert by_gap[2] > by_gap[0]
        well_sampled = run.filter(pl.col("records") >= 10)["mean_abs_log_prob_diff"].to_list()
        assert len(well_sampled) >= 3
        assert well_sampled == sorted(well_sampled)


def test_drift_covers_all_data_not_only_what_the_setting_keeps(
    fast: pl.DataFrame, result: CompareResult
) -> None:
    drift = result.drift_by_gap.filter(pl.col("run") == "fast")
    kept_gap_max = column(result, "fast")["version gap max (versions)"]
    assert drift["version_gap"].max() > kept_gap_max  # type: ignore[operator]
    failed = analysis.prepare(fast).groups.filter(pl.col("failed"))["group_id"]
    with_drift = fast.filter(~pl.col("group_id").is_in(failed.implode()))
    assert drift["records"].sum() == with_drift.height


def test_without_log_probs_drift_is_empty_and_not_plotted() -> None:
    plain = simulated_table(log_prob_drift=0.0)
    result = compare_logs(plain, plain, config_a=SETTING, config_b=SETTING)
    assert_frame_equal(result.drift_by_gap, pl.DataFrame(schema=DRIFT_SCHEMA))
    assert len(plot_compare(result).axes) == 2
    assert result.notes == (
        "neither run has records with both rollout_log_probs and log_probs: no drift by gap",
    )


def test_a_run_without_log_probs_is_named(fast: pl.DataFrame) -> None:
    plain = simulated_table(log_prob_drift=0.0)
    result = compare_logs(
        fast, plain, config_a=SETTING, config_b=SETTING, names=("drifting", "plain")
    )
    assert result.drift_by_gap["run"].unique().to_list() == ["drifting"]
    assert result.notes == (
        "run plain has no records with both rollout_log_probs and log_probs: "
        "drift by gap is shown for run drifting only",
    )


def test_a_log_compared_with_itself_gives_identical_columns(fast: pl.DataFrame) -> None:
    result = compare_logs(fast, fast, config_a=SETTING, config_b=SETTING)
    assert result.table.columns == ["metric", "A", "B"]
    assert result.table["A"].to_list() == result.table["B"].to_list()
    for frame in (result.gap_distribution, result.span_distribution, result.drift_by_gap):
        a = frame.filter(pl.col("run") == "A").drop("run")
        assert a.height > 0
        assert_frame_equal(a, frame.filter(pl.col("run") == "B").drop("run"))


def test_two_settings_on_one_log(fast: pl.DataFrame) -> None:
    prepared = analysis.prepare(fast)
    loose, strict = analysis.ReplayConfig(), analysis.ReplayConfig(keep_versions=1, max_preempts=0)
    result = compare_logs(prepared, prepared, config_a=loose, config_b=strict)
    figures = dict(zip(result.table["metric"], result.table.select("A", "B").rows(), strict=True))
    assert figures["groups kept (%)"][0] > figures["groups kept (%)"][1]
    assert figures["version span max (versions)"][1] == 1
    assert result.configs[1].batch_groups == BASE.batch_groups  # inferred from trainer steps


def test_a_prepared_log_has_no_drift_and_says_so(fast: pl.DataFrame, result: CompareResult) -> None:
    mixed = compare_logs(
        analysis.prepare(fast), fast, config_a=SETTING, config_b=SETTING, names=("fast", "again")
    )
    assert mixed.drift_by_gap["run"].unique().to_list() == ["again"]
    assert len(mixed.notes) == 1
    assert "PreparedLog" in mixed.notes[0]
    assert "fast" in mixed.notes[0]
    assert_frame_equal(mixed.table.select("metric", "fast"), result.table.select("metric", "fast"))


def test_a_prepared_log_beside_a_table_without_log_probs(fast: pl.DataFrame) -> None:
    plain = simulated_table(log_prob_drift=0.0)
    mixed = compare_logs(analysis.prepare(fast), plain, config_a=SETTING, config_b=SETTING)
    assert mixed.drift_by_gap.height == 0
    assert "PreparedLog" in mixed.notes[0]
    assert mixed.notes[1] == (
        "run B has no records with both rollout_log_probs and log_probs: no drift by gap"
    )


def test_to_dict_is_json(result: CompareResult) -> None:
    out = json.loads(json.dumps(result.to_dict()))
    assert [run["name"] for run in out["runs"]] == ["fast", "slow"]
    assert out["runs"][0]["config"]["keep_versions"] == 2
    assert len(out["table"]) == len(METRICS)
    rows = {row["metric"]: row for row in out["table"]}
    assert type(rows["groups total"]["fast"]) is int  # counts as integers, not 300.0
    assert type(rows["version gap max (versions)"]["slow"]) is int
    assert type(rows["groups kept (%)"]["fast"]) is float
    assert rows["groups total"]["fast"] == result.summaries[0].counts["groups"]["total"]
    assert out["drift_by_gap"] and set(out["summaries"]) == {"fast", "slow"}


def test_plot_has_gap_span_and_drift_panels(result: CompareResult) -> None:
    figure = plot_compare(result)
    gaps, spans, drift = figure.axes
    assert "gap" in gaps.get_title().lower() and "span" in spans.get_title().lower()
    assert "drift" in drift.get_title().lower()
    assert len(gaps.patches) == result.gap_distribution.height
    assert len(spans.patches) == result.span_distribution.height
    for ax in (gaps, spans):
        assert ax.get_ylabel() == "share of kept trajectories (%)"
        assert "(" in ax.get_xlabel()
        box = ax.get_legend()
        assert box is not None
        legend = [text.get_text() for text in box.get_texts()]
        assert [label.split(" ")[0] for label in legend] == ["fast", "slow"]
        assert "K=2, M=2, B=4" in legend[0]
    assert [str(line.get_label()).split(" ")[0] for line in drift.get_lines()] == ["fast", "slow"]
    assert "nats" in drift.get_ylabel()
    assert "version gap" in drift.get_xlabel()


@pytest.mark.parametrize("names", [("A", "A"), ("A", "metric"), ("A", "")])
def test_run_names_must_be_distinct(fast: pl.DataFrame, names: tuple[str, str]) -> None:
    with pytest.raises(ConfigError, match="run names"):
        compare_logs(fast, fast, config_a=SETTING, config_b=SETTING, names=names)


def test_compare_leaves_matplotlib_unimported() -> None:
    import subprocess
    import sys

    code = "import sys, analysis.views.comparison; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_drift_of_few_records_is_drawn_hollow_with_its_count(result: CompareResult) -> None:
    """A gap's mean of one record was drawn like one of 919 (issue 33)."""
    from matplotlib.colors import to_rgba

    from analysis.views.comparison import thin_gaps

    drift = plot_compare(result).axes[2]
    expected = {}
    for name in result.names:
        run = result.drift_by_gap.filter(pl.col("run") == name)
        for gap, count, few in zip(
            run["version_gap"], run["records"], thin_gaps(run["records"].to_list()), strict=True
        ):
            expected[(name, gap)] = (count, few)
    assert any(few for _, few in expected.values()) and not all(f for _, f in expected.values())
    counts = {text.get_text() for text in drift.texts}
    assert counts == {f"n={count}" for count, few in expected.values() if few}
    white = to_rgba("white")
    faces = [np.asarray(c.get_facecolor(), dtype=float).reshape(-1, 4) for c in drift.collections]
    hollow = [face for face in faces if len(face) and tuple(face[0]) == white]
    assert len(hollow) == sum(few for _, few in expected.values())
    assert "hollow" in drift.get_title()
