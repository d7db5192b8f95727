"""The model of a Dressage run fitted to its own folder: what a what-if at another setting
draws the events the run's files do not hold from (docs/semantics.md §12.8).

The run's **workload** is replayed as it was: each attempt the run made (its draw and
retry count) keeps its trajectories' response tokens per turn and its failures. What the
run did not make (a later draw, a retry it did not need, the rest of a trajectory its M
stopped) is drawn from the run's own distributions. The **clocks** are fitted from the
files:

- time per token: the tokens a trajectory generated after its version changed within a
  turn, over the time from that version's weight update to its finish (median); without
  such a switch (every trajectory of an M=0 run stops at it), the 5% quantile of the same
  bound over single-version trajectories;
- groups in flight (``max_active_groups``): the median, over the attempts' finishes, of the
  attempts generating at that moment (each attempt from its finish back by its tokens'
  time);
- the trainer: per step, the time from a rollout call's start to the next weight update,
  less the update's pause when the trainer (not the call) was the last to finish; the
  pause is the shortest time from a call's return to the update after it.
"""

from __future__ import annotations

import bisect
import itertools
import statistics
from dataclasses import dataclass, field
from typing import Literal

import polars as pl

from analysis.engine.run_loop.checks import keep_versions_told
from analysis.engine.run_loop.sweep import own_max_preempts
from analysis.errors import ConfigError
from analysis.formats.dressage.run import RunLog

POLL_S = 0.01
"""Dressage's collector and worker loops sleep 10 ms."""
DEFAULT_RETRIES = 2
"""``DRESSAGE_ROLLOUT_MAX_RETRIES`` when the files do not bound it."""


@dataclass(frozen=True)
class TrajectoryWork:
    """One trajectory's work: response tokens per turn, and how it fails (None: it does
    not, ``backend_timeout`` before turn ``fail_turn``, ``agent_failed_state`` after its
    last turn). ``known`` is False when the tokens were drawn from the model."""

    turns: tuple[int, ...]
    fail_kind: str | None = None
    fail_turn: int = 0
    known: bool = True
    min_tokens: int = 0
    """For a trajectory the run's M stopped: the tokens it generated at least (its
    drawn length is at least this)."""
    segments: int = 1
    """Records (segments) it is written as (the run's; 1 when drawn)."""


@dataclass(frozen=True)
class RunModel:
    """What the simulation of a run's loop needs (see the module's docstring)."""

    loop: Literal["partial", "fully"]
    batch_groups: int
    samples_per_prompt: int
    calls: int
    max_retries: int
    keep_versions: int | None
    """The run's own K (its metrics), None when they do not tell."""
    max_preempts: int | None
    """The run's own M as its span rejections name it (None: off or never reached)."""
    token_time: float
    max_active_groups: int
    update_pause: float
    train_times: tuple[float, ...]
    """Trainer step r's time, r = 0 .. calls - 2 (the final step trains no update)."""
    workload: dict[tuple[int, int], tuple[TrajectoryWork, ...]] = field(repr=False)
    """(draw, retry count) -> the attempt's trajectories as the run made them."""
    turn_pool: tuple[tuple[int, ...], ...] = field(repr=False)
    """Every completed trajectory's turns: the lengths a drawn trajectory takes."""
    pool_weights: tuple[float, ...] = field(repr=False)
    """Cumulative draw weights of ``turn_pool``: a run's M stopped its long trajectories,
    so a completed one of ``x`` update periods of generation stands for 1 / P(it
    survived M), P = M + 1 - x between M and M + 1 updates (at least 5%)."""
    fail_rates: dict[str, float] = field(repr=False)
    """Per trajectory, the share failing other than by span (per kind)."""
    estimates: dict[str, str] = field(default_factory=dict)
    """How each clock was fitted (said in the outputs)."""


def _token_time(run: RunLog, updates: dict[int, float]) -> tuple[float, str]:
    rows = run.trajectories.filter(pl.col("completed"))
    tails = []
    for end, finished, tail in rows.select("end_version", "finished_at", "tail_tokens").iter_rows():
        if tail and end is not None and end.isdigit() and int(end) in updates:
            tails.append((finished - updates[int(end)]) / tail)
    tails = [t for t in tails if t > 0]
    if len(tails) >= 3:
        return statistics.median(tails), f"median of {len(tails)} mid-turn switches"
    bounds = sorted(
        (finished - updates[int(end)]) / tokens
        for end, finished, tokens, span in rows.select(
            "end_version", "finished_at", "response_tokens", "span"
        ).iter_rows()
        if tokens
        and span == 1
        and end is not None
        and end.isdigit()
        and int(end) in updates
        and finished > updates[int(end)]
    )
    if bounds:
        return bounds[len(bounds) // 20], f"5% quantile of {len(bounds)} single-version bounds"
    raise ConfigError(
        "cannot fit the run's time per token: no trajectory finished after a logged weight "
        "update (the log's 'weights updated' lines)"
    )


def _workload(
    run: RunLog, token_time: float, pause: float
) -> dict[tuple[int, int], tuple[TrajectoryWork, ...]]:
    """The run's attempts by (draw, retry count). A trajectory the run's M stopped keeps
    what the files say of it: it generated at least from its attempt's start (the
    earliest its completed siblings can have started) to its rejection."""
    trajectories = run.trajectories.join(
        run.attempts.select("attempt_id", "draw"), on="attempt_id", how="left"
    )
    starts: dict[str, float] = {}
    for attempt, finished, tokens, span in (
        trajectories.filter(pl.col("completed"))
        .select("attempt_id", "finished_at", "response_tokens", "span")
        .iter_rows()
    ):
        began = finished - (tokens or 0) * token_time - pause * max(0, (span or 1) - 1)
        starts[attempt] = min(starts.get(attempt, began), began)
    work: dict[tuple[int, int], list[TrajectoryWork]] = {}
    for attempt, draw, retry, completed, kind, turns, finished, span, segments in (
        trajectories.select(
            "attempt_id", "draw", "retry_count", "completed", "fail_kind", "turn_tokens",
            "finished_at", "span", "segments",
        ).iter_rows()
    ):  # fmt: skip
        if draw is None:
            continue
        if completed:
            item = TrajectoryWork(tuple(turns or ()), None, segments=max(1, segments or 1))
        elif kind == "span" or not kind:
            generated = 0
            if attempt in starts:
                busy = finished - starts[attempt] - pause * max(0, (span or 1) - 1)
                generated = max(0, int(busy / token_time))
            item = TrajectoryWork((), None, known=False, min_tokens=generated)
        else:
            item = TrajectoryWork((), kind if kind != "other" else "backend_timeout", known=False)
        work.setdefault((int(draw), int(retry)), []).append(item)
    return {key: tuple(items) for key, items in work.items()}


def _active_groups(run: RunLog, token_time: float, pause: float, final_return: float) -> int:
    """Groups in flight. Partial loop: the attempts finishing after the final call
    returned (the worker stops submitting then and drains the ones in flight). Fully
    loop (its worker runs on to the process's exit): the 90% quantile over the run of the
    attempts generating at once, each back from its finish by its tokens' time."""
    attempts = run.attempts
    if run.loop != "fully":
        after = int((attempts["completed_at"] > final_return + POLL_S).sum())
        if after:
            return after
    rows = run.trajectories.filter(pl.col("completed"))
    spans: dict[str, float] = {}
    for attempt, tokens, span in rows.select("attempt_id", "response_tokens", "span").iter_rows():
        length = (tokens or 0) * token_time + pause * max(0, (span or 1) - 1)
        spans[attempt] = max(spans.get(attempt, 0.0), length)
    if not spans:
        return 1
    typical = statistics.median(spans.values())
    intervals = [
        (end - spans.get(attempt, typical), end)
        for attempt, end in attempts.select("attempt_id", "completed_at").iter_rows()
        if end is not None
    ]
    low, high = min(s for s, _ in intervals), max(e for _, e in intervals)
    grid = [low + (high - low) * (i + 0.5) / 200 for i in range(10, 190)]
    counts = sorted(sum(1 for s, e in intervals if s <= t <= e) for t in grid)
    return max(1, counts[len(counts) * 9 // 10])


def _update_pause(run: RunLog) -> float:
    """The weight update's pause: the median quiet time (no trajectory finishing) before
    the updates' log lines (generation stops while the weights change)."""
    finishes = sorted(run.trajectories["finished_at"].drop_nulls().to_list())
    quiet = []
    for at, _ in run.weight_updates:
        i = bisect.bisect_left(finishes, at)
        if i:
            quiet.append(at - finishes[i - 1])
    return statistics.median(quiet) if quiet else 0.0


def _trainer(run: RunLog, calls: int, pause: float) -> tuple[tuple[float, ...], float, str]:
    """Per-step train time and the update pause, from call starts, weight updates and the
    finishes of the attempts each call kept."""
    updates = {r: at for at, r in run.weight_updates}
    starts = dict(run.calls.select("rollout_id", "started_at").iter_rows())
    kept_ids = run.kept.select("rollout_id", "trajectory_id").unique()
    finish = run.trajectories.select("trajectory_id", "finished_at")
    returns = dict(
        kept_ids.join(finish, on="trajectory_id")
        .group_by("rollout_id")
        .agg(pl.col("finished_at").max())
        .iter_rows()
    )
    for r in range(calls):  # the fully loop logs no call start: r + 2 starts at update r
        if r not in starts and r - 2 in updates:
            starts[r] = updates[r - 2]
    returned = {r: max(returns[r], starts.get(r, returns[r])) + POLL_S for r in returns}
    trained: dict[int, float] = {}
    bounds: list[float] = []
    margin = max(10 * POLL_S, pause / 2)
    for r in range(calls - 2):  # the final call's return waits for the worker's drain
        if r in updates and r + 1 in starts and r + 1 in returned:
            busy = updates[r] - pause - starts[r + 1]
            if updates[r] - pause - returned[r + 1] > margin:  # the trainer finished last
                trained[r] = busy
            else:
                bounds.append(returned[r + 1] - starts[r + 1])
    if trained:
        typical = statistics.median(trained.values())
        how = f"{len(trained)} steps the trainer finished last"
    elif bounds:
        typical = min(bounds)
        how = "the trainer never finished last: its step is at most the shortest call"
    else:
        raise ConfigError(
            "cannot fit the run's trainer: the log has no 'weights updated' lines to time it"
        )
    times = tuple(max(0.0, trained.get(r, typical)) for r in range(max(0, calls - 1)))
    return times, returned.get(calls - 1, max(returned.values(), default=0.0)), how


def _update_period(run: RunLog) -> float:
    """The median time between two weight updates (0 without two)."""
    times = sorted(at for at, _ in run.weight_updates)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    return statistics.median(gaps) if gaps else 0.0


def _survival_weight(periods: float, max_preempts: int | None) -> float:
    if max_preempts is None or periods <= max_preempts:
        return 1.0
    return 1.0 / max(0.05, max_preempts + 1 - periods)


def fit_run_model(run: RunLog) -> RunModel:
    """Fit :class:`RunModel` to a read run folder (see the module's docstring)."""
    if run.target_groups is None or run.samples_per_prompt is None:
        raise ConfigError("cannot fit a model of the run: its batch size or group size is unknown")
    calls = run.trainer_steps
    label_of = {r + 2: at for at, r in run.weight_updates}
    token_time, token_how = _token_time(run, label_of)
    pause = _update_pause(run)
    train_times, final_return, train_how = _trainer(run, calls, pause)
    workload = _workload(run, token_time, pause)
    pool = tuple(
        tuple(t) for t in run.trajectories.filter(pl.col("completed"))["turn_tokens"].to_list() if t
    )
    if not pool:
        raise ConfigError("cannot fit a model of the run: no completed trajectory has tokens")
    _, own_m = own_max_preempts(run)
    period = _update_period(run)
    weights = list(
        itertools.accumulate(
            _survival_weight(sum(turns) * token_time / period, own_m) if period else 1.0
            for turns in pool
        )
    )
    total = run.trajectories.height
    kinds = run.trajectories.filter(~pl.col("completed") & (pl.col("fail_kind") != "span"))
    fail_rates = {
        str(kind): count / total
        for kind, count in kinds.group_by("fail_kind").len().iter_rows()
        if kind is not None
    }
    limit = run.retry_limit
    return RunModel(
        loop="fully" if run.loop == "fully" else "partial",
        batch_groups=run.target_groups,
        samples_per_prompt=run.samples_per_prompt,
        calls=calls,
        max_retries=(
            limit.high if limit.high is not None else max(limit.low or 0, DEFAULT_RETRIES)
        ),
        keep_versions=keep_versions_told(run.metrics),
        max_preempts=own_m,
        token_time=token_time,
        max_active_groups=_active_groups(run, token_time, pause, final_return),
        update_pause=pause,
        train_times=train_times,
        workload=workload,
        turn_pool=pool,
        pool_weights=tuple(weights),
        fail_rates=fail_rates,
        estimates={"token_time": token_how, "train_times": train_how},
    )


__all__ = ["POLL_S", "RunModel", "TrajectoryWork", "fit_run_model"]
