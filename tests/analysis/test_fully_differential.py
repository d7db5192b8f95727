"""Differential test: the fully-async loop (``replay_run(loop="fully")``,
:class:`~analysis.engine.run_loop.fully.FullyCollector`, docs/semantics.md §12.4) agrees
with the reference model ``tests.reference_fully`` on generated runs.

Each example is the worker's output queue cut into ticks (1-4 groups a tick, queue order
given) and rollout calls placed between ticks (several may start before the same tick;
the first before any). Groups are succeeded, aborted or raised (with or without completed
trajectories), with retry counts 0-3 against retry limits 0-3; end versions come from a
small label set, observed out of numeric order, sometimes two new ones in one group. The
run is built as a :class:`RunLog` with times that make the ticks unambiguous: a tick's
groups complete 1 ms apart, in queue order and in submission order, ticks 100 ms apart,
calls 50 ms before their tick. Every attempt's decision, stage, batch, decided-in call,
retried flag and leftover kind, and the tracker's versions, must be the same.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings, strategies as st

from analysis.engine.run_loop.replay import replay_run
from tests.analysis.test_loop_differential import COMPARED, LABELS, run_log, seconds
from tests.reference_fully import RefCall, RefGroup, replay_fully_reference

TICK_MS = 100
"""Ticks this far apart: never one poll (Dressage polls every 10 ms)."""


@st.composite
def fully_specs(draw: st.DrawFn) -> dict[str, Any]:
    """Ticks of groups, calls between ticks, B, K and the retry limit."""
    sizes = draw(st.lists(st.integers(1, 4), min_size=1, max_size=6))
    n = sum(sizes)
    submission = draw(st.permutations(range(n)))
    attempts = []
    ticks: list[list[int]] = []
    i = 0
    for tick, size in enumerate(sizes):
        # within a tick the worker queues in submission order: ranks ascending
        ranks = sorted(submission[i : i + size])
        ticks.append(list(range(i, i + size)))
        for j, rank in enumerate(ranks):
            fail_kind = draw(st.sampled_from((None,) * 4 + ("span", "other")))
            count = draw(st.integers(1, 3))
            positions = draw(st.permutations(range(count)))
            trajectories = []
            for k in range(count):
                completed = fail_kind is None or draw(st.booleans())
                label = draw(st.sampled_from((None, *LABELS))) if completed else None
                trajectories.append(
                    {"position": positions[k], "completed": completed, "end_version": label}
                )
            retry = draw(st.integers(0, 3))
            attempts.append(
                {
                    "id": f"i{i + j}/s0/r{retry}",
                    "instance": f"i{i + j}",
                    "retry_count": retry,
                    "completed_at": seconds(tick * TICK_MS + j),
                    "fail_kind": fail_kind,
                    "async_group_id": 100 + rank,
                    "draw": rank,
                    "trajectories": trajectories,
                }
            )
        i += size
    before = sorted(draw(st.lists(st.integers(0, len(sizes)), min_size=1, max_size=4)))
    first_id = draw(st.integers(0, 2))
    calls = [
        (first_id + c, seconds(ticks_before * TICK_MS - TICK_MS // 2 + c))
        for c, ticks_before in enumerate(before)
    ]
    return {
        "attempts": attempts,
        "ticks": ticks,
        "ticks_before": before,
        "calls": calls,
        "batch_size": draw(st.integers(1, 3)),
        "keep_versions": draw(st.sampled_from((0, 1, 1, 2, 2, 3))),
        "max_retries": draw(st.integers(0, 3)),
    }


def reference_of(spec: dict[str, Any]) -> dict[str, Any]:
    groups = [
        RefGroup(
            a["id"],
            trajectories=[
                (t["position"], t["end_version"]) for t in a["trajectories"] if t["completed"]
            ],
            fail_kind=a["fail_kind"],
            retry_count=a["retry_count"],
        )
        for a in spec["attempts"]
    ]
    calls = [
        RefCall(rollout_id, ticks_before)
        for (rollout_id, _), ticks_before in zip(spec["calls"], spec["ticks_before"], strict=True)
    ]
    result = replay_fully_reference(
        [[groups[i] for i in tick] for tick in spec["ticks"]],
        calls,
        batch_size=spec["batch_size"],
        keep_versions=spec["keep_versions"],
        max_retries=spec["max_retries"],
    )
    return {"decisions": result.decisions, "versions": result.versions}


def check_agreement(spec: dict[str, Any]) -> None:
    result = replay_run(
        run_log(spec),
        keep_versions=spec["keep_versions"],
        max_retries=spec["max_retries"],
        loop="fully",
        unknown_where_checks_disagree=False,  # the loop itself against the reference
    )
    engine = {
        row["group_id"]: {key: row[key] for key in COMPARED}
        for row in result.attempts.iter_rows(named=True)
    }
    expected = reference_of(spec)
    assert engine == expected["decisions"]
    assert list(result.versions) == expected["versions"]


@settings(max_examples=300, deadline=None)
@given(spec=fully_specs())
def test_fully_loop_agrees_with_reference(spec: dict[str, Any]) -> None:
    check_agreement(spec)


def group(i: int, tick: int, j: int, label: str | None = "1", **extra: Any) -> dict[str, Any]:
    """A one-trajectory attempt, the ``j``-th of tick ``tick``."""
    return {
        "id": f"i{i}/s0/r{extra.get('retry_count', 0)}",
        "instance": f"i{i}",
        "retry_count": extra.get("retry_count", 0),
        "completed_at": seconds(tick * TICK_MS + j),
        "fail_kind": extra.get("fail_kind"),
        "async_group_id": 100 + i,
        "draw": i,
        "trajectories": [
            {"position": 0, "completed": extra.get("fail_kind") is None, "end_version": label}
        ],
    }


def test_surplus_of_a_full_poll_is_discarded_failed_ones_without_retry() -> None:
    """One poll of four groups against a batch of one: the first is kept, the other three
    (one of them failed, which the partial loop would retry) are lost with the call, so
    the next call keeps the group of the next tick."""
    spec: dict[str, Any] = {
        "attempts": [
            group(0, 0, 0),
            group(1, 0, 1, fail_kind="other"),
            group(2, 0, 2),
            group(3, 0, 3),
            group(4, 1, 0),
        ],
        "ticks": [[0, 1, 2, 3], [4]],
        "ticks_before": [1, 2],
        "calls": [(0, seconds(50)), (1, seconds(150))],
        "batch_size": 1,
        "keep_versions": 0,
        "max_retries": 2,
    }
    check_agreement(spec)
    decisions = reference_of(spec)["decisions"]
    assert [decisions[a["id"]]["decision"] for a in spec["attempts"]] == [
        "kept",
        *["discarded_surplus"] * 3,
        "kept",
    ]
