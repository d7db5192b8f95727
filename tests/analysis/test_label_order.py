"""The order in which Dressage's tracker meets two new version labels of one attempt whose
sample order the files do not tell (docs/semantics.md §12.4): chosen by the run's own
records, order-ambiguous where they cannot tell."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import polars as pl

from analysis.engine.run_loop.replay import replay_run
from analysis.formats.dressage.log import EVENT_SCHEMA
from analysis.formats.dressage.run import RunLog
from tests.analysis.test_loop_differential import attempt, run_log, seconds
from tests.analysis.test_ticks import with_dumps

TWO_LABELS = {
    "id": "i0/s0/r0",
    "instance": "i0",
    "retry_count": 0,
    "completed_at": seconds(0),
    "fail_kind": None,
    "async_group_id": None,
    "draw": 0,
    "trajectories": [
        {"position": 0, "completed": True, "end_version": "1"},
        {"position": 1, "completed": True, "end_version": "2"},
    ],
}
SPEC: dict[str, Any] = {
    # i0 brings "1" and "2" at once (call 0 keeps it and i4); in call 1, i1 (on "2") is
    # pending when i2 brings "3": at K = 2 it is stale only if the tracker met "2" first
    "attempts": [
        TWO_LABELS,
        attempt(4, 50, draw=1, label="1"),
        attempt(1, 100, draw=2, label="2"),
        attempt(2, 200, draw=3, label="3"),
        attempt(3, 300, draw=4, label="3"),
    ],
    "calls": [(0, seconds(-50)), (1, seconds(150))],
    "batch_size": 2,
    "keep_versions": 2,
}


def unordered(run: RunLog) -> RunLog:
    """The run with i0's sample order unknown (no dump holds it)."""
    known = pl.col("attempt_id") != "i0/s0/r0"
    return replace(run, attempts=run.attempts.with_columns(order_known=known))


def dropped_in_one(run: RunLog) -> RunLog:
    """The run with the log's line of one stale drop in call 1."""
    events = pl.DataFrame(
        [(1, seconds(200), "dropped_stale", 2)], schema=EVENT_SCHEMA, orient="row"
    )
    return replace(run, log_events=events)


def decisions(run: RunLog) -> tuple[dict[str, str], set[str]]:
    replayed = replay_run(run, keep_versions=2)
    rows = {r["group_id"]: r["decision"] for r in replayed.attempts.iter_rows(named=True)}
    return rows, set(replayed.attempts.filter(pl.col("order_ambiguous"))["group_id"])


def test_the_dumps_choose_the_order_of_two_new_labels() -> None:
    """The dump of call 1 holding i2 and i3 says i1 was dropped: the tracker met "2"
    first; one holding i1 and i2 says it met "1" first."""
    spec = dict(SPEC, calls=[(0, seconds(-50)), (1, seconds(150)), (2, seconds(400))])
    dumped = dropped_in_one(unordered(with_dumps(spec, {1: ["i2/s0/r0", "i3/s0/r0"]})))
    rows, ambiguous = decisions(dumped)
    assert rows["i1/s0/r0"] == "dropped_stale"
    assert "i1/s0/r0" not in ambiguous
    dumped = unordered(with_dumps(spec, {1: ["i1/s0/r0", "i2/s0/r0"]}))
    rows, ambiguous = decisions(dumped)
    assert rows["i1/s0/r0"] == "kept"
    assert "i1/s0/r0" not in ambiguous


def test_an_order_the_files_cannot_tell_is_order_ambiguous() -> None:
    """Without dumps either order reproduces the run (one drop in call 1, as the log
    says): whether i1 or i5 was the one dropped depends on it."""
    spec = dict(
        SPEC,
        attempts=[
            TWO_LABELS,
            attempt(4, 50, draw=1, label="1"),
            attempt(6, 70, draw=2, label="1"),
            attempt(1, 100, draw=3, label="2"),
            attempt(5, 120, draw=4, label="1"),
            attempt(2, 200, draw=5, label="3"),
            attempt(3, 300, draw=6, label="3"),
        ],
        calls=[(0, seconds(-50)), (1, seconds(150)), (2, seconds(400))],
        batch_size=3,
    )
    rows, ambiguous = decisions(dropped_in_one(unordered(run_log(spec))))
    assert {rows["i1/s0/r0"], rows["i5/s0/r0"]} == {"kept", "dropped_stale"}
    assert {"i1/s0/r0", "i5/s0/r0"} <= ambiguous
    _, ambiguous = decisions(dropped_in_one(run_log(spec)))  # the sample order known
    assert not ambiguous & {"i1/s0/r0", "i5/s0/r0"}
