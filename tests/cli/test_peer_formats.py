"""Other systems' logs beyond inspect: --format on every command that reads logs, and a
format forced on a file of another kind said to be probably the wrong one."""

from __future__ import annotations

import html
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.app import app
from tests.fixtures import peer_logs

runner = CliRunner()
SAMPLE = Path(__file__).parents[2] / "sample_data" / "rollouts.jsonl"


@pytest.fixture
def peers(tmp_path: Path) -> dict[str, Path]:
    return peer_logs.write_all(tmp_path / "logs")


@pytest.mark.parametrize("command", ["replay", "sweep", "plot", "report", "compare"])
def test_every_command_that_reads_logs_takes_format(
    command: str, peers: dict[str, Path], tmp_path: Path
) -> None:
    log = str(peers["verl"])
    args = {
        "replay": ["replay", log, "-b", "1"],
        "sweep": ["sweep", log, "-b", "1"],
        "plot": ["plot", "sweep", log, "-b", "1", "-o", str(tmp_path / "s.png"), "--force"],
        "report": ["report", log, "-b", "1", "-o", str(tmp_path / "r.html"), "--force"],
        "compare": ["compare", log, log, "-b", "1"],
    }[command]
    result = runner.invoke(app, [*args, "--format", "verl"], terminal_width=300)
    assert result.exit_code == 0, result.stderr
    # told the wrong format, the command says so instead of reading the log
    wrong = runner.invoke(app, [*args, "--format", "prime-rl"], terminal_width=300)
    assert wrong.exit_code != 0 and "probably not a prime-rl log" in wrong.stderr


@pytest.mark.parametrize(
    ("told", "code"), [("verl", 6), ("prime-rl", 5), ("areal", 6), ("nemo-rl", 6)]
)
def test_a_forced_wrong_format_names_the_one_found(told: str, code: int) -> None:
    result = runner.invoke(app, ["inspect", str(SAMPLE), "--format", told], terminal_width=400)
    assert result.exit_code == code
    message = result.stderr.strip()
    assert "\n" not in message
    assert f"probably not a{'n' if told == 'areal' else ''} " in message
    assert "its first record reads as a JSONL log of Dressage or slime records" in message
    assert "leave out --format" in message and "--on-bad-record skip" not in message


def test_a_forced_format_that_fits_says_nothing_of_it(peers: dict[str, Path]) -> None:
    result = runner.invoke(app, ["inspect", str(peers["verl"]), "--format", "verl"])
    assert result.exit_code == 0, result.stderr
    skip = runner.invoke(
        app, ["inspect", str(SAMPLE), "--format", "verl", "--on-bad-record", "skip"]
    )  # skipping is what was asked: no hint, every record skipped
    assert "probably not" not in skip.stderr


@pytest.mark.parametrize("suffix", [".parquet", ".arrow", ""])
def test_a_converted_peer_log_keeps_its_source_format(
    suffix: str, peers: dict[str, Path], tmp_path: Path
) -> None:
    output = tmp_path / f"pv{suffix}"
    extra = ["--workers", "1"] if not suffix else []
    converted = runner.invoke(app, ["convert", str(peers["verl"]), "-o", str(output), *extra])
    assert converted.exit_code == 0, converted.stderr
    found = json.loads(runner.invoke(app, ["inspect", str(output), "--json"]).stdout)
    assert found["converted_from"] == ["verl"]
    assert any("no weight versions" in line for line in found["limits"])
    table = runner.invoke(app, ["inspect", str(output)], terminal_width=300)
    assert "converted from verl" in table.stdout
    assert "What this log can and cannot tell:" in table.stdout
    assert "no weight versions" not in table.stderr  # listed, not warned about
    replayed = runner.invoke(app, ["replay", str(output), "-b", "1"], terminal_width=300)
    assert "verl log: no weight versions" in replayed.stderr


def test_a_log_converted_from_our_own_says_so_without_limits(tmp_path: Path) -> None:
    output = tmp_path / "ours.parquet"
    assert runner.invoke(app, ["convert", str(SAMPLE), "-o", str(output)]).exit_code == 0
    found = json.loads(runner.invoke(app, ["inspect", str(output), "--json"]).stdout)
    assert found["converted_from"] == ["jsonl"] and found["limits"] == []


def test_convert_warns_once_in_its_own_words(tmp_path: Path) -> None:
    logs = [peer_logs.write_all(tmp_path / f"copy{i}")["verl"] for i in range(3)]
    for output, extra in ((tmp_path / "one.parquet", []), (tmp_path / "parts", ["--workers", "2"])):
        result = runner.invoke(app, ["convert", *map(str, logs), "-o", str(output), *extra])
        assert result.exit_code == 0, result.stderr
        warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
        assert len(warnings) == 1, result.stderr
        assert "the table written has none either" in warnings[0]
        assert "a replay keeps every group" not in warnings[0]


def test_report_of_a_peer_log_says_what_it_can_and_cannot_tell(
    peers: dict[str, Path], tmp_path: Path
) -> None:
    output = tmp_path / "verl.html"
    result = runner.invoke(app, ["report", str(peers["verl"]), "-b", "1", "-o", str(output)])
    assert result.exit_code == 0, result.stderr
    page = output.read_text()
    assert "What this log can and cannot tell" in page
    limits = json.loads(runner.invoke(app, ["inspect", str(peers["verl"]), "--json"]).stdout)
    for line in limits["limits"]:  # every line inspect lists, escaped as HTML escapes it
        assert html.escape(line) in page


def test_report_of_a_run_folder_shows_its_batch_size(
    run_folders: dict[str, Path], tmp_path: Path
) -> None:
    output = tmp_path / "run.html"
    result = runner.invoke(app, ["report", str(run_folders["k2-m1"]), "-o", str(output)])
    assert result.exit_code == 0, result.stderr
    page = output.read_text()
    assert "batch groups (the run&#x27;s)" in page and ">n/a<" not in page
    assert "What this log can and cannot tell" not in page
