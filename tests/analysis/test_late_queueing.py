"""The less likely orders of the worker's queue (docs/semantics.md §12.2): a held-up tick
queueing first a completion whose submission order the files do not tell, two polls up to
``stall_s`` apart joined, a completion queued late (past a later one, or past a call's
start); each searched only with the run's own records as constraints."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import polars as pl

from analysis.engine.run_loop.collector import Collector, PollTiming, late_targets
from analysis.engine.run_loop.readings import Pass, reproduced_by_ties
from analysis.engine.run_loop.replay import replay_run
from analysis.engine.run_loop.ties import TieSearch, _reorderings
from analysis.formats.dressage.log import EVENT_SCHEMA
from tests.analysis.test_loop_differential import attempt, run_log, seconds
from tests.analysis.test_ticks import make_attempt, with_dumps

TIMING = PollTiming()


def two_calls(first: dict[str, Any], second: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """Two one-group calls starting before both completions (K = 0: no staleness)."""
    return {
        "attempts": [first, second, *extra.get("more", [])],
        "calls": [(2, seconds(-5)), (3, seconds(600))],
        "batch_size": 1,
        "keep_versions": 0,
    }


def kept_in(replayed: Any, group: str) -> int | None:
    rows = replayed.attempts.filter(pl.col("group_id") == group)
    return rows["decided_in"][0] if rows["decision"][0] == "kept" else None


def test_a_held_up_tick_may_queue_first_a_completion_of_unknown_submission() -> None:
    """i1 is recorded 40 ms after i0 and the files do not tell which was submitted first
    (no draw, no async id): in the wider search a held-up tick may have queued i1 first
    (a swap, no late queueing); known submitted after i0, it may not. The replay
    reproduces the dumps that say so (step 2 kept i1)."""
    earlier, unknown = make_attempt(0, 1.0), make_attempt(1, 1.04, known=False)
    known_later = make_attempt(2, 1.04)

    def swapped(later: Any, bounds: TieSearch) -> bool:
        collector = Collector([earlier, later], keep_versions=0, max_retries=2, timing=TIMING)
        found = _reorderings(collector, 2, TIMING, bounds, start=0.0)
        return any(c.order[0] is later and not c.late for _, c in found)

    assert swapped(unknown, TieSearch(wide=True))
    assert not swapped(unknown, TieSearch())
    assert not swapped(known_later, TieSearch(wide=True))
    spec = two_calls(attempt(0, 20, draw=5), attempt(1, 60, draw=None))  # type: ignore[arg-type]
    replayed = replay_run(with_dumps(spec, {2: ["i1/s0/r0"], 3: ["i0/s0/r0"]}), keep_versions=0)
    assert replayed.consistent
    assert (kept_in(replayed, "i1/s0/r0"), kept_in(replayed, "i0/s0/r0")) == (2, 3)


def test_a_held_up_tick_may_join_two_polls_apart() -> None:
    """Two completions 50 ms apart reach two polls, most likely; in the wider search a
    held-up tick may have queued both at once (one poll), never past ``late_s`` apart."""
    far_at = 1.1 + TIMING.late_s
    first, second, far = make_attempt(0, 1.0), make_attempt(1, 1.05), make_attempt(2, far_at)
    collector = Collector([first, second, far], keep_versions=0, max_retries=2, timing=TIMING)
    assert collector.poll_breaks(0, 3) == (True, True)

    def breaks(bounds: TieSearch) -> set[tuple[bool, ...]]:
        found = _reorderings(collector, 3, TIMING, bounds, start=0.0)
        return {c.poll_breaks(0, 3) for _, c in found if c.order == collector.order}

    assert (False, True) not in breaks(TieSearch())
    assert (False, True) in breaks(TieSearch(wide=True))
    assert (True, False) not in breaks(TieSearch(wide=True))


def test_a_completion_may_be_queued_late_past_a_later_one() -> None:
    """i0 (submitted first) is recorded 100 ms before i1: no tick reorders them, but i0's
    own task may have ended late (the busy event loop), so it reached the queue after i1:
    the dumps say step 2 kept i1. Past ``late_s`` apart, nothing reproduces."""
    dumps = {2: ["i1/s0/r0"], 3: ["i0/s0/r0"]}
    spec = two_calls(attempt(0, 20, draw=1), attempt(1, 120, draw=2))
    replayed = replay_run(with_dumps(spec, dumps), keep_versions=0)
    assert replayed.consistent
    assert (kept_in(replayed, "i1/s0/r0"), kept_in(replayed, "i0/s0/r0")) == (2, 3)
    apart = 120 + int(1000 * TIMING.late_s)
    far = two_calls(attempt(0, 20, draw=1), attempt(1, apart, draw=2))
    far["calls"] = [(2, seconds(-5)), (3, seconds(apart + 500))]
    assert not replay_run(with_dumps(far, dumps), keep_versions=0).consistent
    files_order = replay_run(with_dumps(spec, dumps), keep_versions=0, ties=TieSearch(swaps=0))
    assert not files_order.consistent


def test_late_targets_stop_at_the_attempts_own_retry_and_at_late_s() -> None:
    moved, other, retry = make_attempt(0, 1.0), make_attempt(1, 1.1), make_attempt(2, 1.2)
    retry = replace(retry, retry_of=moved)
    collector = Collector([moved, other, retry], keep_versions=0, max_retries=2, timing=TIMING)
    assert {after for after, _, _ in late_targets(collector, 0, None, 2)} == {1}
    collector.late[moved.attempt_id] = 1.1  # once per attempt
    assert late_targets(collector, 0, None, 2) == []


def near_start_run(logged_ms: int) -> Any:
    """K = 1: i0 (version 1) long before call 2's start at 200 ms, i1 (version 2) 10 ms
    before it, i2 (version 2) after; the dump keeps i1 and i2; i0's drop logged then."""
    spec = {
        "attempts": [
            attempt(0, -300, draw=0, label="1"),
            attempt(1, 190, draw=1, label="2"),
            attempt(2, 260, draw=2, label="2"),
        ],
        "calls": [(2, seconds(200)), (3, seconds(900))],
        "batch_size": 2,
        "keep_versions": 1,
    }
    drop = pl.DataFrame(
        [(2, seconds(logged_ms), "dropped_stale", 0)], schema=EVENT_SCHEMA, orient="row"
    )
    return replace(with_dumps(spec, {2: ["i1/s0/r0", "i2/s0/r0"]}), log_events=drop)


def test_a_drop_logged_after_the_first_poll_was_not_decided_in_it() -> None:
    """As below, but i0's drop is logged 35 ms after the call's start: a first-poll drop is
    logged right at the start, so i0 was held pending and dropped when i1 came (its tick
    had not come at the start): definite, not order-ambiguous."""
    replayed = replay_run(near_start_run(235), keep_versions=1)
    assert replayed.consistent
    row = replayed.attempts.filter(pl.col("group_id") == "i0/s0/r0").row(0, named=True)
    assert (row["decision"], row["stage"], row["order_ambiguous"]) == (
        "dropped_stale",
        "pending",
        False,
    )


def test_a_completion_just_before_a_call_start_may_reach_the_second_poll() -> None:
    """K = 1. i0 (version 1) was recorded long before the call, i1 (version 2) 10 ms before
    its start, i2 (version 2) after. If the first poll took both, i0 was dropped on arrival;
    if i1 was not queued yet (its tick had not come), i0 was held pending and dropped when
    i1 came. Both keep i1 and i2, as the dump says: i0's stage is order-ambiguous."""
    run = near_start_run(201)
    replayed = replay_run(run, keep_versions=1)
    assert replayed.consistent
    row = replayed.attempts.filter(pl.col("group_id") == "i0/s0/r0").row(0, named=True)
    assert row["decision"] == "dropped_stale"
    assert row["order_ambiguous"]
    settled = replay_run(run, keep_versions=1, ties=TieSearch(swaps=0))
    settled_row = settled.attempts.filter(pl.col("group_id") == "i0/s0/r0").row(0, named=True)
    assert settled_row["stage"] == "arrival" and not settled_row["order_ambiguous"]


def test_a_fully_loop_call_placed_outside_its_logged_window_stays_unreproduced() -> None:
    """Calls 3 and 4 were placed where they came closest and their checks agree; the log's
    weight updates start call 3 at 1.0 s and call 4 at 2.0 s. Call 3's placed start takes
    the same completions as a start at 1.0 s would (none lies between): reproduced. Call
    4's placed start is past a completion a start at 2.0 s leaves for a later poll: its
    decisions stay unknown (the stage of its stale drops depends on that cut)."""
    done = [make_attempt(0, 0.9), make_attempt(1, 2.1), make_attempt(2, 2.3)]
    collector = Collector(done, keep_versions=0, max_retries=2, timing=TIMING)
    base = Pass(collector, {3: 1.01, 4: 2.2}, [], {3, 4}, done)
    run = replace(run_log(two_calls(attempt(0, 0, draw=0), attempt(1, 10, draw=1))),
                  weight_updates=((1.0, 1), (2.0, 2)))  # fmt: skip
    checks = pl.DataFrame({"step": [3, 4], "agrees": [True, True]})
    reproduced_by_ties(run, base, checks, "fully", TIMING)
    assert base.unmatched == {4}
    partial = Pass(collector, {3: 1.01, 4: 2.2}, [], {3, 4}, done)
    reproduced_by_ties(run, partial, checks, "partial", TIMING)
    assert partial.unmatched == {3, 4}  # the partial loop's calls: left as they are
