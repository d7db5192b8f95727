"""One vocabulary for outcomes (the summary's words in the --bias table too), and the
notes about a log printed by sweep as by replay."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from cli.app import app

runner = CliRunner()
SAMPLE = Path(__file__).parents[2] / "sample_data" / "rollouts.jsonl"


def test_bias_table_says_the_outcomes_as_the_summary_does() -> None:
    result = runner.invoke(
        app, ["replay", str(SAMPLE), "-k", "2", "-m", "1", "--bias"], terminal_width=200
    )
    assert result.exit_code == 0, result.stderr
    bias = result.stdout.split("Who gets dropped", 1)[1]
    assert "span rejected" in bias and "stale, any stage" in bias
    assert "dropped_stale" not in bias and "rejected_span" not in bias
    # JSON keeps the decisions' names
    found = json.loads(runner.invoke(app, ["replay", str(SAMPLE), "-k", "2", "-m", "1",
                                           "--bias", "--json"]).stdout)  # fmt: skip
    assert [row["outcome"] for row in found["bias"]["by_outcome"]][:3] == [
        "kept", "dropped_stale", "rejected_span"
    ]  # fmt: skip


def _late_log(path: Path) -> Path:
    """Version 5 first observed after 6: a note replay prints."""
    records = [
        {"group_index": i, "response_length": 4, "metadata": {"parent_traj_id": f"t{i}",
         "dressage_end_token_version": version, "dressage_return_rollout_id": i // 2}}
        for i, version in enumerate(["6", "6", "5", "7", "7", "7"])
    ]  # fmt: skip
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path


def test_sweep_prints_the_notes_replay_prints_about_the_log(tmp_path: Path) -> None:
    log = str(_late_log(tmp_path / "late.jsonl"))
    replayed = runner.invoke(app, ["replay", log, "-k", "2"], terminal_width=400)
    swept = runner.invoke(app, ["sweep", log, "-k", "0..2", "-m", "none"], terminal_width=400)
    assert swept.exit_code == 0, swept.stderr
    note = "note: version 5 was first observed after 6, so it counts as the newer"
    assert note in replayed.stdout and note in swept.stdout
    late = [line for line in swept.stdout.splitlines() if line.startswith(note)]
    assert len(late) == 2  # K=1 (a livelock) and K=2 say different things; K=0 nothing
    assert not any("rejected group" in line for line in swept.stdout.splitlines())
