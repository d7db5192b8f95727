"""Rollout calls placed where no log line tells their start, with the run's own records as
constraints (docs/semantics.md §12.2, §12.4): for each call, the cuts of the completion
order whose replay gives the step's dump and metrics (without Dressage's log), or the
earliest sequence of such cuts, backtracking (the fully-async loop, which logs no call
start). The order of near-simultaneous completions is searched in :mod:`.ties`."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from analysis.engine.decisions import Decision
from analysis.engine.run_loop.checks import step_counts
from analysis.engine.run_loop.collector import (
    Attempt,
    Collector,
    PollTiming,
    completion_order,
    late_targets,
    may_precede,
)


def infer_call_starts(
    attempts: list[Attempt],
    target_groups: int,
    final_rollout_id: int | None,
    kept_by_step: Mapping[int, set[str]],
    metrics: Mapping[int, Mapping[str, Any]],
    *,
    keep_versions: int,
    max_retries: int,
    timing: PollTiming,
    lookahead: int = 4,
    latest: bool = False,
    unmatched: set[int] | None = None,
    collector_class: type[Collector] = Collector,
) -> tuple[dict[int, float], list[str]]:
    """Rollout call starts without ``dressage_log.txt``.

    A start matters only through which completions the call's first poll takes. For each
    step, every cut of the completion order from the previous call's end to a few
    completions past the last attempt the step's dump holds is replayed; cuts whose kept
    sessions equal the dump and whose counts equal the metrics row are kept, the earliest
    wins (the latest with ``latest``: the replay tries both to see which decisions depend
    on it), and a note says when matching cuts decide differently. Calls that no cut
    reproduces are added to ``unmatched``. ``collector_class`` is the loop's collector
    (:class:`Collector`, or the fully-async loop's).
    """
    collector = collector_class(
        completion_order(attempts, timing),
        keep_versions=keep_versions,
        max_retries=max_retries,
        timing=timing,
    )
    starts: dict[int, float] = {}
    notes: list[str] = []
    for rollout_id in sorted(set(kept_by_step) | set(metrics)):
        final = rollout_id == final_rollout_id
        matches: list[tuple[float, Collector, tuple[Any, ...]]] = []
        for start in _candidate_starts(collector, kept_by_step.get(rollout_id), lookahead):
            trial = collector.clone()
            before = set(trial.decisions)
            kept = trial.run_call(rollout_id, start, target_groups, final=final)
            if matches_step(
                trial, rollout_id, kept, kept_by_step.get(rollout_id), metrics.get(rollout_id)
            ):
                decided = tuple(
                    sorted(
                        (key, d.decision, d.stage or "")
                        for key, d in trial.decisions.items()
                        if key not in before
                    )
                )
                matches.append((start, trial, decided))
        if not matches:
            notes.append(
                f"call {rollout_id}: no start reproduces the recorded step; took the earliest"
            )
            if unmatched is not None:
                unmatched.add(rollout_id)
            start = collector.last_fetch + 1e-6
            collector.run_call(rollout_id, start, target_groups, final=final)
        else:
            if len({m[2] for m in matches}) > 1:
                notes.append(
                    f"call {rollout_id}: {len({m[2] for m in matches})} different replays match "
                    "the recorded step; took the earliest start"
                )
            start, collector, _ = matches[-1 if latest else 0]
        starts[rollout_id] = start
        if final:
            break
    return starts, notes


def _candidate_starts(
    collector: Collector,
    wanted: set[str] | None,
    lookahead: int,
    around: float | None = None,
) -> list[float]:
    """One start time per cut of the completion order a call may begin at. With
    ``around`` (when the trainer started the call, :func:`expected_starts`), only the cuts
    a start then can make, nearest first; all of them when none can (a log off in time)."""
    order, first = collector.order, collector.delivered
    last_needed = first
    if wanted:
        for j in range(first, len(order)):
            if wanted.intersection(order[j].sessions):
                last_needed = j + 1
    starts = []
    cuts: list[tuple[float, float, float]] = []  # (start, after, before)
    for j in range(first, min(len(order), last_needed + lookahead) + 1):
        after = collector.last_fetch if j == first else order[j - 1].completed_at
        before = order[j].completed_at if j < len(order) else float("inf")
        if j == first:
            if collector.last_fetch > float("-inf"):
                starts.append(collector.last_fetch + 1e-6)
            else:
                starts.append(order[j].completed_at - 1e-3 if j < len(order) else 0.0)
        elif j < len(order):
            starts.append((order[j - 1].completed_at + order[j].completed_at) / 2)
        else:
            starts.append(order[j - 1].completed_at + 1e-3)
        cuts.append((starts[-1], after, before))
    if around is None:
        return starts
    timing = collector.timing
    near = [
        (max(after - around, around - before, 0.0), start, after, before)
        for start, after, before in cuts
        # queued by then: done before it (the log's ms and the call's own start aside);
        # not queued yet: done after it, or so shortly before that its tick had not come
        if after < around + START_LATENCY_S and before > around - timing.order_uncertainty_s
    ]
    if not near:
        return starts
    near.sort(key=lambda cut: cut[0])
    return [start if not after < around < before else around for _, start, after, before in near]


START_LATENCY_S = 0.05
"""How long after the log's weight-update line the next call may poll first: the line's
millisecond, the trainer handing the call to the rollout manager."""


def expected_starts(weight_updates: Iterable[tuple[float, int]]) -> dict[int, float]:
    """When the trainer started each rollout call, as its log tells: Dressage's training
    loop starts call r + 2 right after the weight update that follows call r + 1 (logged
    "weights updated (weight_update_after_rollout_r)"); calls 0 and 1 have no such line."""
    return {rollout_id + 2: at for at, rollout_id in weight_updates}


def matches_step(
    trial: Collector,
    rollout_id: int,
    kept: list[Attempt],
    wanted: set[str] | None,
    metrics: Mapping[str, Any] | None,
) -> bool:
    if wanted is not None and {s for a in kept for s in a.sessions} != wanted:
        return False
    if metrics is None:
        return True
    return all(
        metrics.get(name) is None or value is None or float(metrics[name]) == value
        for name, value in step_counts(trial, rollout_id).items()
    )


def search_call_starts(
    attempts: list[Attempt],
    target_groups: int,
    final_rollout_id: int | None,
    kept_by_step: Mapping[int, set[str]],
    metrics: Mapping[int, Mapping[str, Any]],
    *,
    keep_versions: int,
    max_retries: int,
    timing: PollTiming,
    collector_class: type[Collector],
    expected: Mapping[int, float] | None = None,
    lookahead: int = 12,
    budget: int = 20_000,
    latest: bool = False,
    unmatched: set[int] | None = None,
    total: int | None = None,
) -> tuple[dict[int, float], list[str], Collector]:
    """Rollout call starts for a loop whose calls leave no start line (the fully-async
    loop): the earliest cuts, step after step, such that every step's dump and metrics are
    reproduced, backtracking when a later step cannot be (a call that polled more than it
    needed throws the rest away, which only a later step's dump shows).

    ``expected`` (rollout id -> when the trainer started the call, from the log's weight
    updates: :func:`expected_starts`) narrows each call's cuts to those a start then can
    make, nearest first.

    ``latest`` tries the cuts of a call the log does not time latest first (the replay
    tries both, to see which decisions depend on where such calls begin).

    A step that no sequence of cuts reproduces (within ``budget`` calls replayed) is placed
    at the cut whose kept sessions come closest to its dump, with a note (and added to
    ``unmatched``), and the search goes on from there.

    ``total`` (None: unbounded) bounds the calls replayed over the whole search: once
    spent, each step left is placed at its closest cut, unsearched, with a note saying the
    search was cut short (without failed trajectories few steps are reproduced).
    """
    steps = [
        step
        for step in sorted(set(kept_by_step) | set(metrics))
        if final_rollout_id is None or step <= final_rollout_id
    ]
    collector = collector_class(
        completion_order(attempts, timing),
        keep_versions=keep_versions,
        max_retries=max_retries,
        timing=timing,
    )
    spend = _Budget(budget, total if total is not None else sys.maxsize)
    timed: Mapping[int, float] = expected or {}
    placed = set() if unmatched is None else unmatched  # steps placed where closest
    deepest: list[tuple[float, Collector]] = []
    retried = {a.retry_of.attempt_id for a in attempts if a.retry_of is not None}

    def walk(depth: int, collector: Collector, path: list[tuple[float, Collector]]) -> bool:
        nonlocal deepest
        if len(path) > len(deepest):
            deepest = list(path)
        if depth == len(steps):
            return True
        step = steps[depth]
        wanted = kept_by_step.get(step)
        replays = _call_replays(
            collector, step, target_groups, wanted, lookahead,
            final=step == final_rollout_id, expected=timed, latest=latest,
        )  # fmt: skip
        for start, trial, kept in spend.calls(replays):
            if not matches_step(trial, step, kept, wanted, metrics.get(step)):
                continue
            if _discards_retried(trial, collector, retried):
                continue
            path.append((start, trial))
            if walk(depth + 1, trial, path):
                return True
            path.pop()
        return False

    notes: list[str] = []
    starts: dict[int, float] = {}
    depth = 0
    while depth < len(steps) and not spend.spent_all:
        path: list[tuple[float, Collector]] = []
        spend.step, deepest = 0, []
        if walk(depth, collector, path):
            starts.update(zip(steps[depth:], (start for start, _ in path), strict=True))
            collector = path[-1][1]  # depth < len(steps): one call at least
            depth = len(steps)
            break
        # The longest run of reproduced steps, then the closest cut for the next, then on.
        for start, trial in deepest:
            starts[steps[depth]], collector = start, trial
            depth += 1
        if spend.spent_all:
            continue  # cut short, not shown unreproducible: placed as the bound says above
        step = steps[depth]
        starts[step], collector = _closest_cut(
            collector,
            step,
            target_groups,
            kept_by_step.get(step),
            lookahead,
            final=step == final_rollout_id,
            around=timed.get(step),
        )
        notes.append(
            f"call {step}: no placement of the calls reproduces this step's dump and metrics "
            "after the steps before it; placed where it comes closest"
        )
        placed.add(step)
        depth += 1
    # the search's bound spent: the steps left at their closest cuts, unsearched
    collector = _place_unsearched(
        collector, steps[depth:], starts, notes, spend.most, target_groups, kept_by_step,
        lookahead, final_rollout_id, timed,
    )  # fmt: skip
    placed.update(steps[depth:])
    return starts, notes, collector


Replayed = tuple[float, Collector, list[Attempt]]


@dataclass
class _Budget:
    """The calls a search may replay: ``per_step`` from each step it restarts at, ``most``
    in all."""

    per_step: int
    most: int
    step: int = 0
    spent: int = 0

    @property
    def spent_all(self) -> bool:
        return self.spent >= self.most

    def calls(self, replays: Iterator[Replayed]) -> Iterator[Replayed]:
        """``replays`` counted, while the budget lasts (asked before each call is replayed)."""
        while self.step < self.per_step and not self.spent_all:
            if (replayed := next(replays, None)) is None:
                return
            self.step, self.spent = self.step + 1, self.spent + 1
            yield replayed


def _place_unsearched(
    collector: Collector, steps: list[int], starts: dict[int, float], notes: list[str], most: int,
    target_groups: int, kept_by_step: Mapping[int, set[str]], lookahead: int,
    final_rollout_id: int | None, timed: Mapping[int, float],
) -> Collector:  # fmt: skip
    """Each of ``steps`` (the search cut short after ``most`` calls) placed in turn at its
    closest cut (into ``starts``), unsearched, with a note."""
    for step in steps:
        starts[step], collector = _closest_cut(
            collector, step, target_groups, kept_by_step.get(step), lookahead,
            final=step == final_rollout_id, around=timed.get(step),
        )  # fmt: skip
    if steps:
        notes.append(
            f"the search of where the calls begin was cut short after {most:,} call "
            f"replays: {len(steps)} call(s) ({steps[0]} to {steps[-1]}) placed where each "
            "comes closest to its dump, unsearched"
        )
    return collector


def _discards_retried(trial: Collector, before: Collector, retried: set[str]) -> bool:
    """Whether the call threw away an attempt the run retried (a group thrown away is
    never retried: only one the collector took and found failed is)."""
    return any(
        trial.decisions[key].decision is Decision.DISCARDED_SURPLUS
        for key in retried
        if key in trial.decisions and key not in before.decisions
    )


def _call_replays(
    collector: Collector,
    step: int,
    target_groups: int,
    wanted: set[str] | None,
    lookahead: int,
    *,
    final: bool,
    expected: Mapping[int, float],
    latest: bool = False,
) -> Iterator[tuple[float, Collector, list[Attempt]]]:
    """One call replayed from ``collector`` at each of its :func:`_variants`, in turn:
    (start, the collector after it, the attempts it keeps); with ``latest``, the cuts of a
    call the log does not time latest first."""
    cuts = _candidate_starts(collector, wanted, lookahead, expected.get(step))
    if latest and step not in expected:
        cuts.reverse()
    ends: list[tuple[float, int]] = []
    variants = _variants(
        collector, cuts, ends, expected.get(step + 1), lookahead, per_cut=step not in expected
    )
    for start, variant in variants:
        trial = collector.clone()
        variant(trial)
        kept = trial.run_call(step, start, target_groups, final=final)
        if variant is _as_is:
            ends.append((start, trial.delivered))
        yield start, trial, kept


def _as_is(trial: Collector) -> None:
    """The variant of a call's replay that changes nothing."""


def _join(end: int, extra: int, trial: Collector) -> None:
    """The call's last poll, held up, also took the ``extra`` completions from ``end``."""
    for position in range(end, end + extra):
        if trial.poll_breaks(position - 1, position + 1) == (True,):
            trial.toggle_poll(position - 1)


def _split(position: int, trial: Collector) -> None:
    """Completions less than a tick apart reached two polls: one begins at ``position``."""
    trial.toggle_poll(position - 1)


def _swap(position: int, trial: Collector) -> None:
    """The completions at ``position`` and ``position + 1`` reached the queue the other way."""
    trial.move_ahead(position)


def _variants(
    collector: Collector,
    cuts: list[float],
    ends: list[tuple[float, int]],
    later: float | None,
    lookahead: int,
    per_cut: bool = False,
) -> Iterator[tuple[float, Callable[[Collector], None]]]:
    """The replays of one call to try, most likely first: each cut as the files order the
    completions (with ``per_cut``, a call no log line times, each followed by its split
    polls and swapped near-ties: an earlier start with a tie the other way is likelier
    than a later one); then, at each cut, the call's last poll held up (it took the next
    completions too, which the fully-async loop throws away: only those done before the
    next call started); then one poll of completions less than a tick apart split in two;
    then one pair of near-simultaneous completions the other way
    (:func:`may_precede`); then one completion queued late (:func:`late_targets`). ``ends`` receives (cut, completions delivered) of the first
    replays as they are tried."""
    order = collector.order
    for start in cuts:
        yield start, _as_is
        if per_cut and ends:  # a call no log line times: a tie at this cut before later cuts
            yield from _splits_at(collector, *ends[-1])
            yield from _swaps_at(collector, *ends[-1])
    for start, end in list(ends):
        for extra in range(1, lookahead + 1):
            last = end + extra - 1
            if end < 1 or last >= len(order):
                break
            if later is not None and order[last].completed_at >= later:
                break
            yield start, functools.partial(_join, end, extra)
    if per_cut:
        return
    for start, end in list(ends):
        yield from _splits_at(collector, start, end)
    for start, end in list(ends):
        yield from _swaps_at(collector, start, end)
    for start, end in list(ends):
        yield from _lates_at(collector, start, end)


def _lates_at(
    collector: Collector, start: float, end: int
) -> Iterator[tuple[float, Callable[[Collector], None]]]:
    """At one cut: one completion up to the call's reach queued late (:func:`late_targets`)."""
    for position in range(collector.delivered, min(end, len(collector.order))):
        for after, at, join in late_targets(collector, position, start, end + 1):
            move = functools.partial(Collector.move_late, position=position, after=after, at=at)
            yield start, functools.partial(move, join=join)


def _splits_at(
    collector: Collector, start: float, end: int
) -> Iterator[tuple[float, Callable[[Collector], None]]]:
    """At one cut: one poll of completions less than a tick apart split in two."""
    for position in range(collector.delivered + 1, min(end, len(collector.order))):
        if collector.poll_breaks(position - 1, position + 1) == (False,):
            yield start, functools.partial(_split, position)


def _swaps_at(
    collector: Collector, start: float, end: int
) -> Iterator[tuple[float, Callable[[Collector], None]]]:
    """At one cut: one pair of near-simultaneous completions the other way."""
    order = collector.order
    for position in range(collector.delivered, min(end + 1, len(order) - 1)):
        if may_precede(order[position + 1], order[position], collector.timing):
            yield start, functools.partial(_swap, position)


def _closest_cut(
    collector: Collector,
    step: int,
    target_groups: int,
    wanted: set[str] | None,
    lookahead: int,
    *,
    final: bool,
    around: float | None = None,
) -> tuple[float, Collector]:
    """The cut whose call keeps the most of the step's dump (and least else); earliest wins."""
    best: tuple[int, float, Collector] | None = None
    for start in _candidate_starts(collector, wanted, lookahead, around):
        trial = collector.clone()
        got = {
            s for a in trial.run_call(step, start, target_groups, final=final) for s in a.sessions
        }
        score = len(got & (wanted or set())) - len(got - (wanted or set()))
        if best is None or score > best[0]:
            best = (score, start, trial)
    if best is None:
        start = collector.last_fetch + 1e-6
        collector.run_call(step, start, target_groups, final=final)
        return start, collector
    return best[1], best[2]
