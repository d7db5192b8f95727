"""The order of near-simultaneous completions, searched with the run's own records as
constraints (docs/semantics.md §12.2): among the orders the files allow for completions
closer than they can order (:func:`~analysis.engine.run_loop.collector.may_precede`), those
whose replay gives each step's dump, metrics and logged drop order; the attempts decided
otherwise by another such order are order-ambiguous."""

from __future__ import annotations

import bisect
import functools
import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from analysis.engine.decisions import Decision
from analysis.engine.run_loop.collector import (
    Attempt,
    AttemptDecision,
    Collector,
    PollTiming,
    late_targets,
    may_precede,
)
from analysis.engine.run_loop.inference import matches_step


def _submission_ranks(attempts: list[Attempt]) -> list[int] | None:
    """Each attempt's rank in submission order, when the files tell it for all of them
    (async group ids, or draws of first attempts); None otherwise."""
    if all(a.async_group_id is not None for a in attempts):
        keys = [a.async_group_id or 0 for a in attempts]
    elif all(a.retry_count == 0 and a.draw is not None for a in attempts):
        keys = [a.draw or 0 for a in attempts]
    else:
        return None
    return [sorted(keys).index(key) for key in keys]


def _drops_agree(
    trial: Collector,
    rollout_id: int,
    before: int,
    logged: list[int] | None,
    times: list[float] | None = None,
) -> bool:
    """Whether the call's stale drops come in the order of the log's "dropping stale ...
    group N" lines: Dressage numbers groups in submission order, so the drops' ranks in
    submission order (where the files tell it) are the logged numbers' ranks; and at their
    times (``times``): a drop is logged no earlier than its poll's last completion was
    recorded, and one of the call's first poll right at its start (§12.2)."""
    if not logged:
        return True
    dropped = [
        trial.attempts[key]
        for key in itertools.islice(trial.decisions, before, None)
        if trial.decisions[key].decision is Decision.DROPPED_STALE
        and trial.decisions[key].rollout_id == rollout_id
    ]
    if len(dropped) != len(logged) or len(set(logged)) != len(logged):
        return True  # the counts are checked with the metrics; nothing to pair here
    ranks = _submission_ranks(dropped)
    if ranks is not None and ranks != [sorted(logged).index(n) for n in logged]:
        return False
    return (
        times is None
        or len(times) != len(dropped)
        or all(
            _logged_then(trial.decisions[a.attempt_id].polled, at, trial.timing)
            for a, at in zip(dropped, times, strict=True)
        )
    )


LOG_SLACK_S = 0.002
"""The log's times are to the millisecond (truncated)."""


def _logged_then(polled: tuple[float, bool] | None, at: float, timing: PollTiming) -> bool:
    """Whether a drop decided in a poll at ``polled`` may have been logged at ``at``: not
    before the poll's completions were recorded; within ``order_uncertainty_s`` of the call's
    start when it was the first poll (first-poll drops are logged within 2 ms of the start
    line in the runs built with Dressage's code)."""
    if polled is None:
        return True
    when, first = polled
    if at < when - LOG_SLACK_S:
        return False
    return not first or at <= when + timing.order_uncertainty_s


@dataclass(frozen=True)
class TieSearch:
    """Bounds of :func:`resolve_ties`."""

    frontier: int = 2
    """Completions past those the call delivers in the most likely order whose order a
    call's search varies (with those it delivers)."""
    swaps: int = 3
    """At most this many adjacent swaps of the most likely order per call."""
    candidates: int = 150
    """Orders tried per hypothesis and call."""
    hypotheses: int = 8
    """Hypotheses kept from one call to the next (the least reordered first)."""
    budget: int = 1_000
    """Attempts taken by the replayed calls, in all, per attempt of the run; past it, the
    files' order is kept."""
    unmatched: int = 3
    """Calls no order reproduces (a setting other than the run's, most likely) after
    which the files' order is kept."""
    wide: bool = False
    """Whether the moves include the less likely ones: a held-up tick queueing first a
    completion whose submission order the files do not tell, or joining two polls up to
    ``stall_s`` apart, and one completion queued late (:func:`late_targets`, up to
    ``late_s`` after its recorded end). The wider search of a call no other order
    reproduces has them."""


@dataclass
class _Hypothesis:
    collector: Collector
    swaps: int
    ambiguous: set[str]


@dataclass(frozen=True)
class TieResolution:
    """The replay whose order of near-simultaneous completions reproduces the run's dumps
    and metrics best, and the attempts decided otherwise by another order that also
    reproduces them (``ambiguous``)."""

    collector: Collector
    ambiguous: frozenset[str]
    notes: tuple[str, ...]


def _outcome(decision: AttemptDecision) -> tuple[Any, ...]:
    return (decision.decision, decision.rollout_id, decision.stage, decision.retried)


def differing(a: Collector, b: Collector, since: tuple[int, int] | None = None) -> set[str]:
    """The attempts ``a`` and ``b`` decide differently; with ``since`` (how many
    decisions each held before the call), among those decided since only."""
    keys: Iterable[str]
    if since is None:
        keys = a.decisions.keys() | b.decisions.keys()
    else:
        keys = set(itertools.islice(a.decisions, since[0], None))
        keys |= set(itertools.islice(b.decisions, since[1], None))
    found = set()
    for key in keys:
        x, y = a.decisions.get(key), b.decisions.get(key)
        if x is y:
            continue
        if x is None or y is None or _outcome(x) != _outcome(y):
            found.add(key)
    return found


def _may_toggle(collector: Collector, position: int, timing: PollTiming, wide: bool) -> bool:
    """Whether the poll boundary between the completions at ``position`` and the next
    may move: split or join when they are closer than the files can order; with ``wide``,
    join also when a held-up tick (``stall_s``) may have queued both at once."""
    earlier, later = collector.order[position], collector.order[position + 1]
    gap = abs(later.completed_at - earlier.completed_at)
    if gap < timing.order_uncertainty_s:
        return True
    apart = collector.poll[earlier.attempt_id] != collector.poll[later.attempt_id]
    return wide and apart and gap < timing.stall_s


def _reorderings(
    collector: Collector, reach: int, timing: PollTiming, bounds: TieSearch, start: float
) -> list[tuple[int, Collector]]:
    """The collector with its completions up to ``reach`` (and ``bounds.frontier`` more)
    changed by up to ``bounds.swaps`` moves the files allow (:func:`may_precede`): an
    adjacent swap, or a poll boundary moved between two completions closer than the
    files can order (or joined across a held-up tick); then, one per reordering and after
    the others of its level, a late move (:func:`late_targets`, past the call's ``start``
    too); the unchanged order first."""
    call_start, start = start, collector.delivered
    margin = timing.order_uncertainty_s  # not queued by the start: the files cannot tell
    end = min(len(collector.order), reach + bounds.frontier)

    def key(c: Collector) -> tuple[Any, ...]:
        window = c.order[start:end]
        late = tuple(c.late.get(a.attempt_id) for a in window)
        return tuple(a.attempt_id for a in window), c.poll_breaks(start, end), late

    found = [(0, collector)]
    seen = {key(collector)}
    level = [collector]
    for moves in range(1, bounds.swaps + 1):
        following: list[Collector] = []
        plain = [
            (base, functools.partial(move, position=position))
            for base in level
            for position in range(start, end - 1)
            for move in _plain_moves(base, position, timing, bounds.wide)
        ]
        late = [
            (base, functools.partial(Collector.move_late, position=p, after=q, at=at, join=join))
            for base in level
            if len(base.late) == len(collector.late)  # one late move per reordering
            for p in range(start, end)
            if bounds.wide or 0 <= call_start - base.order[p].completed_at < margin
            for q, at, join in late_targets(base, p, call_start, end - 1)
            if bounds.wide or at > call_start
        ]
        for base, move in plain + late:
            trial = base.clone()
            move(trial)
            if key(trial) in seen:
                continue
            seen.add(key(trial))
            found.append((moves, trial))
            following.append(trial)
            if len(found) >= bounds.candidates:
                return found
        level = following
    return found


def _plain_moves(base: Collector, position: int, timing: PollTiming, wide: bool) -> list[Any]:
    """The swap and poll-boundary moves the files allow at ``position``."""
    later, earlier = base.order[position + 1], base.order[position]
    variants: list[Any] = []
    if may_precede(later, earlier, timing, unknown_order=wide):
        variants.append(Collector.move_ahead)
    if _may_toggle(base, position, timing, wide):
        variants.append(Collector.toggle_poll)
    return variants


def _settle(
    trial: Collector,
    base: Collector,
    rank: Mapping[str, int],
    first: int,
    natural: Mapping[str, int],
) -> int:
    """Put the completions the call did not deliver back in the base order (a reordering
    nothing observed is no hypothesis); the moves of those it delivered (swaps and poll
    boundaries). Swaps are counted against ``natural``, the order the unchanged
    hypothesis delivers in (the first poll's own moves, :meth:`Collector._deliver`, are
    none), and passing a completion the call leaves undelivered is one too."""
    end = trial.delivered
    while end < len(trial.order) and (
        trial.order[end] is not base.order[end]
        or trial.poll[trial.order[end].attempt_id] != base.poll[base.order[end].attempt_id]
    ):
        end += 1
    tail = sorted(trial.order[trial.delivered : end], key=lambda a: rank[a.attempt_id])
    trial.order[trial.delivered : end] = tail
    for attempt in tail:
        trial.poll[attempt.attempt_id] = base.poll[attempt.attempt_id]
        if attempt.attempt_id in base.late:
            trial.late[attempt.attempt_id] = base.late[attempt.attempt_id]
        else:
            trial.late.pop(attempt.attempt_id, None)
    taken = {a.attempt_id for a in trial.order[first : trial.delivered]}
    late = LATE_MOVE_COST * sum(1 for k in trial.late.keys() - base.late.keys() if k in taken)
    delivered = [natural[a.attempt_id] for a in trial.order[first : trial.delivered]]
    swaps = sum(1 for i, x in enumerate(delivered) for y in delivered[i + 1 :] if y < x)
    passed = sorted(set(range(first, max(delivered, default=first))) - set(delivered))
    swaps += sum(bisect.bisect(passed, x) for x in delivered)
    breaks = trial.poll_breaks(first, trial.delivered)
    pairs = itertools.pairwise(trial.order[first : trial.delivered])
    base_breaks = tuple(base.poll[a.attempt_id] != base.poll[b.attempt_id] for a, b in pairs)
    return late + swaps + sum(x != y for x, y in zip(breaks, base_breaks, strict=True))


LATE_MOVE_COST = 2
"""What a late move (:func:`late_targets`) costs beside the swaps it makes: a hypothesis
with one ranks below those with plain swaps alone."""


def _advance(
    beam: list[_Hypothesis],
    rollout_id: int,
    start: float,
    target_groups: int,
    final: bool,
    step: tuple[set[str] | None, Mapping[str, Any] | None, list[int] | None, list[float] | None],
    timing: PollTiming,
    bounds: TieSearch,
    search: bool,
) -> tuple[list[_Hypothesis], bool, bool, int]:
    """One call over every hypothesis and reordering: the hypotheses that reproduce the
    step (merged by state), else the unchanged orders; whether any matched, whether the
    candidates were cut, how many calls were replayed."""
    matched: dict[tuple[Any, ...], _Hypothesis] = {}
    fallback: list[_Hypothesis] = []
    capped = False
    parents: dict[tuple[Any, ...], _Hypothesis] = {}
    work = 0
    for hypothesis in beam:
        rank = {a.attempt_id: i for i, a in enumerate(hypothesis.collector.order)}
        before = len(hypothesis.collector.decisions)
        natural = rank
        if search:
            probe = hypothesis.collector.clone()
            probe.run_call(rollout_id, start, target_groups, final=final)
            natural = {a.attempt_id: i for i, a in enumerate(probe.order)}
            orders = _reorderings(hypothesis.collector, probe.delivered, timing, bounds, start)
            taken = probe.delivered - hypothesis.collector.delivered
            work += (len(orders) + 1) * (taken + len(hypothesis.collector.queue) + 1)
        else:
            orders = [(0, hypothesis.collector)]
        capped = capped or len(orders) >= bounds.candidates
        for swaps, trial in orders:
            trial = trial.clone() if trial is hypothesis.collector else trial
            first = trial.delivered
            kept = trial.run_call(rollout_id, start, target_groups, final=final)
            if not search:  # the unchanged order only: its own, no moves
                natural = {a.attempt_id: i for i, a in enumerate(trial.order)}
            cost = hypothesis.swaps + _settle(trial, hypothesis.collector, rank, first, natural)
            if not (
                matches_step(trial, rollout_id, kept, step[0], step[1])
                and _drops_agree(trial, rollout_id, before, step[2], step[3])
            ):
                if swaps == 0:  # the order of the files
                    fallback.append(_Hypothesis(trial, cost, set(hypothesis.ambiguous)))
                continue
            state = trial.state_key()
            same = matched.setdefault(state, _Hypothesis(trial, cost, set(hypothesis.ambiguous)))
            parent = parents.setdefault(state, hypothesis)
            if same.collector is not trial:
                since = (before, before) if parent is hypothesis else None
                same.ambiguous |= hypothesis.ambiguous | differing(same.collector, trial, since)
                if cost < same.swaps:
                    same.collector, same.swaps = trial, cost
    if matched:
        return sorted(matched.values(), key=lambda h: h.swaps), True, capped, work
    return fallback, False, capped, work


def resolve_ties(
    collector: Collector,
    starts: Mapping[int, float],
    target_groups: int,
    final_rollout_id: int | None,
    kept_by_step: Mapping[int, set[str]],
    metrics: Mapping[int, Mapping[str, Any]],
    *,
    timing: PollTiming,
    bounds: TieSearch | None = None,
    dropped_by_step: Mapping[int, list[int]] | None = None,
    drop_times: Mapping[int, list[float]] | None = None,
) -> TieResolution:
    """Run the calls, choosing among the orders the files allow for near-simultaneous
    completions (:func:`may_precede`) those whose replay gives each step's dump and
    metrics (and the order and times of the log's stale drops, ``dropped_by_step``,
    ``drop_times``): a bounded beam
    over the calls, the least reordered hypothesis first.
    Hypotheses that leave the same state behind are merged, the attempts they decide
    differently marked ambiguous."""
    bounds = bounds or TieSearch()
    beam = [_Hypothesis(collector, 0, set())]
    notes: list[str] = []
    capped = False
    work, misses, limit = 0, 0, bounds.budget * len(collector.order)
    for rollout_id, start in sorted(starts.items()):
        final = rollout_id == final_rollout_id
        step = (
            kept_by_step.get(rollout_id),
            metrics.get(rollout_id),
            (dropped_by_step or {}).get(rollout_id),
            (drop_times or {}).get(rollout_id),
        )
        search = work < limit and misses < bounds.unmatched
        before = beam
        beam, matched, cut, done = _advance(
            before, rollout_id, start, target_groups, final, step, timing, bounds, search
        )
        work += done
        if not matched and search and bounds.swaps and work < limit:  # wider, the best two
            wider = replace(
                bounds, candidates=bounds.candidates * 4, swaps=bounds.swaps + 1, wide=True
            )
            retry = _advance(
                before[:2], rollout_id, start, target_groups, final, step, timing, wider, search
            )
            work += retry[3]
            if retry[1]:
                beam, matched, cut = retry[0], True, retry[2]
        misses += not matched
        if not matched and search:
            notes.append(
                f"call {rollout_id}: no order of near-simultaneous completions reproduces "
                "the recorded step; kept the order of the files"
            )
        capped = capped or cut or len(beam) > bounds.hypotheses or not search
        beam = beam[: bounds.hypotheses]
        if final:
            break
    best = beam[0]
    best.collector.finish(final_rollout_id)
    ambiguous = set(best.ambiguous)
    for other in beam[1:]:
        other.collector.finish(final_rollout_id)
        ambiguous |= other.ambiguous | differing(best.collector, other.collector)
    if capped:
        notes.append(
            "the search of near-simultaneous completions' orders was cut short (bounds: "
            f"{bounds.frontier} more completions, {bounds.swaps} moves, {bounds.candidates} "
            f"orders, {bounds.hypotheses} hypotheses per call, {bounds.budget:,} attempts "
            f"taken per attempt, {bounds.unmatched} unreproduced calls): other orders may "
            "also reproduce the run, and order_ambiguous may miss some"
        )
    return TieResolution(best.collector, frozenset(ambiguous), tuple(notes))
