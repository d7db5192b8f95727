"""The on-disk shapes of real slime and Dressage dumps (tests/fixtures/formats.tar.xz, the
survey's formats/): evaluation dumps kept apart, plain slime's per-call weight versions,
train-side dumps joined for ``compare``, and the counts of each dataset."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

import analysis
from analysis.formats.slime_dumps.train_dumps import train_dump_layout
from cli.app import app

ARCHIVE = Path(__file__).parents[1] / "fixtures" / "formats.tar.xz"
runner = CliRunner()


@pytest.fixture(scope="module")
def formats(tmp_path_factory: pytest.TempPathFactory) -> Path:
    into = tmp_path_factory.mktemp("formats")
    with tarfile.open(ARCHIVE) as tar:
        tar.extractall(into, filter="data")
    return into / "formats"


def inspected(
    paths: list[Path], **settings: Any
) -> tuple[analysis.LogInspection, analysis.LoadReport]:
    report = analysis.LoadReport()
    table = analysis.load_logs(paths, report=report, **settings)
    return analysis.inspect_log(table, report), report


# ------------------------------------------------------------------ counts of each dataset


@pytest.mark.parametrize(
    ("dataset", "groups", "trajectories", "segments", "steps", "versions"),
    [
        ("slime_native/rollout_data", 24, 96, 96, 6, ("1", "2", "3", "4", "5", "6")),
        ("dressage_run_with_eval/rollout_data", 20, 80, 100, 10, None),
        ("dressage_r3/rollout_data", 2, 4, 4, 1, ("2",)),
        ("slime_native/rollouts_default_str.jsonl", 24, 96, 96, 0, ("1", "2", "3", "4", "5", "6")),
        ("dressage_r3/rollouts_default_str.jsonl", 2, 4, 4, 1, ("2",)),
    ],
)
def test_counts_of_each_dataset_match_the_survey(
    formats: Path,
    dataset: str,
    groups: int,
    trajectories: int,
    segments: int,
    steps: int,
    versions: tuple[str, ...] | None,
) -> None:
    """FORMATS.md §2.1/§2.2 "true" column; without --trust-pickle (dressage_r3 holds a
    NumPy array); the JSONL holds tensor fields as text, which no replayed field is."""
    found, _ = inspected([formats / dataset])
    assert (found.groups, found.trajectories, found.segments, found.trainer_steps) == (
        groups, trajectories, segments, steps,
    )  # fmt: skip
    assert found.eval_groups == found.eval_records == 0
    assert found.quality["records_skipped"] == 0
    if versions is not None:
        assert found.versions == versions
    else:  # Dressage's own labels, in observation order
        assert sorted(found.versions) == ["1", "2", "3", "4", "5", "6", "7"]


@pytest.mark.parametrize(
    ("folder", "eval_files", "eval_groups", "eval_records"),
    [
        ("slime_native/rollout_data", "eval_3.pt", 4, 4),
        ("dressage_run_with_eval/rollout_data", "eval_4.pt, eval_9.pt", 8, 16),
    ],
)
def test_evaluation_dumps_are_left_out_with_a_warning_and_read_with_include_eval(
    formats: Path, folder: str, eval_files: str, eval_groups: int, eval_records: int
) -> None:
    plain, report = inspected([formats / folder])
    assert plain.eval_records == 0
    (warning,) = [w for w in report.warnings if "evaluation dump" in w]
    assert eval_files in warning and "include_eval=True" in warning

    both, report = inspected([formats / folder], include_eval=True)
    assert not [w for w in report.warnings if "evaluation dump" in w]
    assert (both.eval_groups, both.eval_records) == (eval_groups, eval_records)
    assert both.groups == plain.groups + eval_groups  # never merged with training groups
    assert both.records == plain.records + eval_records


def test_evaluation_group_ids_name_the_step_and_the_instance_or_index(formats: Path) -> None:
    table = analysis.load_logs([formats / "dressage_run_with_eval/rollout_data/eval_4.pt"])
    assert table["group_id"].unique(maintain_order=True).to_list() == [
        f"eval:4:aime_00{i}" for i in range(4)
    ]
    table = analysis.load_logs([formats / "slime_native/rollout_data/eval_3.pt"])
    assert table["group_id"].to_list() == [f"eval:3:{i}" for i in range(4)]


def test_a_folder_of_evaluation_dumps_only_is_refused_naming_the_setting(
    formats: Path, tmp_path: Path
) -> None:
    (tmp_path / "eval_3.pt").write_bytes(
        (formats / "slime_native/rollout_data/eval_3.pt").read_bytes()
    )
    with pytest.raises(analysis.UnknownFormatError, match="only evaluation dumps"):
        analysis.load_logs([tmp_path])
    assert analysis.load_logs([tmp_path], include_eval=True).height == 4


# ------------------------------------------------------------------ plain slime versions


def test_weight_versions_give_end_versions_and_spans_over_calls(formats: Path) -> None:
    table = analysis.load_logs(sorted((formats / "slime_native/rollout_data").glob("[0-9].pt")))
    assert table.height == 96
    assert table["end_version_derived"].all()
    spans = table["version_spans"].list.len()
    assert spans.max() == 2 and (spans == 2).sum() == 5  # ['1','2'] x2, ['5','6'] x3
    two = table.filter(spans == 2)
    assert sorted(two["end_version"].to_list()) == ["2", "2", "6", "6", "6"]
    # spans are indexed by generate call: ['5', '6'] is calls 0 and 1
    assert two["version_spans"][0].to_list() == [
        {"start": 0, "end": 1, "version": "1"},
        {"start": 1, "end": 2, "version": "2"},
    ]
    result = analysis.replay(table, analysis.ReplayConfig(max_preempts=0))
    assert (result.summary.counts["groups"]["rejected_span"] or 0) > 0


def test_weight_versions_yield_to_token_versions_and_text_is_no_error() -> None:
    records = [
        {"group_index": 0, "session_id": "a", "weight_versions": ["1", "2"],
         "metadata": {"full_versions": ["-1", "7"]}},
        {"group_index": 0, "session_id": "b", "weight_versions": "['1']",
         "rollout_top_p_token_ids": "tensor([1, 2])", "rollout_routed_experts": "[[[4 5]]]"},
        {"group_index": 0, "session_id": "c", "weight_versions": []},
    ]  # fmt: skip
    table = analysis.records_to_table(records)
    assert table["end_version"].to_list() == ["7", None, None]


# ------------------------------------------------------------------ train-side dumps


def test_train_dumps_of_both_layouts_are_read_into_rows(formats: Path) -> None:
    head = analysis.read_train_dumps([formats / "slime_native/train_data"])
    assert (head.files, head.rows.height, head.joinable.height) == (6, 96, 96)
    assert head.rows["layout"].unique().to_list() == ["slime"]
    drift = head.rows["log_prob_drift"]
    assert drift.min() == pytest.approx(0.0100, abs=5e-5)
    assert drift.max() == pytest.approx(0.0100, abs=5e-5)

    pinned = analysis.read_train_dumps([formats / "slime_pinned_train_data/0_0.pt"])
    assert pinned.rows.select("layout", "rollout_id", "rank", "sample_index").row(0) == (
        "slime-pinned", 0, 0, None,
    )  # fmt: skip
    assert pinned.joinable.height == 0
    assert not pinned.rows["has_log_probs"][0]


@pytest.mark.parametrize("folder", ["slime_native/train_data", "slime_pinned_train_data"])
def test_a_train_dump_read_as_a_log_says_where_it_belongs(formats: Path, folder: str) -> None:
    with pytest.raises(analysis.UnknownFormatError, match=r"train-side dump.*train_dumps=PATH"):
        analysis.load_logs([formats / folder])


def test_train_dump_layouts_are_told_from_rollout_dumps() -> None:
    assert train_dump_layout({"rollout_id": 0, "samples": [{"index": 0}]}) is None
    assert train_dump_layout({"rollout_id": 0, "rank": 0, "rollout_data": {}}) == "slime-pinned"


def test_compare_joins_train_log_probs_to_the_rollout_log(formats: Path) -> None:
    table = analysis.load_logs([formats / "slime_native/rollout_data"])
    assert table["log_prob_drift"].null_count() == table.height  # rollout log-probs only
    train = analysis.read_train_dumps([formats / "slime_native/train_data"])
    setting = analysis.ReplayConfig()
    result = analysis.compare_logs(
        table, table, config_a=setting, config_b=setting, train_dumps=(train, None)
    )
    drift = result.drift_by_gap
    assert drift["run"].unique().to_list() == ["A"]
    assert drift["records"].sum() == 96
    assert drift["mean_abs_log_prob_diff"].to_list() == pytest.approx(
        [0.0100] * drift.height, abs=5e-5
    )


# ------------------------------------------------------------------ the command line


def test_cli_eval_flag_and_train_dump_error(formats: Path) -> None:
    folder = str(formats / "slime_native/rollout_data")
    plain = runner.invoke(app, ["inspect", folder, "--json"])
    assert plain.exit_code == 0, plain.stderr
    assert "pass --eval to read them" in plain.stderr
    counted = runner.invoke(app, ["inspect", folder, "--eval", "--json"])
    assert counted.exit_code == 0, counted.stderr
    found = json.loads(counted.stdout)
    assert (found["groups"], found["eval_groups"], found["eval_records"]) == (28, 4, 4)

    train = runner.invoke(app, ["replay", str(formats / "slime_native/train_data")])
    assert train.exit_code == 4
    assert train.stderr.count("\n") == 1 and "--train-dumps PATH" in train.stderr


def test_cli_compare_with_train_dumps(formats: Path) -> None:
    logs = str(formats / "slime_native/rollout_data")
    result = runner.invoke(
        app,
        ["compare", logs, logs, "--names", "a,b", "--json",
         "--train-dumps", str(formats / "slime_native/train_data"),
         "--train-dumps", str(formats / "slime_pinned_train_data")],
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    found = json.loads(result.stdout)
    drift = pl.DataFrame(found["drift_by_gap"])
    assert drift["run"].unique().to_list() == ["a"] and drift["records"].sum() == 96
    assert any("cannot be joined" in note for note in found["notes"])
