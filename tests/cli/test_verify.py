"""``replay RUN --trajectories`` and ``verify RUN`` on real Dressage run folders: the replay
reproduces what Dressage decided, and verify says so step by step, or says where not."""

from __future__ import annotations

import json
import pickle
import re
import shutil
from collections.abc import Callable
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

from analysis.engine.run_loop.replay import RUN_DECISION_COLUMNS
from cli.app import app
from tests.real_runs import RUNS, disagreements

runner = CliRunner()


@pytest.mark.parametrize("name", RUNS)
def test_replay_of_a_run_folder_reproduces_what_dressage_decided(
    name: str,
    run_folders: dict[str, Path],
    run_settings: dict[str, dict[str, Any]],
    truth: dict[str, list[dict[str, Any]]],
    tmp_path: Path,
) -> None:
    """At the run's own K and M, given only what the run left (run.json and truth.jsonl are
    in the folder but never read), every consumed or dropped trajectory gets Dressage's
    decision, stage and batch, and the attempts are grouped as Dressage grouped them."""
    run = run_settings[name]
    limit = "none" if run["max_preempts"] is None else str(run["max_preempts"])
    out = tmp_path / "trajectories.csv"
    result = runner.invoke(
        app,
        ["replay", str(run_folders[name]), "-k", str(run["keep_versions"]), "-m", limit,
         "--trajectories", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "wrote" in result.stderr
    rows = pl.read_csv(out, schema_overrides={"stage": pl.String})
    assert rows.columns == [
        "trajectory_id", "group_id", "decision", "stage", "batch", "version_gap", "span",
        "possible", "order_ambiguous",
    ]  # fmt: skip
    assert rows["possible"].null_count() == rows.height  # every file is there: all known
    assert disagreements(rows, truth[name], run["rollout_ids"]) == []
    summary = json.loads(
        runner.invoke(
            app, ["replay", str(run_folders[name]), "-k", str(run["keep_versions"]), "--json"]
        ).stdout
    )
    kept = sum(1 for attempt in truth[name] if attempt["outcome"] == "kept")
    assert summary["model"] == "dressage-loop" and summary["groups"]["kept"] == kept
    assert summary["checks"]["agree"] == summary["checks"]["total"] > 0
    # one shape and order of keys for every run (the stages' order once varied)
    assert list(summary["groups"]) == [
        "total", "kept", "dropped_stale", "rejected_span", "failed", "leftover",
        "discarded_surplus", "unknown", "dropped_stale_arrival", "dropped_stale_pending",
    ]  # fmt: skip
    assert summary["loop"] == "partial" and summary["groups"]["discarded_surplus"] == 0
    stale = [a for a in truth[name] if a["outcome"] == "dropped_stale"]
    assert summary["groups"]["dropped_stale_arrival"] + summary["groups"][
        "dropped_stale_pending"
    ] == len(stale)


@pytest.mark.parametrize("name", RUNS)
def test_verify_finds_the_runs_k_and_full_agreement(
    name: str, run_folders: dict[str, Path], run_settings: dict[str, dict[str, Any]]
) -> None:
    result = runner.invoke(app, ["verify", str(run_folders[name]), "--json"])
    assert result.exit_code == 0, result.output
    verdict = json.loads(result.stdout)
    assert verdict["keep_versions"] == run_settings[name]["keep_versions"]
    assert verdict["keep_versions_reproducing"] == [run_settings[name]["keep_versions"]]
    assert verdict["agree"] == verdict["total"] > 100
    assert "agrees with the run's own files" in result.stderr
    # the settings named: loop, K, M from the span rejections, the retry limit and how
    wanted_m = run_settings[name]["max_preempts"]
    assert verdict["loop"] == "partial"
    assert verdict["max_preempts"] == (None if wanted_m is None else [wanted_m])
    assert verdict["max_retries"] == run_settings[name]["max_retries"]
    assert verdict["max_retries_from"].startswith("from the run's files")
    m_words = "off/unknown" if wanted_m is None else str(wanted_m)
    assert f"loop=partial  keep_versions={verdict['keep_versions']}  max_preempts={m_words}" in (
        result.stderr
    )


def test_verify_keeps_the_best_k_when_one_check_disagrees(
    run_folders: dict[str, Path], run_settings: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    """One check that no K can meet (an edited metric) must not make verify give up the
    run's K: it shows the K that agrees with the most checks and exits 9."""
    folder = shutil.copytree(run_folders["k2-m1"], tmp_path / "run")
    metrics = folder / "dressage_metrics.jsonl"
    lines = metrics.read_text().splitlines()
    first = json.loads(lines[0])
    first["dressage/partial_rollout_returned_groups"] = 99
    metrics.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    result = runner.invoke(app, ["verify", str(folder), "--json"])
    assert result.exit_code == 9
    verdict = json.loads(result.stdout)
    assert verdict["keep_versions"] == run_settings["k2-m1"]["keep_versions"]
    assert verdict["total"] - verdict["agree"] == 1
    assert verdict["why_disagreements_may_remain"]


def test_verify_with_the_wrong_k_shows_where_the_replay_disagrees(
    run_folders: dict[str, Path],
) -> None:
    result = runner.invoke(app, ["verify", str(run_folders["k2-m1"]), "-k", "1"])
    assert result.exit_code == 9
    assert "disagree" in result.stderr
    # the per-step table names the checks that differ; the detail shows both sides
    assert "kept_groups" in result.stdout and "NO" in result.stdout


def test_verify_flags_a_run_whose_own_records_disagree_with_the_replay(
    run_folders: dict[str, Path], tmp_path: Path
) -> None:
    """A metrics file that does not match the run (edited, or from another run) is flagged
    at the step where it differs, not only in the total."""
    folder = tmp_path / "run"
    shutil.copytree(run_folders["k3-m2-n8"], folder)
    metrics = folder / "dressage_metrics.jsonl"
    lines = [json.loads(line) for line in metrics.read_text().splitlines()]
    lines[4]["staleness/dropped_groups"] = lines[4]["staleness/dropped_groups"] + 3
    metrics.write_text("".join(json.dumps(line) + "\n" for line in lines))
    result = runner.invoke(app, ["verify", str(folder), "-k", "3", "--json"])
    assert result.exit_code == 9
    wrong = [check for check in json.loads(result.stdout)["checks"] if not check["agrees"]]
    assert [(c["step"], c["check"]) for c in wrong] == [
        (lines[4]["rollout_id"], "staleness/dropped_groups")
    ]


# --------------------------------------------------------------------------- damaged runs


def _copy(run_folders: dict[str, Path], tmp_path: Path) -> Path:
    folder = tmp_path / "run"
    shutil.copytree(run_folders["k2-m1"], folder)
    return folder


def _edit_json(path: Path, change: Callable[[Any], Any]) -> None:
    path.write_text(json.dumps(change(json.loads(path.read_text()))))


def _first(folder: Path, pattern: str) -> Path:
    return sorted(folder.glob(pattern))[0]


def _segment(key: str, value: Any) -> Callable[[Path], None]:
    def change(session: dict[str, Any]) -> dict[str, Any]:
        if key == "timestamp":
            session["data"][0]["extra_info"]["timestamp"] = value
        else:
            session["data"][0][key] = value
        return session

    return lambda run: _edit_json(_first(run, "traj_payload/*/*/session.json"), change)


def _sample(key: str, value: Any) -> Callable[[Path], None]:
    def change(sample: dict[str, Any]) -> dict[str, Any]:
        (sample if key == "segment_index" else sample["metadata"])[key] = value
        return sample

    return lambda run: _edit_json(_first(run, "traj_payload/*/*/samples/0.json"), change)


def _metric(name: str, value: Any, *, without_log: bool = False) -> Callable[[Path], None]:
    def change(run: Path) -> None:
        path = run / "dressage_metrics.jsonl"
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        rows[0][name] = value
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
        if without_log:
            (run / "dressage_log.txt").unlink()

    return change


def _rollouts(text: str) -> Callable[[Path], None]:
    def change(run: Path) -> None:
        shutil.rmtree(run / "rollout_data")
        (run / "rollouts.jsonl").write_text(text)

    return change


def _log_line(message: str) -> Callable[[Path], None]:
    def change(run: Path) -> None:
        log = run / "dressage_log.txt"
        log.write_text(log.read_text() + f"2026-12-01 10:00:00,000 dressage INFO {message}\n")

    return change


DAMAGED: dict[str, tuple[Callable[[Path], object], str, str]] = {
    # name: (damage, the file the error names, what it says)
    "segment not an object": (
        lambda run: _edit_json(
            _first(run, "traj_payload/*/*/session.json"), lambda s: {**s, "data": [1, *s["data"]]}
        ),
        "session.json",
        "segment objects",
    ),
    "finish time not a time": (_segment("timestamp", "noon"), "session.json", "'noon'"),
    "full_versions a number": (_segment("full_versions", 7), "session.json", "full_versions"),
    "full_versions nested": (_segment("full_versions", [[1]]), "session.json", "label"),
    "sample a list": (
        lambda run: _first(run, "traj_payload/*/*/samples/0.json").write_text("[1]"),
        "samples/0.json",
        "sample object",
    ),
    "segment_index text": (_sample("segment_index", "x"), "samples/0.json", "segment_index"),
    "end version an object": (
        _sample("dressage_end_token_version", {}),
        "samples/0.json",
        "dressage_end_token_version",
    ),
    "error time not a time": (
        lambda run: _edit_json(
            _first(run, "traj_err/*/*/error.json"), lambda e: {**e, "timestamp": "noon"}
        ),
        "error.json",
        "'noon'",
    ),
    "metric text": (_metric("staleness/dropped_groups", "abc"), "metrics.jsonl:1", "'abc'"),
    "metric a list": (_metric("staleness/dropped_groups", [1]), "metrics.jsonl:1", "[1]"),
    "metric NaN, no log": (
        _metric("staleness/dropped_groups", float("nan"), without_log=True),
        "metrics.jsonl:1",
        "finite number",
    ),
    "target groups a fraction": (
        _metric("dressage/partial_rollout_target_groups", 0.5),
        "metrics.jsonl:1",
        "whole number",
    ),
    "target groups text": (
        _metric("dressage/partial_rollout_target_groups", "two"),
        "metrics.jsonl:1",
        "whole number",
    ),
    "rollouts sample a list": (_rollouts("[1]\n"), "rollouts.jsonl:1", "sample object"),
    "rollouts metadata text": (_rollouts('{"metadata": "x"}\n'), "rollouts.jsonl:1", "metadata"),
    "log group beyond 64 bits": (
        _log_line("dropping stale Dressage partial async rollout group 99999999999999999999"),
        "dressage_log.txt:",
        "64 bits",
    ),
}


@pytest.mark.parametrize("damage", DAMAGED)
def test_a_damaged_run_folder_is_a_one_line_error_naming_the_file(
    damage: str, run_folders: dict[str, Path], tmp_path: Path
) -> None:
    change, file_name, problem = DAMAGED[damage]
    run = _copy(run_folders, tmp_path)
    change(run)
    result = runner.invoke(app, ["verify", str(run)])
    assert result.exit_code == 5, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("Error: ") and "internal error" not in line
    assert file_name in line and problem in line


def test_times_read_as_the_simple_loop_reads_them(
    run_folders: dict[str, Path], tmp_path: Path
) -> None:
    """An ISO 8601 date is a finish time; an attempt key written as digits is a number."""
    run = _copy(run_folders, tmp_path)
    session = _first(run, "traj_payload/*/*/session.json")
    stamp = float(json.loads(session.read_text())["data"][0]["extra_info"]["timestamp"])
    _segment("timestamp", datetime.fromtimestamp(stamp - 60, UTC).isoformat())(run)
    _sample("dressage_start_rollout_id", "0")(run)
    result = runner.invoke(app, ["verify", str(run), "-k", "2"])
    assert result.exit_code == 0, result.stderr


@pytest.mark.parametrize(
    ("missing", "warned"),
    [
        ("traj_payload/*/*/session.json", "without session.json: read from their samples/"),
        ("traj_payload/*/*/samples", "without samples/"),
        ("traj_err/*/*/error.json", "of traj_err/ without error.json: left out"),
    ],
)
def test_a_trajectory_folder_missing_a_file_is_warned_about(
    missing: str, warned: str, run_folders: dict[str, Path], tmp_path: Path
) -> None:
    run = _copy(run_folders, tmp_path)
    target = _first(run, missing)
    shutil.rmtree(target) if target.is_dir() else target.unlink()
    session = target.parent
    result = runner.invoke(app, ["replay", str(run), "-k", "2", "--json"])
    assert result.exit_code == 0, result.stderr
    assert warned in result.stderr and session.name in result.stderr
    if "session.json" in missing:  # read from its samples: still replayed, still agreeing
        whole = runner.invoke(app, ["replay", str(run_folders["k2-m1"]), "-k", "2", "--json"])
        read, expected = json.loads(result.stdout), json.loads(whole.stdout)
        assert {**read, "notes": []} == expected


def test_repeated_metrics_lines_are_warned_about(
    run_folders: dict[str, Path], tmp_path: Path
) -> None:
    run = _copy(run_folders, tmp_path)
    metrics = run / "dressage_metrics.jsonl"
    metrics.write_text(metrics.read_text() * 2)
    result = runner.invoke(app, ["verify", str(run), "-k", "2"])
    assert result.exit_code == 0
    assert "on more than one line" in result.stderr


def test_without_a_log_the_last_call_note_says_so(
    run_folders: dict[str, Path], tmp_path: Path
) -> None:
    run = _copy(run_folders, tmp_path)
    (run / "dressage_log.txt").unlink()
    result = runner.invoke(app, ["replay", str(run), "-k", "2"])
    assert "no dressage_log.txt: took step" in result.stderr
    assert "final-call line" not in result.stderr


def test_an_unsafe_dump_does_not_suggest_trust_pickle(
    run_folders: dict[str, Path], tmp_path: Path
) -> None:
    run = _copy(run_folders, tmp_path)
    dump = _first(run, "rollout_data/*.pt")
    dump.write_bytes(pickle.dumps({"rollout_id": 0, "samples": [Fraction(1, 2)]}))
    result = runner.invoke(app, ["replay", str(run), "-k", "2"])
    assert result.exit_code == 5, result.stderr
    assert "--trust-pickle" not in result.stderr and "move rollout_data/" in result.stderr


# --------------------------------------------------------------------------- replay RUN options


@pytest.mark.parametrize(
    ("options", "named"),
    [
        (["--batch-groups", "3"], "--batch-groups"),
        (["--order-by", "x", "--bias"], "--order-by, --bias"),
        (["--field", "group=x"], "--field"),
        (["--on-bad-record", "skip", "--trust-pickle", "--eval"], "--on-bad-record"),
    ],
)
def test_replay_of_a_run_folder_refuses_options_it_would_ignore(
    options: list[str], named: str, run_folders: dict[str, Path]
) -> None:
    result = runner.invoke(app, ["replay", str(run_folders["k2-m1"]), "-k", "2", *options])
    assert result.exit_code == 2
    said = " ".join(re.sub("[│╭╮╰╯─]", " ", result.stderr).split())  # CliRunner: a box
    assert f"Invalid value for {named}" in said
    assert "not used when a run folder is replayed as Dressage's loop" in said


def test_replay_of_a_run_folder_writes_decisions_and_notes_m(
    run_folders: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "decisions.csv"
    result = runner.invoke(
        app, ["replay", str(run_folders["k2-m1"]), "-k", "2", "-m", "1", "--decisions", str(out)]
    )
    assert result.exit_code == 0, result.stderr
    assert "not applied" in result.stderr and f"wrote {out}" in result.stderr
    rows = pl.read_csv(out, schema_overrides={"stage": pl.String, "leftover": pl.String})
    assert tuple(rows.columns) == RUN_DECISION_COLUMNS
    assert rows["group_id"].n_unique() == rows.height > 0
    kept = rows.filter(pl.col("decision") == "kept")
    assert kept["version_gap"].null_count() == 0 and kept["batch"].null_count() == 0
