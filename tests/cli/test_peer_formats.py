"""Other systems' logs beyond inspect: --format on every command that reads logs, and a
format forced on a file of another kind said to be probably the wrong one."""

from __future__ import annotations

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
        "plot": ["plot", "sweep", log, "-b", "1", "-o", str(tmp_path / "s.png")],
        "report": ["report", log, "-b", "1", "-o", str(tmp_path / "r.html")],
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
