"""The worker's tick and the collector's poll (docs/semantics.md §12.2): the engine's
queue order and the hypotheses it searches against ``tests/reference_ticks.py``, and the
search among them with a run's dumps as constraints."""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import given, settings, strategies as st

from analysis.engine.decisions import Decision
from analysis.engine.run_loop.collector import (
    Attempt,
    AttemptDecision,
    Collector,
    PollTiming,
    may_precede,
    queue_order,
)
from analysis.engine.run_loop.replay import RUN_DECISION_COLUMNS, replay_run
from analysis.engine.run_loop.ties import TieSearch, _drops_agree
from analysis.formats.dressage.run import RunLog, read_run
from analysis.formats.dressage.step_dumps import KEPT_SCHEMA
from tests.analysis.test_loop_differential import attempt, run_log, seconds
from tests.real_runs import CONSUMED, TIE_RUNS, by_trajectory
from tests.reference_ticks import RefGroup, queue_order_reference, tick_times

TIMING = PollTiming()
PERIOD = 0.010
"""The worker's sleep between ticks."""


def make_attempt(submission: int, file_time: float, *, known: bool = True) -> Attempt:
    return Attempt(
        attempt_id=f"g{submission}",
        start_rollout_id=0,
        retry_count=0,
        completed_at=file_time,
        fail_kind=None,
        span_verdict=False,
        draw=submission if known else None,
        async_group_id=submission if known else None,
        sessions=(f"g{submission}/t0",),
        spans=(1,),
        end_versions=(),
    )


@st.composite
def worker_runs(draw: st.DrawFn) -> tuple[list[RefGroup], list[float], dict[int, float]]:
    """Groups done at random times (some within one tick of each other), the worker's
    ticks (random phase, some held up) and each group's delay from its files' time to
    its task being done."""
    n = draw(st.integers(2, 9))
    done = sorted(draw(st.lists(st.integers(0, 400), min_size=n, max_size=n)))
    submissions = draw(st.permutations(range(n)))
    groups = [RefGroup(submissions[i], done=done[i] / 1000) for i in range(n)]
    phase = draw(st.integers(0, 9)) / 1000
    stalls = draw(
        st.dictionaries(st.integers(0, 45), st.integers(10, 150).map(lambda ms: ms / 1000))
    )
    ticks = tick_times(phase - 0.01, 60, PERIOD, stalls)
    delays = {g.submission: draw(st.integers(0, 12)) / 1000 for g in groups}
    return groups, ticks, delays


def pairs_out_of_order(engine: list[Attempt], reference: list[RefGroup]) -> list[tuple[int, int]]:
    """(i, j), i < j in the engine's order, whose groups the reference queues j first."""
    place = {f"g{g.submission}": k for k, g in enumerate(reference)}
    return [
        (i, j)
        for i in range(len(engine))
        for j in range(i + 1, len(engine))
        if place[engine[j].attempt_id] < place[engine[i].attempt_id]
    ]


@settings(max_examples=300, deadline=None)
@given(run=worker_runs())
def test_the_queue_order_is_one_the_engine_allows(
    run: tuple[list[RefGroup], list[float], dict[int, float]],
) -> None:
    """Whatever the ticks' phase, held-up ticks and the delay from a group's files to its
    task's end, the reference's queue order differs from the engine's most likely order
    only by pairs the engine may swap (:func:`may_precede`), all within one of its
    ambiguous runs; with no two completions closer than the files can order and no
    held-up tick, the orders are the same."""
    groups, ticks, delays = run
    reference = queue_order_reference(groups, ticks)
    attempts = [make_attempt(g.submission, g.done - delays[g.submission]) for g in groups]
    found = queue_order(attempts, TIMING)
    for i, j in pairs_out_of_order(found.order, reference):
        assert may_precede(found.order[j], found.order[i], TIMING)
        assert any(start <= i and j < end for start, end in found.ambiguous)
    gaps = [b - a for a, b in itertools.pairwise(sorted(a.completed_at for a in attempts))]
    held = any(later - earlier > PERIOD + 1e-9 for earlier, later in itertools.pairwise(ticks))
    if all(gap >= TIMING.order_uncertainty_s for gap in gaps) and not held:
        assert [a.attempt_id for a in found.order] == [f"g{g.submission}" for g in reference]
    if all(gap >= TIMING.stall_s for gap in gaps):
        assert found.ambiguous == ()


def test_a_held_up_tick_may_put_an_earlier_submission_first() -> None:
    """g0 submitted first but recorded 80 ms after g1: only a held-up tick queues it first,
    so it may go first; g2, known submitted after g1 and recorded 80 ms after it, may not;
    one whose submission order the files do not tell may (a retry the log names only by
    its failed attempt's id), but not once the gap is past a held-up tick."""
    g1, g0, g2 = make_attempt(1, 1.000), make_attempt(0, 1.080), make_attempt(2, 1.080)
    assert may_precede(g0, g1, TIMING)
    assert not may_precede(g2, g1, TIMING)
    unknown = make_attempt(3, 1.080, known=False)
    assert may_precede(unknown, g1, TIMING)  # not known to be submitted after it
    assert not may_precede(make_attempt(5, 1.001 + TIMING.stall_s, known=False), g1, TIMING)
    assert may_precede(make_attempt(4, 1.020, known=False), g1, TIMING)  # closer than 25 ms


def with_dumps(spec: dict[str, Any], kept: dict[int, list[str]]) -> RunLog:
    """The spec's run with a dump per step holding the given attempts' trajectories."""
    rows = [
        (rollout_id, position, None, f"{attempt_id}/t0", None, None)
        for rollout_id, ids in kept.items()
        for position, attempt_id in enumerate(ids)
    ]
    return replace(run_log(spec), kept=pl.DataFrame(rows, schema=KEPT_SCHEMA, orient="row"))


SWAP = {
    # i5 submitted first but recorded between i6 and i7 (a few ms apart): the files
    # cannot tell whether it shared their tick, nor the order
    "attempts": [
        attempt(8, -250, draw=8),
        attempt(6, 20, draw=6),
        attempt(7, 27, draw=7),
        attempt(5, 30, draw=5),
    ],
    "calls": [(2, seconds(-5)), (3, seconds(200))],
    "batch_size": 2,
    "keep_versions": 0,
}


def test_the_dumps_choose_among_the_orders_the_files_allow() -> None:
    """Most likely, i5 shares a tick with i6 and i7 and goes first (submitted first); the
    run's dump of step 2 says i8 and i6: the replay takes the order that gives it."""
    plain = replay_run(run_log(SWAP), keep_versions=0)
    kept = plain.attempts.filter(pl.col("decided_in") == 2, pl.col("decision") == "kept")
    assert set(kept["group_id"]) != {"i8/s0/r0", "i6/s0/r0"}
    replayed = replay_run(
        with_dumps(SWAP, {2: ["i8/s0/r0", "i6/s0/r0"], 3: ["i7/s0/r0", "i5/s0/r0"]}),
        keep_versions=0,
    )
    rows = {row["group_id"]: row for row in replayed.attempts.iter_rows(named=True)}
    assert [rows[f"i{i}/s0/r0"]["batch"] for i in (8, 6, 7, 5)] == [0, 0, 1, 1]
    assert replayed.consistent
    # i7 and i5 both reach step 3 in either order: nothing depends on it
    assert replayed.to_dict()["order_ambiguous"] == {"groups": 0, "trajectories": 0}


def test_what_the_dumps_cannot_tell_is_reported_ambiguous() -> None:
    """Without dumps any order reproduces the run: the attempts whose batch depends on the
    order are marked order_ambiguous, in --decisions and --trajectories and the counts."""
    replayed = replay_run(run_log(SWAP), keep_versions=0)
    ambiguous = set(replayed.attempts.filter(pl.col("order_ambiguous"))["group_id"])
    assert ambiguous and ambiguous <= {"i5/s0/r0", "i6/s0/r0", "i7/s0/r0"}
    assert "i8/s0/r0" not in ambiguous  # completed 250 ms before the others: first
    assert replayed.to_dict()["order_ambiguous"]["groups"] == len(ambiguous)
    table = replayed.decision_table()
    assert tuple(table.columns) == RUN_DECISION_COLUMNS
    flagged = replayed.trajectory_table().filter(pl.col("order_ambiguous"))
    assert set(flagged["group_id"]) == ambiguous


def test_only_a_held_up_tick_makes_groups_far_apart_ambiguous() -> None:
    """Completions 100 ms apart, submitted in that order, are never ambiguous; submitted
    in the reverse order, a held-up tick could have queued them together (reversed)."""
    spec = dict(SWAP, attempts=[attempt(i, 100 * i, draw=i) for i in range(4)])
    assert not replay_run(run_log(spec), keep_versions=0).attempts["order_ambiguous"].any()
    spec = dict(SWAP, attempts=[attempt(i, 100 * i, draw=9 - i) for i in range(4)])
    assert replay_run(run_log(spec), keep_versions=0).attempts["order_ambiguous"].any()
    spec = dict(SWAP, attempts=[attempt(i, 300 * i, draw=9 - i) for i in range(4)])
    assert not replay_run(run_log(spec), keep_versions=0).attempts["order_ambiguous"].any()


def test_the_logs_stale_drops_order_the_hypotheses() -> None:
    """Dressage numbers groups in submission order and logs each stale drop with its
    number: a hypothesis whose drops come in another order of submission is refused."""
    first = replace(make_attempt(0, 1.0, known=False), draw=0)  # no async ids: draws tell
    second = replace(make_attempt(1, 1.01, known=False), draw=1)
    collector = Collector([first, second], keep_versions=1, max_retries=2, timing=TIMING)
    for dropped in (second, first):  # dropped in the reverse of submission order
        collector.decisions[dropped.attempt_id] = AttemptDecision(Decision.DROPPED_STALE, 0)
    assert _drops_agree(collector, 0, 0, [41, 40])
    assert not _drops_agree(collector, 0, 0, [40, 41])
    assert _drops_agree(collector, 0, 0, None)
    retried = replace(make_attempt(2, 1.02, known=False), retry_count=1, draw=2)
    collector.attempts[retried.attempt_id] = retried
    collector.decisions[retried.attempt_id] = AttemptDecision(Decision.DROPPED_STALE, 0)
    assert _drops_agree(collector, 0, 0, [40, 41, 39])  # a retry's number is not known


@pytest.mark.parametrize("name", TIE_RUNS)
def test_a_compressed_run_is_replayed_as_dressage_queued_it(
    name: str,
    run_folders: dict[str, Path],
    run_settings: dict[str, dict[str, Any]],
    truth: dict[str, list[dict[str, Any]]],
) -> None:
    """A run whose groups often finish within one worker tick of each other: in the files'
    order (by time, by submission within 10 ms) steps take other groups than Dressage did
    and the run's own checks disagree; choosing among the orders the files allow by the
    run's dumps, metrics and log, every check agrees and every trajectory that disagrees
    with Dressage is reported order-ambiguous (under 2%: a completion recorded just before
    a call's start may have reached its second poll, which the files cannot tell)."""
    settings = run_settings[name]
    run = read_run(run_folders[name])
    replayed = replay_run(
        run, keep_versions=settings["keep_versions"], max_retries=settings["max_retries"]
    )
    rows = by_trajectory(replayed.trajectories)
    wrong = set()
    for group in truth[name]:
        if group["outcome"] not in CONSUMED:
            continue
        kept = group["outcome"] == "kept"
        batch = settings["rollout_ids"].index(group["rollout_id"]) if kept else None
        for session in group["session_ids"]:
            row = rows[session]
            if (row["decision"], row["stage"], row["batch"]) != (
                group["outcome"],
                group["stage"],
                batch,
            ):
                wrong.add(session)
    flagged = {session for session, row in rows.items() if row["order_ambiguous"]}
    assert wrong <= flagged
    assert len(flagged) <= 0.02 * len(rows)
    assert replayed.consistent
    files_order = replay_run(
        run,
        keep_versions=settings["keep_versions"],
        max_retries=settings["max_retries"],
        ties=TieSearch(swaps=0),
    )
    assert not files_order.consistent  # the search is what reproduces the run
