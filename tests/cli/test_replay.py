"""`dressage-replay replay`: JSON shape, decisions file, one-line errors with documented codes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

import analysis
from cli.app import app

runner = CliRunner()

COUNT_KEYS = {
    "total", "kept", "dropped_stale", "dropped_stale_arrival", "dropped_stale_pending",
    "rejected_span",
}  # fmt: skip


def invoke(*args: str | Path) -> tuple[int, str, str]:
    result = runner.invoke(app, [str(a) for a in args])
    return result.exit_code, result.stdout, result.stderr


def test_json_summary_has_the_documented_shape(small_logs: dict[str, Path]) -> None:
    code, out, err = invoke("replay", small_logs["jsonl"], "-k", "2", "-m", "1", "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["config"] == {"keep_versions": 2, "max_preempts": 1, "batch_groups": 3}
    for unit in ("groups", "samples", "trajectories", "tokens"):
        assert summary[unit].keys() >= COUNT_KEYS
        counts = summary[unit]
        assert (
            counts["dropped_stale"]
            == counts["dropped_stale_arrival"] + counts["dropped_stale_pending"]
        )
        assert counts["total"] == sum(
            counts[k] for k in ("kept", "dropped_stale", "rejected_span", "failed")
        )
    assert summary["batches"].keys() == {"emitted", "last_partial"}
    assert summary["version_gap"].keys() == {"min", "mean", "max"}
    assert {"min", "mean", "max"} <= summary["version_span"]["kept"].keys()
    assert {"min", "mean", "max"} <= summary["version_span"]["all"].keys()
    assert summary["versions_observed"] == len(summary["versions"])
    assert (
        summary["dressage_metrics"]["staleness/dropped_groups"]
        == summary["groups"]["dropped_stale"]
    )
    assert set(summary["dressage_metrics"]) == {
        "staleness/dropped_groups",
        "staleness/version_gap_min", "staleness/version_gap_max", "staleness/version_gap_mean",
        "staleness/version_span_mean", "staleness/version_span_max", "staleness/version_span_min",
        "staleness/partial_rollout_rejected_groups", "staleness/partial_rollout_rejected_samples",
        "staleness/current_version_index", "staleness/cutoff_version_index",
    }  # fmt: skip


def test_json_equals_library_summary(small_logs: dict[str, Path]) -> None:
    code, out, _ = invoke("replay", small_logs["pt"], "-k", "1", "-m", "none", "-b", "4", "--json")
    assert code == 0
    table = analysis.load_logs([small_logs["pt"]])
    expected = analysis.replay(table, analysis.ReplayConfig(keep_versions=1, batch_groups=4))
    assert json.loads(out) == {
        "engine": "simple-loop",
        **json.loads(json.dumps(expected.summary.to_dict())),
    }


def test_table_output_names_the_setting(small_logs: dict[str, Path]) -> None:
    code, out, _ = invoke("replay", small_logs["jsonl"], "--keep-versions", "1")
    assert code == 0
    assert "keep_versions=1" in out and "max_preempts=none" in out
    assert "stale, pending" in out and "version gap, kept" in out
    # Said where the numbers are shown: this replay's version count (inspect counts the
    # whole log), and a mean over trajectories (the decisions file's is per group)
    assert "versions observed" in out and "(by this replay; current index" in out
    assert re.search(r"version gap, kept +min \d+ +mean [\d.]+ +max \d+  \(per trajectory\)", out)


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_decisions_file(small_logs: dict[str, Path], tmp_path: Path, suffix: str) -> None:
    target = tmp_path / f"decisions{suffix}"
    code, _, err = invoke(
        "replay", small_logs["jsonl"], "-k", "1", "-m", "0", "--decisions", target
    )
    assert code == 0, err
    frame = pl.read_csv(target) if suffix == ".csv" else pl.read_parquet(target)
    assert frame.columns[:6] == [
        "group_id",
        "decision",
        "stage",
        "batch",
        "version_index",
        "version_gap",
    ]
    assert set(frame["decision"]) <= {"kept", "dropped_stale", "rejected_span", "failed"}
    assert {"kept", "dropped_stale", "rejected_span"} <= set(frame["decision"])
    stale = frame.filter(pl.col("decision") == "dropped_stale")
    assert set(stale["stage"]) <= {"arrival", "pending"}
    assert (
        frame.filter(pl.col("decision") != "dropped_stale")["stage"].null_count()
        == frame.height - stale.height
    )
    kept = frame.filter(pl.col("decision") == "kept")
    assert kept["batch"].null_count() == 0
    assert (
        frame.filter(pl.col("decision") != "kept")["batch"].null_count()
        == frame.height - kept.height
    )
    assert list(tmp_path.iterdir()) == [target]  # no temporary file left behind


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["-k", "-1"], 7, "require `keep_versions` >= 0 (found -1)"),
        (["-m", "-2"], 7, "max_preempts"),
        (["-m", "lots"], 2, "whole number or none"),
        # In our words, not pydantic's ("unable to parse string as an integer").
        (["-k", "2..3"], 2, "(found '2..3'); lists of K values are for sweep, plot and report"),
        (["-b", "2.5"], 2, "--batch-groups' / '-b': expected a whole number (found '2.5')"),
        (["--on-bad-record", "ignore"], 2, "expected one of fail, skip (found 'ignore')"),
        (["-b", "\u0663"], 2, "expected a whole number (found '\u0663')"),  # int() takes it
        (["-b", "+-3.0"], 2, "expected a whole number (found '+-3.0')"),
        (["-b", "0"], 7, "batch_groups"),
        (["--field", "nonsense"], 2, "MEANING=PATH"),
        (
            ["--field", "group=a", "--field", "group=b"],
            2,
            "group is given twice (group=a, group=b)",
        ),
        # Far beyond any run, and beyond 64 bits: refused, not an internal error.
        (["-k", str(10**20)], 7, "require `keep_versions` <= 1,000,000"),
        (["-m", str(10**20)], 7, "require `max_preempts` <= 1,000,000"),
        (["-b", str(10**20)], 7, "require `batch_groups` <= 1,000,000"),
    ],
)
def test_invalid_settings(
    small_logs: dict[str, Path], args: list[str], code: int, message: str
) -> None:
    exit_code, out, err = invoke("replay", small_logs["jsonl"], *args)
    assert exit_code == code
    assert message in " ".join(err.replace("│", " ").split())  # typer's box may wrap it
    assert "Traceback" not in err and out == ""


def test_whole_decimals_are_whole_numbers_for_k_m_and_b(small_logs: dict[str, Path]) -> None:
    code, out, err = invoke(
        "replay", small_logs["jsonl"], "-k", "2.0", "-m", "1.0", "-b", "3.", "--json"
    )
    assert code == 0, err
    assert json.loads(out)["config"] == {"keep_versions": 2, "max_preempts": 1, "batch_groups": 3}


def test_missing_input_unknown_format_bad_record(tmp_path: Path) -> None:
    code, _, err = invoke("replay", tmp_path / "nope.jsonl", "-b", "2")
    assert (code, err.count("\n")) == (3, 1) and "nope.jsonl" in err
    text = tmp_path / "readme.txt"
    text.write_text("not a log")
    code, _, err = invoke("replay", text, "-b", "2")
    assert code == 4 and "unknown format" in err
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"group_index": 1}\n{oops\n')
    code, _, err = invoke("replay", broken, "-b", "2")
    assert code == 5 and "broken.jsonl:2: not valid JSON" in err
    code, out, err = invoke("replay", broken, "-b", "2", "--on-bad-record", "skip", "--json")
    assert code == 0 and json.loads(out)["skipped"]["by_reason"] == {"bad record": 1}
    assert err.startswith(f"warning: skipped 1 bad record; the first:\n  {broken}:2:")
    broken.write_text('{"group_index": 1}\n{oops\n[]\n{"x": 1}\n')
    _, _, err = invoke("replay", broken, "-b", "2", "--on-bad-record", "skip")
    assert "warning: skipped 2 bad records, 1 record missing a field; the first:" in err


def test_missing_fields_name_the_option(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps({"metadata": {"parent_traj_id": "t"}}) + "\n")
    code, _, err = invoke("replay", log, "-b", "1")
    assert code == 6 and "--field group=PATH" in err and "metadata.parent_traj_id" in err
    log.write_text(json.dumps({"group_index": 1}) + "\n")
    code, _, err = invoke("replay", log)
    assert code == 7 and "--batch-groups" in err


def test_traceback_only_on_request(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    log.write_text("{bad\n")
    _, _, err = invoke("replay", log, "-b", "1")
    assert "Traceback" not in err
    _, _, err = invoke("replay", log, "-b", "1", "--traceback")
    assert "Traceback" in err


def test_order_by_a_canonical_column_the_replay_does_not_read(
    small_logs: dict[str, Path], tmp_path: Path
) -> None:
    """replay reads only the replay's columns, plus the one --order-by names."""
    canonical = tmp_path / "run.parquet"
    code, _, err = invoke("convert", small_logs["jsonl"], "-o", canonical)
    assert code == 0, err
    args = ("-k", "2", "-b", "3", "--order-by", "sample_index", "--json")
    code, out, err = invoke("replay", canonical, *args)
    assert code == 0, err
    table = analysis.load_logs([canonical])
    expected = analysis.replay(
        table, analysis.ReplayConfig(keep_versions=2, batch_groups=3), order_by="sample_index"
    )
    assert json.loads(out) == {
        "engine": "simple-loop",
        **json.loads(json.dumps(expected.summary.to_dict())),
    }


def test_an_unknown_option_suggests_the_one_it_begins(small_logs: dict[str, Path]) -> None:
    """`replay --keep 2` said "No such option: --keep (Possible options: --help)"."""
    import subprocess
    import sys

    command = [sys.executable, "-m", "cli", "replay", str(small_logs["jsonl"]), "--keep", "2"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "did you mean --keep-versions?" in done.stderr
    assert "Possible options" not in done.stderr
