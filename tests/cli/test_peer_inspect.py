"""`inspect` and `convert` on other systems' logs: what each log can and cannot tell, in
plain words; --format; bad records as one-line errors with their exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.app import app
from tests.fixtures import peer_logs

runner = CliRunner()


@pytest.fixture
def peers(tmp_path: Path) -> dict[str, Path]:
    return peer_logs.write_all(tmp_path)


WORDS = {
    "prime-rl": ["one policy version at dispatch (start) and one at the end per episode",
                 "in-flight cancel's drops cannot be counted"],
    "areal": ["head_version is -1 whenever prompt tokens are counted",
              "the start version is unknown, only the end (tail) is known",
              "no trainer step: which step consumed a group cannot be told",
              "start version unknown for 2 of 3 groups in this log"],
    "verl": ["no weight versions: staleness cannot be computed; steps only",
             "the global step that trained each record"],
    "nemo-rl": ["no weight versions: staleness cannot be computed; steps only",
                "no group id: groups are consecutive records with the same prompt tokens"],
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(WORDS))
def test_inspect_says_what_the_log_can_and_cannot_tell(name: str, peers: dict[str, Path]) -> None:
    result = runner.invoke(app, ["inspect", str(peers[name]), "--json"])
    assert result.exit_code == 0, result.stderr
    found = json.loads(result.stdout)
    assert found["formats"] == [name]
    limits = " ".join(found["limits"])
    for words in WORDS[name]:
        assert words in limits
    table = runner.invoke(app, ["inspect", str(peers[name])], terminal_width=400)
    assert "What this log can and cannot tell:" in table.stdout
    assert WORDS[name][0] in table.stdout


def test_inspect_of_our_own_log_says_no_limits(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps({"group_index": 0, "metadata": {"parent_traj_id": "t",
                   "dressage_end_token_version": "1"}}) + "\n")  # fmt: skip
    result = runner.invoke(app, ["inspect", str(log), "--json"])
    assert json.loads(result.stdout)["limits"] == []
    assert "can and cannot tell" not in runner.invoke(app, ["inspect", str(log)]).stdout


def test_format_flag_reads_a_file_as_told(peers: dict[str, Path]) -> None:
    path = peers["verl"] / "2.jsonl"
    result = runner.invoke(app, ["inspect", str(path), "--format", "jsonl"])
    assert result.exit_code == 6  # our JSONL has a group id; verl's records have none
    assert "--field group=" in result.stderr
    result = runner.invoke(app, ["inspect", str(path), "--format", "VERL", "--json"])
    assert result.exit_code == 0 and json.loads(result.stdout)["formats"] == ["verl"]
    result = runner.invoke(app, ["inspect", str(path), "--format", "tinker"])
    assert result.exit_code == 2 and "expected one of jsonl" in result.stderr


def test_convert_writes_the_canonical_table_of_a_peer_log(
    peers: dict[str, Path], tmp_path: Path
) -> None:
    target = tmp_path / "prime.parquet"
    result = runner.invoke(app, ["convert", str(peers["prime-rl"]), "-o", str(target)])
    assert result.exit_code == 0, result.stderr
    again = runner.invoke(app, ["inspect", str(target), "--json"])
    assert json.loads(again.stdout)["versions"] == ["0", "1", "2"]


@pytest.mark.parametrize(
    ("name", "line", "code", "words"),
    [
        ("prime-rl", '{"id": "e", "task": {}, "traces": 3, "ok": true, "group": {"id": "g"}}',
         5, "traces must be a list (found 3)"),
        ("areal", '{"task_id": 1, "sample_idx": 0, "tail_version": 1, "head_version": null}',
         6, "the AReaL sample has no head_version"),
        ("verl", '{"input": "q", "output": "a", "score": 1, "step": "two"}',
         5, "step must be a whole number (found 'two')"),
        ("nemo-rl", '{"content": [], "rewards": [1], "token_ids": 7, "idx": 0}',
         5, "token_ids must be a list (found 7)"),
    ],
)  # fmt: skip
def test_a_bad_record_is_a_one_line_error(
    name: str, line: str, code: int, words: str, tmp_path: Path
) -> None:
    log = tmp_path / "bad.jsonl"
    log.write_text(line + "\n")
    result = runner.invoke(app, ["inspect", str(log), "--format", name], terminal_width=400)
    assert result.exit_code == code
    message = result.stderr.strip()
    assert "\n" not in message and "Traceback" not in message
    assert f"{log}:1: " in message and words in message


def test_inspect_admission_reports_each_rule(peers: dict[str, Path]) -> None:
    result = runner.invoke(app, [
        "inspect", str(peers["prime-rl"]), "--json", "--admission", "areal:eta=0",
        "--admission", "verl-async:staleness_threshold=0,required_samples=1",
        "--admission", "skyrl:max_staleness_steps=0,step_offset=0",
    ])  # fmt: skip
    assert result.exit_code == 0, result.stderr
    found = {bound["rule"]: bound for bound in json.loads(result.stdout)["admission"]}
    # prime-rl: batch step N trains version N - 1, so every group started on that version
    areal = found["areal:max_head_offpolicyness=0"]
    assert (areal["step_offset"], areal["checked"], areal["violations"]) == (1, 3, 0)
    # verl: one group per weight version allowed; g1 and g2 both started at version 0
    verl = found["verl-async:staleness_threshold=0,required_samples=1"]
    assert verl["violating_groups"] == ["g2"] and verl["max_over"] == 1
    # read as if step N trained version N, every group is one version behind
    skyrl = found["skyrl:max_staleness_steps=0,step_offset=0"]
    assert skyrl["violations"] == 3 and skyrl["mean_over"] == 1.0
    table = runner.invoke(app, ["inspect", str(peers["prime-rl"]), "--admission", "areal:eta=0"],
                          terminal_width=200)  # fmt: skip
    assert "Admission bounds: groups that would have been held back" in table.stdout


def test_inspect_admission_on_a_log_without_versions_says_none_was_checked(
    peers: dict[str, Path],
) -> None:
    result = runner.invoke(app, ["inspect", str(peers["verl"]), "--admission", "areal:eta=1"],
                           terminal_width=200)  # fmt: skip
    assert result.exit_code == 0
    assert "none could be checked" in result.stdout


@pytest.mark.parametrize(
    ("spec", "code", "words"),
    [
        ("areal:eta=x", 7, "max_head_offpolicyness must be a number (found 'x')"),
        ("tinker:k=1", 7, "unknown rule 'tinker'"),
        ("areal:eta=1.5", 7, "max_head_offpolicyness must be a whole number"),
        ("areal", 7, "give max_head_offpolicyness=N"),
        ("prime-rl:max_off_policy_steps=1", 7, "replayed as --policy prime-rl:KNOB=VALUE"),
        (
            "skyrl:max_staleness_steps=-2",
            7,
            "max_staleness_steps must not be negative (found -2); give 0 or more",
        ),
    ],
)
def test_inspect_admission_refuses_a_bad_rule(
    spec: str, code: int, words: str, peers: dict[str, Path]
) -> None:
    result = runner.invoke(app, ["inspect", str(peers["verl"]), "--admission", spec],
                           terminal_width=300)  # fmt: skip
    assert result.exit_code == code
    assert words in " ".join(result.stderr.replace("│", " ").split())
    # one line, naming the option and the spec, as simulate --admission and --policy say it
    error = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(error) == 1 and error[0].startswith(f"Error: --admission {spec}: ")
    simulated = runner.invoke(app, ["simulate", "--admission", spec, "-o", "unused.jsonl"])
    assert simulated.exit_code == 7 and simulated.stderr.strip() == error[0]


@pytest.mark.parametrize("name", ["verl", "nemo-rl"])
def test_replay_of_a_log_without_versions_says_so(name: str, peers: dict[str, Path]) -> None:
    result = runner.invoke(app, ["replay", str(peers[name]), "-k", "1"], terminal_width=300)
    assert result.exit_code == 0, result.stderr
    assert f"{name} log: no weight versions: staleness cannot be computed" in result.stderr
    # inspect lists it among what the log cannot tell instead of warning about it
    inspected = runner.invoke(app, ["inspect", str(peers[name])], terminal_width=300)
    assert "no weight versions" not in inspected.stderr
    assert "no weight versions" in inspected.stdout
