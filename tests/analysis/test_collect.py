"""The batched collection walk agrees with a plain per-group loop, batch rows included.

The differential test checks decisions and summaries against the reference model;
this one also pins each emitted batch's size, emission index and drop counts.
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import analysis
from analysis.engine.batching import (
    NO_VERSION,
    Observation,
    collect,
)
from analysis.engine.decisions import Outcome
from tests.strategies import raw_logs

prepare_module = importlib.import_module("analysis.engine.prepare")

KEPT, DROPPED_ARRIVAL, DROPPED_PENDING, REJECTED, FAILED = Outcome


def plain_collect(observation: Observation, keep: int, batch_groups: int) -> tuple[Any, ...]:
    """docs/semantics.md §3 step by step, one group at a time."""
    n = len(observation.rejected)
    decision, batch_of, current = [REJECTED] * n, [-1] * n, [-1] * n
    rows: list[tuple[int, int, bool, int, int, int]] = []
    collecting: list[int] = []
    arrival_drops = pending_drops = 0

    def emit(now: int, partial: bool) -> None:
        for member in collecting:
            decision[member], batch_of[member], current[member] = KEPT, len(rows), now
        rows.append((len(rows), len(collecting), partial, now, arrival_drops, pending_drops))

    for g in range(n):
        if observation.rejected[g]:
            continue
        known = int(observation.count_after[g])
        now, cutoff = known - 1, known - keep
        if keep and observation.advanced[g] and collecting:
            for member in [m for m in collecting if observation.min_index[m] < cutoff]:
                decision[member], current[member] = DROPPED_PENDING, now
                collecting.remove(member)
                pending_drops += 1
        if observation.failed[g]:
            decision[g], current[g] = FAILED, now
        elif keep and observation.min_index[g] < cutoff:
            decision[g], current[g] = DROPPED_ARRIVAL, now
            arrival_drops += 1
        else:
            collecting.append(g)
            if len(collecting) == batch_groups:
                emit(now, partial=False)
                collecting, arrival_drops, pending_drops = [], 0, 0
    if collecting:
        emit(int(observation.count_after[-1]) - 1, partial=True)
    return decision, batch_of, current, rows


def assert_collect_agrees(observation: Observation, keep: int, batch_groups: int) -> None:
    """collect() gives the plain loop's decisions, batches, current indices and batch rows."""
    fast = collect(observation, keep_versions=keep, batch_groups=batch_groups)
    decision, batch_of, current, rows = plain_collect(observation, keep, batch_groups)
    assert fast.decision.tolist() == decision
    assert fast.batch.tolist() == batch_of
    assert fast.current.tolist() == current
    assert fast.batch_rows == rows


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=raw_logs(),
    keep=st.integers(0, 4),
    max_preempts=st.none() | st.integers(0, 3),
    batch_groups=st.integers(1, 6),
)
def test_collect_agrees_with_a_plain_loop(
    records: list[dict[str, Any]], keep: int, max_preempts: int | None, batch_groups: int
) -> None:
    observation = analysis.prepare(analysis.records_to_table(records)).observation(max_preempts)
    assert_collect_agrees(observation, keep, batch_groups)


@st.composite
def observations(draw: st.DrawFn) -> Observation:
    """Observations drawn directly, dense in the cases that matter to the walk: versions
    advancing often, stale groups pending at batch boundaries, failures, rejections."""
    n = draw(st.integers(1, 80))
    flags = st.lists(st.booleans(), min_size=n, max_size=n)
    advanced = np.array(draw(flags))
    advanced[0] = True
    count_after = np.cumsum(advanced)
    lags = draw(st.lists(st.integers(0, 4) | st.none(), min_size=n, max_size=n))
    min_index = np.array(
        [
            NO_VERSION if lag is None else max(0, int(c) - 1 - lag)
            for c, lag in zip(count_after, lags, strict=True)
        ]
    )
    rejected = np.array(draw(flags)) & (np.arange(n) % 5 == 0)
    failed = np.array(draw(flags)) & (np.arange(n) % 7 == 3)
    zeros = np.zeros(n, dtype=np.int64)
    return Observation(
        rejected=rejected, min_index=min_index, max_index=zeros, sum_index=zeros,
        versioned=zeros, count_after=count_after, advanced=advanced & ~rejected,
        versions=(), failed=failed,
    )  # fmt: skip


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(observation=observations(), keep=st.integers(0, 4), batch_groups=st.integers(1, 6))
def test_collect_agrees_with_a_plain_loop_on_drawn_observations(
    observation: Observation, keep: int, batch_groups: int
) -> None:
    assert_collect_agrees(observation, keep, batch_groups)


def test_span_figures_without_the_per_group_table(
    small_logs: dict[str, Any], monkeypatch: Any
) -> None:
    """A log too big for the per-group span table gives the same span figures without it."""
    table = analysis.load_logs([small_logs["jsonl"]])
    config = analysis.ReplayConfig(keep_versions=1, max_preempts=1)
    with_table = analysis.replay(table, config).summary.version_span
    monkeypatch.setattr(prepare_module, "SPAN_TABLE_CELLS", 0)
    without = analysis.replay(table, config).summary.version_span
    assert without == with_table
    assert with_table["kept"]["histogram"] and with_table["all"]["histogram"]
