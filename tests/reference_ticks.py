"""Slow, obviously-correct reference model of how Dressage's partial-async worker hands
completed groups to its collector, transcribed from ``continuous_worker_loop``,
``_put_completed`` and ``get_completed_groups`` (docs/semantics.md §12.2):

- the worker loops: it looks at its running tasks in the order it submitted them (the
  insertion order of its ``active`` dict), puts every finished one on the output queue in
  that order, submits new groups, then sleeps 10 ms; a tick can be held up (the worker
  shares the process), and then every group done meanwhile is queued at that tick;
- a group's task is done a little after its last trajectory's recorded end (the time in
  its files): the reward and the gather run after it;
- the collector's poll takes everything on the queue.

It exists only to check :func:`analysis.engine.run_loop.collector.queue_order` against it
(``tests/analysis/test_ticks.py``): the queue order must be one the engine's hypotheses
allow.

Examples
--------
>>> groups = [RefGroup(0, done=0.0123), RefGroup(1, done=0.0101), RefGroup(2, done=0.0251)]
>>> [g.submission for g in queue_order_reference(groups, ticks=[0.0, 0.02, 0.03])]
[0, 1, 2]
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class RefGroup:
    submission: int
    """Its rank in submission order (Dressage's async group id)."""
    done: float
    """When its task finished."""


def queue_order_reference(groups: list[RefGroup], ticks: list[float]) -> list[RefGroup]:
    """The order the worker's ticks (their times, increasing) put the groups on the queue;
    a group not done by the last tick is never queued."""
    active = sorted(groups, key=lambda g: g.submission)  # the dict's insertion order
    queue: list[RefGroup] = []
    for tick in ticks:
        finished = [g for g in active if g.done <= tick]
        for group in finished:
            active.remove(group)
            queue.append(group)
    return queue


def tick_times(first: float, count: int, period: float, stalls: dict[int, float]) -> list[float]:
    """``count`` worker ticks from ``first``, ``period`` apart; tick k held up by
    ``stalls[k]`` seconds (later ticks follow it)."""
    ticks = []
    now = first
    for k in range(count):
        now += stalls.get(k, 0.0)
        ticks.append(now)
        now += period
    return ticks
