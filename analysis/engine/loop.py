"""Replay of Dressage's real collection loop over what a run left on disk.

Where ``docs/semantics.md`` §3 walks through groups one at a time, Dressage's collector
(``generate_rollout_partial_async_impl``) works poll by poll: each rollout call first takes
the whole backlog of completed attempts, later polls take what completed since; the
version tracker observes a whole poll before any of its attempts is decided, pending
groups are re-filtered once per poll, and what the call did not need goes back to the
worker's queue for the next call. :func:`replay_run` reproduces that loop from a
:class:`~analysis.formats.dressage.run.RunLog` and checks itself against the run's own dumps,
log lines and metrics.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from analysis.engine.decisions import LOOP_DECISIONS, Decision, Stage
from analysis.engine.loop_checks import output_frames, self_checks
from analysis.errors import ConfigError, MissingFieldError, setting
from analysis.formats.dressage.run import RunLog
from analysis.table.labels import late_older_note

TRAJECTORY_TABLE_COLUMNS = (
    "trajectory_id",
    "group_id",
    "decision",
    "stage",
    "batch",
    "version_gap",
    "span",
)
"""The columns of ``replay --trajectories``, for a log and a run folder alike."""

RUN_DECISION_COLUMNS = (
    "group_id",
    "decision",
    "stage",
    "batch",
    "version_gap",
    "decided_in",
    "fail_kind",
    "retried",
    "span_verdict",
    "leftover",
)
"""The columns of ``replay RUN --decisions``: one row per attempt, its gap that of its
stalest trajectory."""


@dataclass(frozen=True)
class PollTiming:
    """Timing of Dressage's 10 ms loops, in seconds (decisions do not depend on the exact
    values in the real runs; kept as settings for sensitivity studies)."""

    same_poll_s: float = 0.010
    """Completions closer than this were handed over in one worker tick: one poll."""
    tick_tie_s: float = 0.010
    """Completions closer than this are ordered by submission, as the worker puts them."""
    queue_delay_s: float = 0.0
    """Assumed delay from a group's last trajectory end to the worker's output queue."""


@dataclass(frozen=True)
class LoopReplay:
    """The replayed decisions, per trajectory and per attempt, and the self-check.

    ``checks`` has one row per (step, check): what the run's own files say (``expected``),
    what the replay gives (``replayed``) and whether they ``agree``.
    """

    trajectories: pl.DataFrame
    attempts: pl.DataFrame
    versions: tuple[str, ...]
    checks: pl.DataFrame
    call_starts: dict[int, float]
    warnings: tuple[str, ...] = ()

    keep_versions: int = 0

    def __repr__(self) -> str:
        groups = self.to_dict()["groups"]
        checks = self.to_dict()["checks"]
        return (
            f"LoopReplay(K={self.keep_versions}: {groups['kept']:,} of {groups['total']:,} "
            f"attempts kept; agrees with the run's files on {checks['agree']:,} of "
            f"{checks['total']:,} checks)"
        )

    def _repr_html_(self) -> str:
        """A notebook shows the attempts and their decisions."""
        return str(self.attempts._repr_html_())

    @property
    def consistent(self) -> bool:
        """Whether every self-check agrees with the run's files."""
        return bool(self.checks["agrees"].all()) if self.checks.height else True

    def to_dict(self) -> dict[str, Any]:
        """The figures of the replay, as ``replay --json`` prints them for a run folder."""
        kept = self.trajectories.filter(pl.col("decision") == Decision.KEPT)["version_gap"]
        attempts = self.attempts
        return {
            "model": "dressage-loop",
            "config": {"keep_versions": self.keep_versions},
            "groups": _counts(attempts),
            "trajectories": _counts(self.trajectories),
            "batches": {"emitted": len(self.call_starts)},
            "version_gap": {
                "min": kept.min(),
                "mean": kept.mean(),
                "max": kept.max(),
            },
            "versions_observed": len(self.versions),
            "versions": list(self.versions),
            "checks": {
                "total": self.checks.height,
                "agree": int(self.checks["agrees"].sum()) if self.checks.height else 0,
            },
            "notes": list(self.warnings),
        }

    def decision_table(self) -> pl.DataFrame:
        """One row per attempt (:data:`RUN_DECISION_COLUMNS`); ``version_gap`` is the
        largest gap of its trajectories (null when none has one)."""
        stalest = self.trajectories.group_by("group_id").agg(pl.col("version_gap").max())
        return self.attempts.join(stalest, on="group_id", how="left").select(RUN_DECISION_COLUMNS)

    def trajectory_table(self) -> pl.DataFrame:
        """One row per trajectory (:data:`TRAJECTORY_TABLE_COLUMNS`)."""
        return self.trajectories.select(TRAJECTORY_TABLE_COLUMNS)


@dataclass(slots=True, eq=False)
class _Attempt:
    attempt_id: str
    start_rollout_id: int | None
    retry_count: int
    completed_at: float
    fail_kind: str | None
    span_verdict: bool
    draw: int | None
    async_group_id: int | None
    sessions: tuple[str, ...]
    spans: tuple[int, ...]
    """Version spans of its completed trajectories (what ``staleness/version_span_*`` count)."""
    end_versions: tuple[tuple[str, str], ...]
    """(trajectory, end version) of its completed trajectories in sample order: what
    Dressage's tracker reads (failed trajectories are placeholders without versions)."""
    retry_of: _Attempt | None = None


@dataclass(slots=True)
class _Decision:
    decision: Decision
    rollout_id: int | None
    stage: Stage | None = None
    retried: bool | None = None
    gaps: dict[str, int | None] = field(default_factory=dict)
    leftover: str | None = None


class _Tracker:
    """Dressage's version tracker: labels in order of first observation, off when K = 0."""

    def __init__(self, keep_versions: int, versions: Iterable[str] = ()) -> None:
        self.keep_versions = keep_versions
        self.versions: list[str] = list(versions)
        self.index: dict[str, int] = {label: i for i, label in enumerate(self.versions)}

    def observe(self, attempt: _Attempt) -> list[str]:
        if not self.keep_versions:
            return []
        new = []
        for _, label in attempt.end_versions:
            if label not in self.index:
                self.index[label] = len(self.versions)
                self.versions.append(label)
                new.append(label)
        return new

    @property
    def current(self) -> int | None:
        return len(self.versions) - 1 if self.versions else None

    def is_stale(self, attempt: _Attempt) -> bool:
        if not self.keep_versions or not self.versions:
            return False
        cutoff = max(0, len(self.versions) - self.keep_versions)
        return any(self.index[label] < cutoff for _, label in attempt.end_versions)

    def gaps(self, attempt: _Attempt) -> dict[str, int | None]:
        current = self.current
        return {
            session: None
            if current is None or label not in self.index
            else current - self.index[label]
            for session, label in attempt.end_versions
        }


def _submission_bound(attempt: _Attempt, call_starts: Mapping[int, float]) -> float:
    """Earliest time the worker can have submitted an attempt: during its start rollout
    call (first attempts), or after the attempt it retries completed."""
    if attempt.retry_of is not None:
        return max(attempt.retry_of.completed_at, _submission_bound(attempt.retry_of, call_starts))
    if attempt.start_rollout_id is None:
        return float("-inf")
    return call_starts.get(attempt.start_rollout_id, float("-inf"))


def _submitted_before(a: _Attempt, b: _Attempt, call_starts: Mapping[int, float]) -> bool:
    if a.async_group_id is not None and b.async_group_id is not None:
        return a.async_group_id < b.async_group_id
    if a.retry_of is None and b.retry_of is None and a.draw is not None and b.draw is not None:
        return a.draw < b.draw  # fresh draws are submitted in draw order
    return (_submission_bound(a, call_starts), a.draw or 0) < (
        _submission_bound(b, call_starts),
        b.draw or 0,
    )


def completion_order(
    attempts: list[_Attempt], timing: PollTiming, call_starts: Mapping[int, float]
) -> list[_Attempt]:
    """Order in which attempts reach the worker's output queue: by completion time, and
    by submission among completions closer than one worker tick."""
    by_time = sorted(attempts, key=lambda a: a.completed_at)

    def compare(x: _Attempt, y: _Attempt) -> int:
        if _submitted_before(x, y, call_starts):
            return -1
        return 1 if _submitted_before(y, x, call_starts) else 0

    ordered: list[_Attempt] = []
    i = 0
    while i < len(by_time):
        j = i + 1
        while (
            j < len(by_time)
            and by_time[j].completed_at - by_time[j - 1].completed_at < timing.tick_tie_s
        ):
            j += 1
        ordered += sorted(by_time[i:j], key=functools.cmp_to_key(compare))
        i = j
    return ordered


def _chains(attempts: list[_Attempt], gap: float) -> dict[str, int]:
    """Each attempt's chain: completions less than ``gap`` apart, chained, share one."""
    chains: dict[str, int] = {}
    previous: float | None = None
    chain = -1
    for attempt in sorted(attempts, key=lambda a: a.completed_at):
        if previous is None or attempt.completed_at - previous >= gap:
            chain += 1
        chains[attempt.attempt_id] = chain
        previous = attempt.completed_at
    return chains


class _Collector:
    """The collector's state between rollout calls: the persistent tracker, the worker's
    output queue and how far completions have been delivered."""

    def __init__(
        self,
        order: list[_Attempt],
        *,
        keep_versions: int,
        max_retries: int,
        timing: PollTiming,
    ) -> None:
        self.order = order
        self.keep_versions, self.max_retries, self.timing = keep_versions, max_retries, timing
        self.tracker = _Tracker(keep_versions)
        self.queue: list[_Attempt] = []  # put-back leftovers first
        self.delivered = 0  # attempts of ``order`` already on the queue
        self.last_fetch = float("-inf")
        self.tie = _chains(order, timing.tick_tie_s)
        self.poll = _chains(order, timing.same_poll_s)
        self.decisions: dict[str, _Decision] = {}
        self.new_versions: dict[str, tuple[str, ...]] = {}
        self.current_after: dict[int, int | None] = {}

    def clone(self) -> _Collector:
        copy = _Collector(
            list(self.order),  # a copy: delivery may move an attempt within its tie
            keep_versions=self.keep_versions,
            max_retries=self.max_retries,
            timing=self.timing,
        )
        copy.tracker = _Tracker(self.keep_versions, self.tracker.versions)
        copy.queue, copy.delivered, copy.last_fetch = (
            list(self.queue),
            self.delivered,
            self.last_fetch,
        )
        copy.decisions, copy.current_after = dict(self.decisions), dict(self.current_after)
        copy.new_versions = dict(self.new_versions)
        return copy

    def _deliver(self, upto: float) -> None:
        """The first poll of a call: queue everything completed by ``upto``, in queue
        order; one submitted earlier but completed after ``upto`` (a near-tie ordered by
        submission) waits for a later poll without holding back the others."""
        while self.delivered < len(self.order):
            if self._ready(self.order[self.delivered], upto):
                self._queue_next()
                continue
            later = self._ready_in_tie(upto)
            if later is None:
                return
            self.order.insert(self.delivered, self.order.pop(later))

    def _ready(self, attempt: _Attempt, upto: float) -> bool:
        return attempt.completed_at + self.timing.queue_delay_s <= upto

    def _ready_in_tie(self, upto: float) -> int | None:
        """The position of an attempt of the next one's tie that completed by ``upto``."""
        tie = self.tie[self.order[self.delivered].attempt_id]
        for position in range(self.delivered + 1, len(self.order)):
            attempt = self.order[position]
            if self.tie[attempt.attempt_id] != tie:
                return None
            if self._ready(attempt, upto):
                return position
        return None

    def _deliver_next_poll(self) -> bool:
        """A later poll: the next completion, with every completion less than one worker
        tick from another of the poll (they share a tick; §12.2)."""
        if self.delivered >= len(self.order):
            return False
        poll = self.poll[self.order[self.delivered].attempt_id]
        self._queue_next()
        while (
            self.delivered < len(self.order)
            and self.poll[self.order[self.delivered].attempt_id] == poll
        ):
            self._queue_next()
        return True

    def _queue_next(self) -> None:
        attempt = self.order[self.delivered]
        self.queue.append(attempt)
        self.last_fetch = attempt.completed_at
        self.delivered += 1

    def _observe(
        self, chunk: list[_Attempt], pending: list[_Attempt], rollout_id: int
    ) -> list[_Attempt]:
        """Observe a whole poll, then drop the pending groups it made stale (once)."""
        advanced = False
        for attempt in chunk:
            new = self.tracker.observe(attempt)
            self.new_versions.setdefault(attempt.attempt_id, tuple(new))
            advanced = advanced or bool(new)
        if not (advanced and pending):
            return pending
        still = []
        for attempt in pending:
            if self.tracker.is_stale(attempt):
                self._decide(attempt, Decision.DROPPED_STALE, rollout_id, stage=Stage.PENDING)
            else:
                still.append(attempt)
        return still

    def _decide(
        self, attempt: _Attempt, decision: Decision, rollout_id: int | None, **facts: Any
    ) -> None:
        self.decisions[attempt.attempt_id] = _Decision(
            decision, rollout_id, gaps=self.tracker.gaps(attempt), **facts
        )

    def _take(self, attempt: _Attempt, pending: list[_Attempt], rollout_id: int) -> None:
        """Decide one fetched attempt, as the collector does in insertion order."""
        if attempt.fail_kind is not None:
            decision = Decision.REJECTED_SPAN if attempt.fail_kind == "span" else Decision.FAILED
            self._decide(
                attempt, decision, rollout_id, retried=attempt.retry_count < self.max_retries
            )
        elif self.tracker.is_stale(attempt):
            self._decide(attempt, Decision.DROPPED_STALE, rollout_id, stage=Stage.ARRIVAL)
        else:
            pending.append(attempt)

    def run_call(
        self, rollout_id: int, start: float, target_groups: int, *, final: bool
    ) -> list[_Attempt]:
        """One rollout call; returns the attempts it keeps (its batch)."""
        pending: list[_Attempt] = []
        fetched: list[_Attempt] = []  # the collector's completed-by-id dict, in order
        first = True
        while len(pending) < target_groups:
            if first:
                self._deliver(start)
                first = False
            elif not self.queue and not self._deliver_next_poll():
                break  # nothing more will ever complete
            chunk, self.queue = self.queue, []
            pending = self._observe(chunk, pending, rollout_id)
            fetched += chunk
            while fetched and len(pending) < target_groups:
                self._take(fetched.pop(0), pending, rollout_id)
        for attempt in pending:  # gaps as Dressage's metrics: after the call's last poll
            self._decide(attempt, Decision.KEPT, rollout_id)
        if final:
            for attempt in fetched:
                self._decide(
                    attempt, Decision.LEFTOVER, rollout_id, leftover="unconsumed_after_final"
                )
        else:
            self.queue = fetched + self.queue  # put back for the next call
        self.current_after[rollout_id] = self.tracker.current
        return pending

    def finish(self, final_rollout_id: int | None) -> None:
        """Everything never decided was still queued or running at the final drain."""
        for attempt in self.order:
            if attempt.attempt_id not in self.decisions:
                self._decide(attempt, Decision.LEFTOVER, final_rollout_id, leftover="drained")


# --------------------------------------------------------------------------- inputs


def _attempts_from(run: RunLog) -> list[_Attempt]:
    trajectories = run.trajectories.sort("attempt_id", "sample_position")
    sessions: dict[str, list[str]] = {}
    versions: dict[str, list[tuple[str, str]]] = {}
    spans: dict[str, list[int]] = {}
    for row in trajectories.iter_rows(named=True):
        sessions.setdefault(row["attempt_id"], []).append(row["trajectory_id"])
        if row["completed"] and row["span"]:
            spans.setdefault(row["attempt_id"], []).append(row["span"])
        if row["completed"] and row["end_version"] is not None:
            versions.setdefault(row["attempt_id"], []).append(
                (row["trajectory_id"], row["end_version"])
            )
    attempts = {
        row["attempt_id"]: _Attempt(
            attempt_id=row["attempt_id"],
            start_rollout_id=row["start_rollout_id"],
            retry_count=row["retry_count"],
            completed_at=row["completed_at"],
            fail_kind=row["fail_kind"],
            span_verdict=row["span_verdict"],
            draw=row["draw"],
            async_group_id=row["async_group_id"],
            sessions=tuple(sessions.get(row["attempt_id"], ())),
            spans=tuple(spans.get(row["attempt_id"], ())),
            end_versions=tuple(versions.get(row["attempt_id"], ())),
        )
        for row in run.attempts.iter_rows(named=True)
    }
    for row in run.attempts.iter_rows(named=True):
        if row["retry_of"] is not None:
            attempts[row["attempt_id"]].retry_of = attempts.get(row["retry_of"])
    return list(attempts.values())


def _kept_by_step(run: RunLog) -> dict[int, set[str]]:
    kept: dict[int, set[str]] = {}
    for step, session in run.kept.select("rollout_id", "trajectory_id").iter_rows():
        kept.setdefault(step, set()).add(session)
    return kept


def _metrics_by_step(run: RunLog) -> dict[int, dict[str, Any]]:
    if not run.metrics.height:
        return {}
    return {int(row["rollout_id"]): row for row in run.metrics.iter_rows(named=True)}


def _check_settings(keep_versions: int, max_retries: int) -> None:
    for name, value in (("keep_versions", keep_versions), ("max_retries", max_retries)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(
                f"require `{name}` to be an integer >= 0 (found {value!r}); "
                "pass " + setting(name) + " as Dressage was run with"
            )


# --------------------------------------------------------------------------- replay


def replay_run(
    run: RunLog,
    *,
    keep_versions: int,
    max_retries: int = 2,
    timing: PollTiming | None = None,
) -> LoopReplay:
    """Replay Dressage's collector loop over a run, at staleness setting ``keep_versions``
    (K; 0 = off) and ``max_retries`` (``DRESSAGE_ROLLOUT_MAX_RETRIES``).

    Rollout calls start at the log's "starting ... rollout_id=r" times; without a log
    they are inferred from the dumps and metrics (:func:`infer_call_starts`).
    """
    _check_settings(keep_versions, max_retries)
    timing = timing or PollTiming()
    warnings = list(run.warnings)
    if run.target_groups is None:
        raise MissingFieldError(
            f"{run.root}: the batch size (target groups per step) is found in none of: "
            "dressage_log.txt ('starting Dressage partial async rollout' lines), the metrics "
            "(dressage/partial_rollout_target_groups), a step's dump (rollout_data/*.pt or "
            "rollouts.jsonl); put one of them, as the run wrote it, in the run folder"
        )
    attempts = _attempts_from(run)
    kept_by_step, metrics = _kept_by_step(run), _metrics_by_step(run)
    final = run.final_rollout_id
    if final is None:
        steps = set(kept_by_step) | set(metrics)
        final = max(steps) if steps else None
        if final is not None:
            where = (
                "no final-call line in dressage_log.txt"
                if "dressage_log.txt" in run.sources
                else "no dressage_log.txt"
            )
            warnings.append(
                f"{where}: took step {final} (the last of the dumps and metrics) as the last call"
            )
    starts = (
        dict(run.calls.select("rollout_id", "started_at").iter_rows()) if run.calls.height else {}
    )
    if not starts:
        if not kept_by_step and not metrics:
            raise MissingFieldError(
                f"{run.root}: no dressage_log.txt, no dumps and no metrics: the rollout calls "
                "cannot be placed among the completions; keep dressage_log.txt"
            )
        from analysis.engine.loop_inference import infer_call_starts

        starts, notes = infer_call_starts(
            attempts,
            run.target_groups,
            final,
            kept_by_step,
            metrics,
            keep_versions=keep_versions,
            max_retries=max_retries,
            timing=timing,
        )
        warnings += notes
    collector = _Collector(
        completion_order(attempts, timing, starts),
        keep_versions=keep_versions,
        max_retries=max_retries,
        timing=timing,
    )
    for rollout_id, start in sorted(starts.items()):
        collector.run_call(rollout_id, start, run.target_groups, final=rollout_id == final)
        if rollout_id == final:
            break
    collector.finish(final)
    batches = {rollout_id: i for i, rollout_id in enumerate(sorted(starts))}
    trajectories, attempt_rows = output_frames(run, attempts, collector, batches)
    checks = self_checks(run, attempts, collector, starts, kept_by_step, metrics)
    late = late_older_note(collector.tracker.versions, keep_versions)
    if late is not None:
        warnings.append(late)
    return LoopReplay(
        trajectories=trajectories,
        attempts=attempt_rows,
        versions=tuple(collector.tracker.versions),
        checks=checks,
        call_starts=starts,
        warnings=tuple(warnings),
        keep_versions=keep_versions,
    )


def _counts(frame: pl.DataFrame) -> dict[str, int]:
    """How many rows have each decision (all five, zeros included), and stale drops by stage."""
    counts = dict.fromkeys(LOOP_DECISIONS, 0)
    counts.update(frame.group_by("decision").len().iter_rows())
    # Both stages, zeros included, in one order: value_counts' order is not fixed, and a
    # stage without drops left its key out (the JSON's shape changed from run to run).
    stale = frame.filter(pl.col("decision") == Decision.DROPPED_STALE)["stage"].to_list()
    for stage in Stage:
        counts[f"{Decision.DROPPED_STALE}_{stage}"] = stale.count(stage.value)
    return {"total": frame.height, **counts}


# --------------------------------------------------------------------------- outputs


__all__ = [
    "RUN_DECISION_COLUMNS",
    "TRAJECTORY_TABLE_COLUMNS",
    "LoopReplay",
    "PollTiming",
    "replay_run",
]
