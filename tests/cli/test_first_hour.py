"""What a new user met in their first hour (issue 33): a run folder's warning in one short
line with its detail behind --verbose and in --json; errors in the caller's terms."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import analysis
from cli.app import app

runner = CliRunner()


def _warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("warning:")]


def test_a_run_folder_read_as_a_log_is_said_in_one_short_line(
    run_folders: dict[str, Path],
) -> None:
    folder = str(run_folders["k2-m1"])
    # (replay --policy reads the run folder as one log: settings of K run on its own loop)
    short = runner.invoke(app, ["replay", folder, "--policy", "dressage:k=2,m=1"])
    assert short.exit_code == 0, short.stderr
    said = _warnings(short.stderr)
    assert len(said) == 1 and len(said[0].replace(folder, "")) < 120, said
    assert "--verbose" in said[0] and "§12" not in short.stderr
    verbose = runner.invoke(app, ["replay", folder, "--policy", "dressage:k=2,m=1", "--verbose"])
    assert "§12" in verbose.stderr and "--verbose" not in verbose.stderr
    found = json.loads(runner.invoke(app, ["inspect", folder, "--json"]).stdout)
    assert [len(warning.replace(folder, "")) < 120 for warning in found["warnings"]] == [True]
    (detail,) = found["warning_details"].values()
    assert "§12" in detail and "traj_err/" in detail


def test_the_report_does_not_copy_the_long_warning(
    run_folders: dict[str, Path], tmp_path: Path
) -> None:
    output = tmp_path / "run.html"
    result = runner.invoke(app, ["report", str(run_folders["k2-m1"]), "-o", str(output)])
    assert result.exit_code == 0, result.stderr
    assert "in completion order when its records carry it" not in output.read_text()


@pytest.mark.parametrize("value", [-1, "1"])
def test_a_setting_refused_in_python_says_none_as_python_does(value: object) -> None:
    with pytest.raises(analysis.ConfigError) as raised:
        analysis.ReplayConfig(keep_versions=1, max_preempts=value)  # type: ignore[arg-type]
    assert "max_preempts=None" in str(raised.value) and "=none" not in str(raised.value)
    # the command line says its own flag and word for the same setting
    from cli.flags import flagged

    assert "--max-preempts none" in flagged(raised.value.message)


def test_tables_named_dash_go_to_standard_output_as_csv(
    small_logs: dict[str, Path], run_folders: dict[str, Path], tmp_path: Path
) -> None:
    import polars as pl

    log = str(small_logs["jsonl"])
    written = tmp_path / "decisions.csv"
    file = runner.invoke(app, ["replay", log, "-k", "1", "-m", "1", "--decisions", str(written)])
    out = runner.invoke(app, ["replay", log, "-k", "1", "-m", "1", "--decisions", "-"])
    assert out.exit_code == 0, out.stderr
    assert file.exit_code == 0 and not (Path.cwd() / "-").exists()
    # the same table as the file, and nothing else on stdout (no summary)
    assert pl.read_csv(out.stdout.encode()).equals(pl.read_csv(written))
    for args in (
        ["replay", log, "-k", "1", "--trajectories", "-"],
        ["replay", str(run_folders["k2-m1"]), "-k", "2", "--decisions", "-"],
        ["sweep", log, "-k", "0..2", "-m", "1", "-o", "-"],
    ):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, (args, result.stderr)
        frame = pl.read_csv(result.stdout.encode())
        assert frame.height > 0 and "wrote" not in result.stderr
    swept = pl.read_csv(
        runner.invoke(app, ["sweep", log, "-k", "0..2", "-m", "1", "-o", "-"]).stdout.encode()
    )
    assert swept["keep_versions"].to_list() == [0, 1, 2]


def test_two_outputs_to_standard_output_are_refused(small_logs: dict[str, Path]) -> None:
    log = str(small_logs["jsonl"])
    for args in (
        ["replay", log, "--decisions", "-", "--trajectories", "-"],
        ["replay", log, "--decisions", "-", "--json"],
        ["sweep", log, "-o", "-", "--json"],
    ):
        result = runner.invoke(app, args)
        assert result.exit_code == 2 and "standard output" in result.stderr, args


def test_simulate_writes_jsonl_to_standard_output(tmp_path: Path) -> None:
    out = runner.invoke(app, ["simulate", "-o", "-", "--groups", "5", "--seed", "3"])
    assert out.exit_code == 0, out.stderr
    file = tmp_path / "log.jsonl"
    runner.invoke(app, ["simulate", "-o", str(file), "--groups", "5", "--seed", "3"])
    assert out.stdout.encode() == file.read_bytes()
    assert "to standard output" in out.stderr
    refused = runner.invoke(app, ["simulate", "-o", "-", "--format", "parquet"])
    assert refused.exit_code == 2 and "JSONL only" in refused.stderr


@pytest.mark.parametrize(
    ("args", "output"),
    [
        (["simulate", "--groups", "4", "-q", "-o"], "log.parquet"),
        (["simulate", "--groups", "4", "-q", "--format", "artifacts", "-o"], "run"),
        (["convert", "SAMPLE", "-o"], "parts"),
        (["sweep", "SAMPLE", "-k", "1", "-m", "1", "-o"], "rows.csv"),
        (["replay", "SAMPLE", "-k", "1", "--decisions"], "decisions.csv"),
        (["plot", "heatmap", "SAMPLE", "-k", "1", "-m", "1", "-o"], "figure.png"),
        (["report", "SAMPLE", "-k", "1", "-m", "1", "-o"], "report.html"),
    ],
)
def test_an_output_that_exists_is_refused_unless_forced(
    args: list[str], output: str, small_logs: dict[str, Path], tmp_path: Path
) -> None:
    """One rule for files and folders (simulate -o x.parquet overwrote a file silently
    while a folder that is not empty was refused)."""
    target = tmp_path / output
    args = [str(small_logs["jsonl"]) if arg == "SAMPLE" else arg for arg in args]
    first = runner.invoke(app, [*args, str(target)])
    assert first.exit_code == 0, first.stderr
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    stamp = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.is_file()}
    again = runner.invoke(app, [*args, str(target)])
    assert again.exit_code == 8, again.stderr
    assert "already exists" in again.stderr and "--force" in again.stderr
    assert stamp == {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.is_file()}
    forced = runner.invoke(app, [*args, str(target), "--force"])
    assert forced.exit_code == 0, forced.stderr
    # replaced, and nothing left beside it (no folder set aside, no temporary)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_a_forced_folder_that_fails_to_be_written_keeps_the_old_one(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    (folder / "traj_payload").mkdir(parents=True)
    (folder / "keep.txt").write_text("mine")
    with pytest.raises(RuntimeError), analysis.set_aside(folder):
        assert not folder.exists()
        raise RuntimeError("the write failed")
    assert (folder / "keep.txt").read_text() == "mine"
    assert [p.name for p in tmp_path.iterdir()] == ["run"]


def test_readme_examples_write_nothing_into_the_clone() -> None:
    """A new user following the README was left decisions.csv, run.parquet and others in
    their clone: every file an example writes, in the README or a page of the
    documentation site, goes under /tmp (or to stdout)."""
    import itertools
    import shlex

    root = Path(__file__).resolve().parents[2]
    documents = [root / "README.md", *sorted((root / "docs" / "pages").rglob("*.md"))]
    lines = [line for document in documents for line in document.read_text().splitlines()]
    commands = []
    for number, line in enumerate(lines):
        if line.startswith("$ dressage-replay"):
            text = line[2:]
            while text.endswith("\\"):
                number += 1
                text = text[:-1] + " " + lines[number].strip()
            commands.append(text.split("|")[0])
    assert len(commands) > 10
    writes = ("-o", "--output", "--decisions", "--trajectories", "--plot")
    for command in commands:
        words = shlex.split(command)
        for flag, value in itertools.pairwise(words):
            if flag in writes:
                assert value == "-" or value.startswith("/tmp/"), command


def test_readme_set_up_times_are_in_cpu_time_with_a_word_on_busy_hosts() -> None:
    """ "About three minutes" took 17 on a busy two-core host (3 minutes of CPU): the
    README's first screen says CPU time, and what a busy host does to the wall time."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    first = readme.split("\n## ", 1)[0]
    assert "make test" in first and "minutes of CPU time" in first
    assert "busy host" in first and "wall time" in first
