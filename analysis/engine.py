"""The collection loop over compact per-group arrays (SPEC §3-§4), fast enough for sweeps.

Work is split by what it depends on:

- :class:`GroupArrays` (no setting): label codes of each group's trajectory versions,
  flags, counts and trajectory spans, as flat NumPy arrays;
- :class:`Observation` (``max_preempts`` only): which groups are span-rejected, and, for
  the others, every label's index in observation order, each group's stalest / newest /
  summed version index and how many versions exist once it is observed; all vectorised;
- :func:`collect` (``keep_versions`` and ``batch_groups``): the one sequential part, a
  plain loop over groups doing a few integer comparisons each.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

NO_VERSION = np.iinfo(np.int64).max // 4
"""Stands for the index of a group without versions: never below any cutoff."""

KEPT, DROPPED_ARRIVAL, DROPPED_PENDING, REJECTED, FAILED = range(5)


@dataclass(frozen=True)
class GroupArrays:
    """Setting-independent per-group values in arrival order."""

    labels: list[str]
    """Distinct trajectory-version labels; codes index into this list."""
    codes: np.ndarray
    """Label code of every versioned trajectory, groups in arrival order, trajectories in order."""
    owner: np.ndarray
    """Arrival position of the group each entry of ``codes`` belongs to."""
    samples: np.ndarray
    trajectories: np.ndarray
    tokens: np.ndarray
    failed: np.ndarray
    max_switches: np.ndarray
    """Largest switch count among checked trajectories; -1 when none was checked."""
    span: np.ndarray
    """Span of every checked trajectory."""
    span_owner: np.ndarray

    @property
    def n(self) -> int:
        return len(self.samples)


@dataclass(frozen=True)
class Observation:
    """What observing the non-rejected groups in arrival order gives, for one ``max_preempts``."""

    rejected: np.ndarray
    min_index: np.ndarray
    """Stalest version index of each group (NO_VERSION when it has none or is rejected)."""
    max_index: np.ndarray
    sum_index: np.ndarray
    versioned: np.ndarray
    """Number of versioned trajectories of each observed group."""
    count_after: np.ndarray
    """How many versions are known once the group is observed."""
    advanced: np.ndarray
    versions: tuple[str, ...]
    """Labels in observation order."""
    loop_inputs: tuple[list[Any], ...]
    """The arrays above as Python lists, for the sequential loop."""


def observe(arrays: GroupArrays, max_preempts: int | None) -> Observation:
    """Observe every group that the span check lets through, all at once (SPEC §3 step 1)."""
    n = arrays.n
    if max_preempts is None:
        rejected = np.zeros(n, dtype=bool)
    else:
        rejected = arrays.max_switches > max_preempts
    keep = ~rejected[arrays.owner]
    codes, owner = arrays.codes[keep], arrays.owner[keep]
    # A label's index is the rank of its first appearance among observed entries.
    first = np.full(len(arrays.labels), len(codes), dtype=np.int64)
    np.minimum.at(first, codes, np.arange(len(codes)))
    first_sorted = np.sort(first[first < len(codes)])
    index_of_code = np.full(len(arrays.labels), -1, dtype=np.int64)
    index_of_code[codes[first_sorted]] = np.arange(len(first_sorted))
    index = index_of_code[codes]

    new_versions = np.bincount(owner[first_sorted], minlength=n)
    count_after = np.cumsum(new_versions)
    min_index = np.full(n, NO_VERSION, dtype=np.int64)
    max_index = np.zeros(n, dtype=np.int64)
    np.minimum.at(min_index, owner, index)
    np.maximum.at(max_index, owner, index)
    sum_index = np.bincount(owner, weights=index, minlength=n).astype(np.int64)
    versioned = np.bincount(owner, minlength=n)
    versions = tuple(arrays.labels[code] for code in codes[first_sorted])
    return Observation(
        rejected=rejected,
        min_index=min_index,
        max_index=max_index,
        sum_index=sum_index,
        versioned=versioned,
        count_after=count_after,
        advanced=new_versions > 0,
        versions=versions,
        loop_inputs=(
            rejected.tolist(),
            arrays.failed.tolist(),
            min_index.tolist(),
            count_after.tolist(),
            (new_versions > 0).tolist(),
        ),
    )


@dataclass(frozen=True)
class Collection:
    """Per-group outcome codes of one (K, B) run of the loop, and the emitted batches."""

    decision: np.ndarray
    batch: np.ndarray
    """0-based emission index of kept groups, -1 otherwise."""
    current: np.ndarray
    """Current version index at the group's decision (emission, drop or failure); -1 if none."""
    batch_rows: list[tuple[int, int, bool, int, int, int]]
    """(batch, groups, partial, current index, dropped on arrival, dropped pending)."""


def collect(observation: Observation, *, keep_versions: int, batch_groups: int) -> Collection:
    """The sequential part of SPEC §3: batches, drops on arrival and while pending."""
    rejected, failed, min_index, count_after, advanced = observation.loop_inputs
    n = len(rejected)
    decision = [REJECTED] * n
    batch_of = [-1] * n
    current = [-1] * n
    rows: list[tuple[int, int, bool, int, int, int]] = []
    collecting: list[int] = []
    arrival_drops = pending_drops = 0
    keep = keep_versions

    def emit(members: list[int], now: int, *, partial: bool, dropped: tuple[int, int]) -> None:
        number = len(rows)
        for member in members:
            decision[member] = KEPT
            batch_of[member] = number
            current[member] = now
        rows.append((number, len(members), partial, now, *dropped))

    for g in range(n):
        if rejected[g]:
            continue
        known = count_after[g]
        now = known - 1
        cutoff = known - keep  # a group is stale when its stalest index is below this
        if keep and advanced[g] and collecting:
            still = []
            for pending in collecting:
                if min_index[pending] < cutoff:
                    decision[pending] = DROPPED_PENDING
                    current[pending] = now
                    pending_drops += 1
                else:
                    still.append(pending)
            collecting = still
        if failed[g]:
            decision[g] = FAILED
            current[g] = now
            continue
        if keep and min_index[g] < cutoff:
            decision[g] = DROPPED_ARRIVAL
            current[g] = now
            arrival_drops += 1
            continue
        collecting.append(g)
        if len(collecting) == batch_groups:
            emit(collecting, now, partial=False, dropped=(arrival_drops, pending_drops))
            arrival_drops = pending_drops = 0
            collecting = []
    if collecting:
        now = int(count_after[-1]) - 1 if n else -1
        emit(collecting, now, partial=True, dropped=(arrival_drops, pending_drops))
    return Collection(
        decision=np.array(decision, dtype=np.int64),
        batch=np.array(batch_of, dtype=np.int64),
        current=np.array(current, dtype=np.int64),
        batch_rows=rows,
    )
