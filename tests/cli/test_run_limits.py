"""Run folders and train-side dumps are read within --limit, as logs are (issue 18): every
file ``read_run`` and ``read_train_dumps`` open is held to the limits given, and each
command that reads a run folder itself takes --limit and passes it on."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

import analysis
from analysis.table.limits import LimitError
from cli.app import app

runner = CliRunner()

LIMIT = 16 << 10
"""Above every JSON document and line the k2-m1 run holds (13,276 bytes at most)."""
PAST = 20_000
"""Bytes of padding that take one file past :data:`LIMIT`."""


@pytest.fixture
def run(run_folders: dict[str, Path], tmp_path: Path) -> Path:
    """A copy of a real run folder, to make one of its files too large."""
    return Path(shutil.copytree(run_folders["k2-m1"], tmp_path / "run"))


def _first(run: Path, pattern: str) -> Path:
    return sorted(run.glob(pattern))[0]


def _pad(path: Path) -> Path:
    """``path`` made past :data:`LIMIT` and still what it was: a log gets a blank line of
    spaces first (the log reader skips lines not in the logging format), a JSON document
    or a JSONL file's first line trailing spaces."""
    text = path.read_text()
    if path.suffix == ".txt":
        path.write_text(" " * PAST + "\n" + text)
    else:
        first, newline, rest = text.partition("\n")
        path.write_text(first + " " * PAST + newline + rest)
    return path


FILES = [
    "dressage_log.txt",
    "prompts.jsonl",
    "dressage_metrics.jsonl",
    "traj_payload/*/*/session.json",
    "traj_payload/*/*/samples/*.json",
    "traj_err/*/*/error.json",
]


@pytest.mark.parametrize("pattern", FILES)
def test_read_run_holds_every_file_to_the_limits(run: Path, pattern: str) -> None:
    limits = analysis.Limits(max_record_bytes=LIMIT)
    whole = analysis.read_run(run, limits=limits)
    padded = _pad(_first(run, pattern))
    assert analysis.read_run(run).trajectories.equals(whole.trajectories)  # defaults: read
    with pytest.raises(LimitError) as raised:
        analysis.read_run(run, limits=limits)
    message = str(raised.value)
    assert str(padded) in message and f"max_record_bytes={LIMIT * 2}" in message


def test_a_metrics_csv_is_held_to_the_line_limit(run: Path) -> None:
    (run / "dressage_metrics.jsonl").unlink()
    csv = run / "dressage_metrics.csv"
    csv.write_text("rollout_id,dressage/x\n0,1.0\n1," + "9" * PAST + "\n")
    assert analysis.read_run(run).metrics.height == 2
    with pytest.raises(LimitError, match=r"dressage_metrics\.csv:3: a line of more than"):
        analysis.read_run(run, limits=analysis.Limits(max_record_bytes=LIMIT))


def test_read_run_holds_its_dumps_to_the_pickle_limits(run: Path) -> None:
    assert analysis.read_run(run, limits=analysis.Limits(max_pickle_values=1 << 20))
    with pytest.raises(LimitError, match=r"rollout_data/\d+\.pt: .*max_pickle_values"):
        analysis.read_run(run, limits=analysis.Limits(max_pickle_values=100))


def _commands(run: Path, tmp_path: Path) -> dict[str, list[str]]:
    return {
        "replay": ["replay", str(run), "-k", "2"],
        "verify": ["verify", str(run), "-k", "2"],
        "inspect": ["inspect", str(run)],
        "report": ["report", str(run), "-o", str(tmp_path / "r.html"), "--force"],
        "simulate": ["simulate", "--like", str(run), "-o", str(tmp_path / "s.jsonl"), "--force"],
        "sweep": ["sweep", str(run), "-k", "1", "-m", "none"],
    }  # fmt: skip


@pytest.mark.parametrize("command", ["replay", "verify", "inspect", "report", "simulate", "sweep"])
def test_commands_reading_a_run_folder_take_the_limit(
    command: str, run: Path, tmp_path: Path
) -> None:
    """The log's first line past the limit: inspect and sweep read it for the run's batch
    size, the others with the whole run (load_logs never opens it)."""
    args = _commands(run, tmp_path)[command]
    within = runner.invoke(app, [*args, "--limit", f"max_record_bytes={LIMIT // 1024}K"])
    assert within.exit_code == 0, within.stderr
    padded = _pad(run / "dressage_log.txt")
    assert runner.invoke(app, args).exit_code == 0  # the default limit reads it
    refused = runner.invoke(app, [*args, "--limit", f"max_record_bytes={LIMIT // 1024}K"])
    assert refused.exit_code == 5, refused.stderr
    assert refused.stderr.startswith("Error: ") and refused.stderr.count("\n") == 1
    assert f"{padded}:1: a line of more than {LIMIT:,} bytes" in refused.stderr
    assert f"--limit max_record_bytes={LIMIT * 2}" in refused.stderr


def test_replay_of_a_run_folder_reads_a_session_within_the_limit(run: Path) -> None:
    padded = _pad(_first(run, "traj_payload/*/*/session.json"))
    refused = runner.invoke(app, ["replay", str(run), "--limit", "max_record_bytes=16K"])
    assert refused.exit_code == 5, refused.stderr
    assert str(padded) in refused.stderr and "--limit max_record_bytes=32768" in refused.stderr


def test_simulate_refuses_a_limit_without_a_run_to_read(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["simulate", "-o", str(tmp_path / "s.jsonl"), "--limit", "max_depth=5"]
    )
    assert result.exit_code == 2
    assert "--limit" in result.stderr and "--like" in result.stderr
    assert not (tmp_path / "s.jsonl").exists()


@pytest.fixture(scope="module")
def train_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import tarfile

    into = tmp_path_factory.mktemp("formats")
    with tarfile.open(Path(__file__).parents[1] / "fixtures" / "formats.tar.xz") as tar:
        tar.extractall(into, filter="data")
    return into / "formats" / "slime_native" / "train_data"


def test_read_train_dumps_takes_the_limits(train_data: Path) -> None:
    assert analysis.read_train_dumps([train_data]).rows.height > 0
    with pytest.raises(LimitError, match=r"train_data/0\.pt: .*max_pickle_values=100"):
        analysis.read_train_dumps([train_data], limits=analysis.Limits(max_pickle_values=100))


def test_compare_reads_train_dumps_within_the_limit(train_data: Path) -> None:
    log = str(Path(__file__).parents[2] / "sample_data" / "rollouts.jsonl")
    args = ["compare", log, log, "-b", "4", "--train-dumps", str(train_data)]
    assert runner.invoke(app, args).exit_code == 0
    refused = runner.invoke(app, [*args, "--limit", "max_pickle_values=100"])
    assert refused.exit_code == 5, refused.stderr
    assert refused.stderr.startswith("Error: ") and refused.stderr.count("\n") == 1
    assert "train_data/0.pt" in refused.stderr
    assert "--limit max_pickle_values=200" in refused.stderr


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (["--batch-groups", "3"], ["--batch-groups: the batch size is the run's own",
                                   "leave it out, or add --format artifacts",
                                   "where --batch-groups applies"]),
        (["--bias", "--eval"], ["--bias: who gets dropped is compared on the simple loop only",
                                "--eval: evaluation dumps (eval_<N>.pt) are no steps",
                                "leave them out, or add --format artifacts",
                                "where --bias applies"]),
        (["--trust-pickle"], ["--trust-pickle: a run folder's dumps are always read by the safe",
                              "reader; leave it out"]),
    ],
    ids=["batch", "bias-eval", "trust-pickle"],
)  # fmt: skip
def test_replay_of_a_run_folder_says_why_each_option_does_not_apply(
    run_folders: dict[str, Path], options: list[str], said: list[str]
) -> None:
    import re

    result = runner.invoke(app, ["replay", str(run_folders["k2-m1"]), "-k", "2", *options])
    assert result.exit_code == 2
    text = " ".join(re.sub("[│╭╮╰╯─]", " ", result.stderr).split())  # CliRunner: a box
    for words in said:
        assert words in text, text
    assert "--limit" not in text  # it applies: the run's files are read within it
    assert ("--format artifacts" in text) == any("--format artifacts" in w for w in said)


def test_a_run_folder_replayed_on_the_simple_loop_takes_those_options(
    run_folders: dict[str, Path],
) -> None:
    """What the refusal suggests works: --format artifacts with --bias and -b."""
    folder = str(run_folders["k2-m1"])
    result = runner.invoke(app, ["replay", folder, "--format", "artifacts", "-k", "2", "--bias",
                                 "-b", "2", "--json"])  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert "bias" in json.loads(result.stdout)
