"""``simulate --like RUN_FOLDER``: a Dressage run folder is simulated on its own loop from
its fitted model (docs/semantics.md §12.8), the comparison printed (or as JSON), the first
draw written; the options that only a run folder takes are usage errors elsewhere."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import analysis
from cli.app import app

runner = CliRunner()


@pytest.fixture(scope="module")
def run(run_folders: dict[str, Path]) -> Path:
    return run_folders["k2-m1"]


def test_prints_the_model_and_the_comparison_and_writes_the_first_draw(
    run: Path, tmp_path: Path
) -> None:
    out = tmp_path / "like.jsonl"
    result = runner.invoke(app, ["simulate", "--like", str(run), "-o", str(out), "--seed", "3"])
    assert result.exit_code == 0, result.stderr
    for words in ("Model of", "Dressage's partial loop", "time per token (s)", "groups in flight",
                  "The run at its own setting and the simulated runs (seeds 3-7)",
                  "the run (K=2, M=1)", "simulated (K=2, M=1, mean of 5)",
                  "trainer steps (full batches)", "stale drops", "leftovers",
                  "decided attempts modelled (%)"):  # fmt: skip
        assert words in result.stdout, words
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert result.stderr == f"wrote {len(records):,} records (the first draw, seed 3) to {out}\n"
    like = analysis.like_run(run, draws=1, seed=3)
    assert records == json.loads(json.dumps(list(like.records())))
    prepared = analysis.prepare(analysis.load_logs([out]))
    assert prepared.n_groups == len({r["group_index"] for r in records})


def test_refuses_to_overwrite_without_force(run: Path, tmp_path: Path) -> None:
    out = tmp_path / "like.jsonl"
    out.write_text("keep me\n")
    refused = runner.invoke(app, ["simulate", "--like", str(run), "-o", str(out)])
    assert refused.exit_code == 8
    assert "already exists" in refused.stderr and "--force" in refused.stderr
    assert out.read_text() == "keep me\n" and refused.stdout == ""
    forced = runner.invoke(app, ["simulate", "--like", str(run), "-o", str(out), "--force"])
    assert forced.exit_code == 0, forced.stderr
    assert out.read_text() != "keep me\n"


def test_json_carries_the_comparison_and_what_rests_on_modelled_events(
    run: Path, tmp_path: Path
) -> None:
    out = tmp_path / "like.parquet"
    result = runner.invoke(
        app,
        ["simulate", "--like", str(run), "-o", str(out), "--json", "-k", "1", "-m", "0",
         "--draws", "3", "--seed", "2"],
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    shown = json.loads(result.stdout)
    assert shown["model"] == "dressage-loop-model" and shown["loop"] == "partial"
    assert shown["own_setting"] == {"keep_versions": 2, "max_preempts": 1}
    assert shown["simulated_setting"] == {"keep_versions": 1, "max_preempts": 0}
    assert shown["draws"] == 3 and shown["seeds"] == [2, 3, 4]
    figures = shown["figures"]
    assert figures["steps"]["run"] == figures["steps"]["simulated"] == 12
    assert 0.0 < figures["modelled_pct"]["simulated"] < 100.0
    assert figures["modelled_pct"]["run"] is None
    assert figures["rejected_span"]["simulated"] > figures["rejected_span"]["run"]
    assert out.is_file() and "records (the first draw, seed 2)" in result.stderr


def test_given_pipeline_values_replace_the_fit_and_the_rest_are_refused(
    run: Path, tmp_path: Path
) -> None:
    out = str(tmp_path / "like.jsonl")
    given = runner.invoke(
        app, ["simulate", "--like", str(run), "-o", out, "--json", "--token-time", "0.002"]
    )
    assert given.exit_code == 0, given.stderr
    shown = json.loads(given.stdout)
    assert shown["fitted"]["token_time"] == 0.002
    assert any("token_time=0.002" in note for note in shown["notes"])
    other = str(tmp_path / "other.jsonl")
    refused = runner.invoke(app, ["simulate", "--like", str(run), "-o", other, "--groups", "8"])
    assert refused.exit_code == 2
    assert "--groups" in refused.stderr and "does not apply" in refused.stderr
    assert not Path(other).exists()


@pytest.mark.parametrize(
    ("option", "flag"),
    [(["-k", "1"], "--keep-versions"), (["-m", "0"], "--max-preempts"),
     (["--draws", "2"], "--draws")],
)  # fmt: skip
def test_run_folder_options_with_a_log_or_without_like_are_usage_errors(
    small_logs: dict[str, Path], tmp_path: Path, option: list[str], flag: str
) -> None:
    log = small_logs["jsonl"]
    out = str(tmp_path / "s.jsonl")
    with_log = runner.invoke(app, ["simulate", "--like", str(log), "-o", out, *option])
    assert with_log.exit_code == 2
    assert flag in with_log.stderr and "only with --like RUN_FOLDER" in with_log.stderr
    assert "is not a run folder" in with_log.stderr
    alone = runner.invoke(app, ["simulate", "-o", out, *option])
    assert alone.exit_code == 2 and flag in alone.stderr
    assert not Path(out).exists()


def test_bad_draws_and_json_beside_standard_output(run: Path, tmp_path: Path) -> None:
    out = str(tmp_path / "s.jsonl")
    zero = runner.invoke(app, ["simulate", "--like", str(run), "-o", out, "--draws", "0"])
    assert zero.exit_code == 2 and "from 1 to 1,000" in zero.stderr  # a usage error
    both = runner.invoke(app, ["simulate", "--like", str(run), "-o", "-", "--json"])
    assert both.exit_code == 2 and "standard output" in both.stderr
    piped = runner.invoke(app, ["simulate", "--like", str(run), "-o", "-", "--draws", "1"])
    assert piped.exit_code == 0, piped.stderr
    records = [json.loads(line) for line in piped.stdout.splitlines()]
    assert records and all("simulated_outcome" in r["metadata"] for r in records)
    assert "The run at its own setting" in piped.stderr  # the table goes to stderr then
