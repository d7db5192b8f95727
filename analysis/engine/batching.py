"""The collection loop over compact per-group arrays (docs/semantics.md §3-§4), fast enough for sweeps.

Work is split by what it depends on:

- :class:`GroupArrays` (no setting): label codes of each group's trajectory versions,
  flags, counts and trajectory spans, as flat NumPy arrays;
- :class:`Observation` (``max_preempts`` only): which groups are span-rejected, and, for
  the others, every label's index in observation order, each group's stalest / newest /
  summed version index and how many versions exist once it is observed; all vectorised;
- :func:`collect` (``keep_versions`` and ``batch_groups``): the one sequential part;
  drops on arrival and failures are vectorised, and since batches are consecutive runs
  of kept groups, only the batch being collected is followed, and only where a version
  is first seen (the moments pending groups can go stale).
"""

from __future__ import annotations

import functools
import heapq
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import overload

import numpy as np

from analysis.engine.decisions import Outcome
from analysis.table.labels import late_older_labels

NO_VERSION = np.iinfo(np.int64).max // 4
"""Stands for the index of a group without versions: never below any cutoff."""


@dataclass(frozen=True)
class GroupArrays:
    """Setting-independent per-group values in arrival order."""

    labels: list[str]
    """Distinct trajectory-version labels; codes index into this list."""
    codes: np.ndarray
    """Label code of every versioned trajectory, groups in arrival order, trajectories in order."""
    owner: np.ndarray
    """Arrival position of the group each entry of ``codes`` belongs to (non-decreasing)."""
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
    failed: np.ndarray
    """Whether each group is a failed (aborted) group."""

    @functools.cached_property
    def late_older(self) -> list[tuple[str, str]]:
        """:func:`analysis.table.labels.late_older_labels` of ``versions``, found once per
        observation (a sweep summarises every K over the same one)."""
        return late_older_labels(self.versions)


def observe(arrays: GroupArrays, max_preempts: int | None) -> Observation:
    """Observe every group that the span check lets through, all at once (docs/semantics.md §3 step 1)."""
    n = arrays.n
    if max_preempts is None:
        rejected = np.zeros(n, dtype=bool)
    else:
        rejected = arrays.max_switches > max_preempts
    codes, owner = arrays.codes, arrays.owner
    if rejected.any():
        keep = ~rejected[owner]
        codes, owner = codes[keep], owner[keep]
    # A label's index is the rank of its first appearance among observed entries.
    first = np.full(len(arrays.labels), len(codes), dtype=np.int64)
    np.minimum.at(first, codes, np.arange(len(codes)))
    first_sorted = np.sort(first[first < len(codes)])
    index_of_code = np.full(len(arrays.labels), -1, dtype=np.int64)
    index_of_code[codes[first_sorted]] = np.arange(len(first_sorted))
    index = index_of_code[codes]

    new_versions = np.bincount(owner[first_sorted], minlength=n)
    count_after = np.cumsum(new_versions)
    # Entries are grouped by owner (groups in arrival order), so per-group figures are
    # reductions over contiguous slices.
    starts = np.flatnonzero(np.diff(owner, prepend=-1))
    present = owner[starts]
    min_index = np.full(n, NO_VERSION, dtype=np.int64)
    max_index = np.zeros(n, dtype=np.int64)
    sum_index = np.zeros(n, dtype=np.int64)
    versioned = np.zeros(n, dtype=np.int64)
    if len(starts):
        min_index[present] = np.minimum.reduceat(index, starts)
        max_index[present] = np.maximum.reduceat(index, starts)
        sum_index[present] = np.add.reduceat(index, starts)
        versioned[present] = np.diff(starts, append=len(owner))
    versions = tuple(map(arrays.labels.__getitem__, codes[first_sorted].tolist()))
    return Observation(
        rejected=rejected,
        min_index=min_index,
        max_index=max_index,
        sum_index=sum_index,
        versioned=versioned,
        count_after=count_after,
        advanced=new_versions > 0,
        versions=versions,
        failed=arrays.failed,
    )


BatchRow = tuple[int, int, bool, int, int, int]
"""(batch, groups, partial, current index, dropped on arrival, dropped pending)."""


@dataclass(frozen=True, eq=False)
class BatchRows(Sequence[BatchRow]):
    """The emitted batches' rows kept as five NumPy columns (a log of a version per group
    emits as many batches as groups: a list of tuples took ~150 bytes a batch); read
    as a sequence of :data:`BatchRow` tuples, equal to a list of the same tuples."""

    groups: np.ndarray
    partial: np.ndarray
    current: np.ndarray
    dropped_arrival: np.ndarray
    dropped_pending: np.ndarray

    def __len__(self) -> int:
        return len(self.groups)

    @overload
    def __getitem__(self, index: int) -> BatchRow: ...
    @overload
    def __getitem__(self, index: slice) -> list[BatchRow]: ...
    def __getitem__(self, index: int | slice) -> BatchRow | list[BatchRow]:
        if isinstance(index, slice):
            return [self[i] for i in range(len(self))[index]]
        number = range(len(self))[index]  # IndexError past the end, negatives from it
        return (
            number, int(self.groups[number]), bool(self.partial[number]),
            int(self.current[number]), int(self.dropped_arrival[number]),
            int(self.dropped_pending[number]),
        )  # fmt: skip

    def __iter__(self) -> Iterator[BatchRow]:
        columns = (
            self.groups.tolist(), self.partial.tolist(), self.current.tolist(),
            self.dropped_arrival.tolist(), self.dropped_pending.tolist(),
        )  # fmt: skip
        return zip(range(len(self)), *columns, strict=True)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence):
            return NotImplemented
        return len(self) == len(other) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]


def batch_columns(rows: Sequence[BatchRow]) -> BatchRows:
    """The rows of any collection (a policy's loop keeps a list) as columns."""
    if isinstance(rows, BatchRows):
        return rows
    columns = list(zip(*rows, strict=True)) if rows else [()] * 6
    return BatchRows(
        groups=np.array(columns[1], dtype=np.int64),
        partial=np.array(columns[2], dtype=bool),
        current=np.array(columns[3], dtype=np.int64),
        dropped_arrival=np.array(columns[4], dtype=np.int64),
        dropped_pending=np.array(columns[5], dtype=np.int64),
    )


@dataclass(frozen=True)
class Collection:
    """Per-group outcome codes of one (K, B) run of the loop, and the emitted batches."""

    decision: np.ndarray
    batch: np.ndarray
    """0-based emission index of kept groups, -1 otherwise."""
    current: np.ndarray
    """Current version index at the group's decision (emission, drop or failure); -1 if none."""
    batch_rows: Sequence[BatchRow]
    """One :data:`BatchRow` per emitted batch (:class:`BatchRows`, or a list)."""


def collect(observation: Observation, *, keep_versions: int, batch_groups: int) -> Collection:
    """The sequential part of docs/semantics.md §3: batches, drops on arrival and while pending.

    What needs no batch state is vectorised: a group is dropped on arrival from its own
    stalest index and the version count when it arrives, and failed and rejected groups
    never enter a batch. Batches are consecutive runs of ``batch_groups`` kept groups,
    so the only sequential state is the batch being collected; it is looked at only
    where a group advances the versions (the moment pending groups can go stale).
    """
    keep = keep_versions
    rejected, failed = observation.rejected, observation.failed
    min_index, known = observation.min_index, observation.count_after
    n = len(rejected)
    now = known - 1
    decision = np.full(n, Outcome.REJECTED, dtype=np.int64)
    batch_of = np.full(n, -1, dtype=np.int64)
    current = np.where(rejected, -1, now)
    observed = ~rejected
    failing = observed & failed
    stale = observed & ~failed & (min_index < known - keep) if keep else np.zeros(n, dtype=bool)
    decision[failing] = Outcome.FAILED
    decision[stale] = Outcome.DROPPED_ARRIVAL
    entering = np.flatnonzero(observed & ~failed & ~stale)
    advancing = np.flatnonzero(observed & observation.advanced) if keep else entering[:0]

    dropped = np.zeros(len(entering), dtype=bool)  # dropped while pending, by entry
    pending_drops = advancing[:0]  # the advancing group that drops each pending group
    if batch_groups > 1 and len(advancing):  # a batch of one is emitted as its group enters
        by = _pending(
            min_index[entering], np.searchsorted(entering, advancing),
            known[advancing] - keep, batch_groups,
        )  # fmt: skip
        dropped = by >= 0
        gone, groups = entering[dropped], advancing[by[dropped]]
        decision[gone] = Outcome.DROPPED_PENDING
        current[gone] = now[groups]
        pending_drops = groups
    return _emitted(
        entering[~dropped], batch_groups, stale, pending_drops, decision, batch_of, current,
        final_now=int(known[-1]) - 1 if n else -1, now=now,
    )  # fmt: skip


def _pending(
    entry_min: np.ndarray, positions: np.ndarray, cutoffs: np.ndarray, batch_groups: int
) -> np.ndarray:
    """For each entering group, the advance (an index into ``positions``) that drops it
    while pending, or -1 when none does.

    ``entry_min`` is each entering group's stalest version index; ``positions[a]`` how
    many groups have entered when advance ``a`` is checked, ``cutoffs[a]`` the index
    below which a version is then stale (both non-decreasing). So a group goes stale at
    a moment known without the loop: the first advance after it entered whose cutoff
    passes its stalest index; it is dropped then unless its batch was emitted first, as
    it is once ``batch_groups`` groups that were not dropped have entered. Only that
    count is sequential: the walk over entering groups keeps the batch being collected
    in a heap by the moment each would be dropped.
    """
    entries = len(entry_min)
    after = np.searchsorted(positions, np.arange(entries), side="right")
    stale_at = np.searchsorted(cutoffs, entry_min, side="right")
    advance = np.maximum(after, stale_at)
    # The moment: how many groups have entered when the advance is checked (past the
    # last entry for never).
    moment = np.append(positions, entries + 1)[advance].tolist()
    dropped: list[int] = []
    batch: list[tuple[int, int]] = []  # (moment it is dropped, entry), a heap
    for entry, when in enumerate(moment):
        while batch and batch[0][0] <= entry:  # stale before this group enters
            dropped.append(heapq.heappop(batch)[1])
        heapq.heappush(batch, (when, entry))
        if len(batch) == batch_groups:
            batch = []
    dropped += [entry for when, entry in batch if when <= entries]  # the last, partial batch
    by = np.full(entries, -1, dtype=np.int64)
    index = np.array(dropped, dtype=np.int64)
    by[index] = advance[index]
    return by


def _emitted(
    members: np.ndarray,
    batch_groups: int,
    stale: np.ndarray,
    pending_drops: np.ndarray,
    decision: np.ndarray,
    batch_of: np.ndarray,
    current: np.ndarray,
    *,
    final_now: int,
    now: np.ndarray,
) -> Collection:
    """Mark the kept groups (``members``, in order) with their batch and count each
    batch's drops."""
    n_batches = -(-len(members) // batch_groups)
    # A batch is complete when its last member enters; a last partial one at the end.
    ends = members[np.minimum(np.arange(1, n_batches + 1) * batch_groups, len(members)) - 1]
    sizes = np.full(n_batches, batch_groups, dtype=np.int64)
    if len(members) % batch_groups:
        ends[-1] = len(decision)
        sizes[-1] = len(members) % batch_groups
    # A drop counts in the row of the first batch emitted at or after it; drops after
    # the last batch are in no batch row (the summary counts them all the same).
    arrival = np.bincount(np.searchsorted(ends, np.flatnonzero(stale)), minlength=n_batches + 1)[
        :n_batches
    ]
    pending = np.bincount(np.searchsorted(ends, pending_drops), minlength=n_batches + 1)
    partial = ends == len(decision)
    emitted_now = np.where(partial, final_now, now[np.minimum(ends, len(now) - 1)])
    decision[members] = Outcome.KEPT
    batch_of[members] = np.repeat(np.arange(n_batches), sizes)
    current[members] = np.repeat(emitted_now, sizes)
    rows = BatchRows(
        groups=sizes, partial=partial, current=emitted_now.astype(np.int64, copy=False),
        dropped_arrival=arrival.astype(np.int64, copy=False), dropped_pending=pending[:n_batches],
    )  # fmt: skip
    return Collection(decision=decision, batch=batch_of, current=current, batch_rows=rows)
