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
    short = runner.invoke(app, ["sweep", folder, "-k", "2", "-m", "1"])
    assert short.exit_code == 0, short.stderr
    said = _warnings(short.stderr)
    assert len(said) == 1 and len(said[0].replace(folder, "")) < 120, said
    assert "--verbose" in said[0] and "§12" not in short.stderr
    verbose = runner.invoke(app, ["sweep", folder, "-k", "2", "-m", "1", "--verbose"])
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
