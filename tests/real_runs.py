"""Three real Dressage runs (tests/fixtures/real_runs/*.tar.xz) and what Dressage decided.

Each archive holds a run folder as Dressage's own rollout loop left it (its artifact
trees, dumps, log and metrics), plus ``run.json`` (the settings) and ``truth.jsonl``
(Dressage's decision for every group attempt, recorded by observers around its
functions). A replay reads neither of those two: tests only compare with them.
"""

from __future__ import annotations

import tarfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import polars as pl

FIXTURES = Path(__file__).parent / "fixtures" / "real_runs"
RUNS = ("k2-m1", "k1-mnone", "k3-m2-n8")
FULLY_FIXTURES = FIXTURES / "fully_async"
FULLY_RUNS = ("fa-k2-m1-n4-s33", "fa-k3-mnone-n4-s36", "fa-k2-m1-n4-s37-p16")
"""Runs of Dressage's fully-async loop (``fully_async_rollout.py``); truth has
``discarded_surplus``."""
TIE_RUNS = ("pa-k2-m1-s201-comp",)
"""Runs with compressed timing (30 steps, many groups finishing within one 10 ms worker
tick of each other), for the order of near-simultaneous completions (docs/semantics.md
§12.2); not in :data:`RUNS`."""
CONSUMED = ("kept", "dropped_stale", "rejected_span", "failed")
FULLY_DECIDED = (*CONSUMED, "discarded_surplus", "leftover")


def extract_runs(archives: Path, into: Path) -> dict[str, Path]:
    """Unpack every ``<run>.tar.xz`` of ``archives`` below ``into``; the run folders by name."""
    folders = {}
    for archive in sorted(archives.glob("*.tar.xz")):
        with tarfile.open(archive) as tar:
            tar.extractall(into, filter="data")
        folders[archive.name.removesuffix(".tar.xz")] = into / archive.name.removesuffix(".tar.xz")
    return folders


def by_trajectory(frame: pl.DataFrame) -> dict[str, dict[str, Any]]:
    return {row["trajectory_id"]: row for row in frame.iter_rows(named=True)}


def disagreements(
    trajectories: pl.DataFrame,
    attempts: list[dict[str, Any]],
    rollout_ids: list[int],
    outcomes: tuple[str, ...] = CONSUMED,
) -> list[str]:
    """Every way the replay differs from Dressage on the attempts whose outcome is one of
    ``outcomes`` (by default those it consumed or dropped)."""
    rows = by_trajectory(trajectories)
    members: dict[str, set[str]] = defaultdict(set)
    for member in rows.values():
        members[member["group_id"]].add(member["trajectory_id"])
    problems = []
    for attempt in attempts:
        if attempt["outcome"] not in outcomes:
            continue
        wanted = (attempt["outcome"], attempt["stage"])
        batch = rollout_ids.index(attempt["rollout_id"]) if attempt["outcome"] == "kept" else None
        for session in attempt["session_ids"]:
            row = rows.get(session)
            if row is None:
                problems.append(f"{session}: not replayed")
                continue
            got = (row["decision"], row["stage"])
            if got != wanted or row["batch"] != batch:
                problems.append(
                    f"group {attempt['group_id']}: {got}/{row['batch']} != {wanted}/{batch}"
                )
            if members[row["group_id"]] != set(attempt["session_ids"]):
                problems.append(f"group {attempt['group_id']}: grouped as {row['group_id']}")
    return problems
