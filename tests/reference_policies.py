"""Slow, obviously-correct reference models of the other systems' batch-assembly rules,
transcribed from docs/semantics.md §13 and the systems' source, and of the token-weighted
figures of §10.6.

One plain loop per system over the groups of ``tests.reference`` (same record reading,
same trajectory versions), so that ``analysis.rules.policies`` can be checked against them in
``tests/analysis/test_policies.py``. Each loop is written from its system's rule, not
from the engine's shared loop: that they agree is what the differential tests check.

Versions are counted as the systems count them: in version numbers when every observed
version is a whole number (prime-rl's ``policy.start``, NeMo-RL's ``start_weight_version``
and the trainer's step are integers), else in positions of observation order (§13.1). The
clock is the system's step counter (``steps``: the log's first version plus the batches
emitted; ``logged``: the step a group's records carry), or the newest version (§13.2).
"""

from __future__ import annotations

import re
from typing import Any

from tests.reference import (
    Group,
    Record,
    ReferenceResult,
    _summary,
    group_records,
    real_label,
)

WHOLE_NUMBER = re.compile(r"0|[1-9][0-9]{0,17}")


def number(label: str) -> int | None:
    """A label that is a whole number written plainly (``"3"``; not ``"03"`` or ``"-2"``)."""
    return int(label) if WHOLE_NUMBER.fullmatch(label) else None


class _Log:
    """What every rule reads: groups in arrival order, the observed versions, each
    group's start and the clock readings (§13.1, §13.2, §3.1)."""

    def __init__(
        self, records: list[Record], *, clock: str = "versions", own_log: bool = False,
        step_offset: int = 0,
    ) -> None:  # fmt: skip
        self.groups = group_records(records)
        self.versions: list[str] = []
        self.now_after: list[int] = []
        for group in self.groups:
            for _, version in group.trajectory_versions():
                if version not in self.versions:
                    self.versions.append(version)
            self.now_after.append(len(self.versions) - 1)
        self.numbered = bool(self.versions) and all(number(v) is not None for v in self.versions)
        self.start = [self._start(group) for group in self.groups]
        # The newest version once each group is observed: the largest number seen so far,
        # or the index of the last version observed.
        self.newest: list[int] = []
        largest = -1
        for number_of_group, group in enumerate(self.groups):
            if self.numbered:
                for _, version in group.trajectory_versions():
                    largest = max(largest, int(version))
                self.newest.append(largest)
            else:
                self.newest.append(self.now_after[number_of_group])
        starts = [s for s in self.start if s is not None]
        self.base = min(starts) if starts else 0
        self.steps: list[int | None] = []
        for group in self.groups:
            told = [r.trainer_step for r in group.records if r.trainer_step is not None]
            self.steps.append(max(told) - step_offset if told else None)
        logged_here = self.numbered and all(step is not None for step in self.steps)
        if clock == "own":
            clock = "logged" if own_log and logged_here else "steps"
        self.clock = clock
        self.decisions: dict[str, dict[str, Any]] = {}
        self.kept_gaps: list[int] = []
        self.current: dict[str, int] = {}
        self.batch_count = 0
        self.last_partial = False

    def _start(self, group: Group) -> int | None:
        """Stalest of the trajectory versions and of the token labels: by number when the
        versions are numbers (a token label that is a number counts, observed or not),
        else by index (a token label counts only when it is an observed version)."""
        labels = [v for _, v in group.trajectory_versions()]
        for record in group.records:
            for value in record.token_versions or []:
                label = real_label(value)
                if label is not None:
                    labels.append(label)
        if self.numbered:
            candidates = [n for label in labels if (n := number(label)) is not None]
        else:
            candidates = [self.versions.index(v) for v in labels if v in self.versions]
        return min(candidates) if candidates else None

    def start_label(self, number_of_group: int) -> str | None:
        start = self.start[number_of_group]
        if start is None:
            return None
        return str(start) if self.numbered else self.versions[start]

    def first_reading(self) -> int | None:
        """The clock before any group: the steps clock starts at the log's first version."""
        return self.base if self.clock == "steps" else None

    def reading(self, number_of_group: int) -> int | None:
        """What the clock reads when the group arrives (None: it does not move then)."""
        if self.clock == "versions":
            return self.newest[number_of_group]
        if self.clock == "logged":
            return self.steps[number_of_group]
        return None

    def after_batch(self) -> int | None:
        """What the clock reads after a batch is emitted (the steps clock only)."""
        return self.base + self.batch_count if self.clock == "steps" else None

    def stalest_end(self, group: Group) -> int | None:
        indices = [self.versions.index(v) for _, v in group.trajectory_versions()]
        return min(indices) if indices else None

    def decide(
        self, number: int, decision: str, stage: str | None, now: int, batch: int | None = None
    ) -> None:
        group = self.groups[number]
        index = self.stalest_end(group)
        self.current[group.group_id] = now
        self.decisions[group.group_id] = {
            "group_id": group.group_id,
            "decision": decision,
            "stage": stage,
            "batch": batch,
            "version_index": index,
            "version_gap": None if index is None else now - index,
        }

    def emit(self, members: list[int], now: int) -> None:
        for number in members:
            self.decide(number, "kept", None, now, self.batch_count)
            for _, version in self.groups[number].trajectory_versions():
                self.kept_gaps.append(now - self.versions.index(version))
        self.batch_count += 1

    def lag(self, number: int, clock: int | None) -> int | None:
        """Clock minus start; None when either is unknown (never stale)."""
        start = self.start[number]
        return None if start is None or clock is None else clock - start

    def result(self, batch_groups: int) -> ReferenceResult:
        summary = _summary(
            self.groups,
            self.decisions,
            versions=self.versions,
            kept_gaps=self.kept_gaps,
            batch_count=self.batch_count,
            last_partial=self.last_partial,
            config={"batch_groups": batch_groups},
        )
        return ReferenceResult(
            decisions=[self.decisions[g.group_id] for g in self.groups], summary=summary
        )


def too_stale(lag: int | None, bound: int) -> bool:
    return lag is not None and lag > bound


def _newer(reading: int | None, clock: int | None) -> bool:
    return reading is not None and (clock is None or reading > clock)


def prime_rl_reference(
    records: list[Record],
    *,
    max_off_policy_steps: int,
    batch_groups: int,
    clock: str = "own",
    **clock_args: Any,
) -> ReferenceResult:
    """prime-rl (``train_sink.py`` _drop_stale, ``utils.py`` min_fresh_version): keep iff
    (step - 1) - start <= M; in-flight cancel = drop on arrival; the queue is swept
    whenever ``progress.step`` has advanced; a full queue ships as a batch and advances
    the step by one. ``clock_args``: ``own_log`` (the log is prime-rl's own, so
    ``clock=own`` reads its logged steps) and ``step_offset`` (step N trains N - offset)."""
    log = _Log(records, clock=clock, **clock_args)
    queue: list[int] = []
    trains = log.first_reading()  # (step - 1): the version the batch being collected trains
    for number, group in enumerate(log.groups):
        now = log.now_after[number]
        if _newer(log.reading(number), trains):
            trains = log.reading(number)
            for waiting in list(queue):
                if too_stale(log.lag(waiting, trains), max_off_policy_steps):
                    log.decide(waiting, "dropped_stale", "pending", now)
                    queue.remove(waiting)
        if group.is_failed():
            log.decide(number, "failed", None, now)
        elif too_stale(log.lag(number, trains), max_off_policy_steps):
            log.decide(number, "dropped_stale", "arrival", now)
        else:
            queue.append(number)
            if len(queue) == batch_groups:
                log.emit(queue, now)
                queue = []
                if log.clock == "steps":  # the queue shipped whole: nothing to sweep
                    trains = log.after_batch()
    if queue:
        log.emit(queue, log.now_after[-1])
        log.last_partial = True
    return log.result(batch_groups)


def verl_drop_reference(  # noqa: C901 (one plain loop, read against §13)
    records: list[Record],
    *,
    max_off_policy_threshold: int,
    batch_groups: int,
    clock: str = "own",
    submitted: list[int] | None = None,
    **clock_args: Any,
) -> ReferenceResult:
    """verl v1 drop (``replay_buffer.py`` ReplayBufferAsync._stale_terminal_keys, sample;
    ReplayBuffer._select_prompt_uids): at sample(g), evict finished groups with
    g - g0 + 1 > T, then take the batch_size oldest-submitted (smallest g0) if that many
    remain. The replay's g0 - 1 is the group's start; ``submitted`` gives verl's own g0
    per group instead (1-indexed steps, as verl's ``global_steps``), for the examples
    where the two differ."""
    log = _Log(records, clock=clock, **clock_args)
    if submitted is not None:
        log.start = [g0 - 1 for g0 in submitted]
    finished: list[int] = []
    g = log.first_reading()  # g - 1

    def sample(now: int, *, at_end: bool) -> None:
        nonlocal finished, g
        while finished and (len(finished) >= batch_groups or at_end):
            for waiting in list(finished):
                lag = log.lag(waiting, g)
                if lag is not None and lag + 1 > max_off_policy_threshold:
                    log.decide(waiting, "dropped_stale", "pending", now)
                    finished.remove(waiting)
            if not finished or (len(finished) < batch_groups and not at_end):
                return
            # A group without versions sorts first (verl counts a missing g0 as 0).
            ordered = sorted(
                finished, key=lambda n: (log.start[n] if log.start[n] is not None else -1, n)
            )
            chosen = ordered[:batch_groups]
            if at_end and len(finished) < batch_groups:
                log.last_partial = True
            log.emit(chosen, now)
            finished = [n for n in finished if n not in chosen]
            if log.clock == "steps":
                g = log.after_batch()

    for number, group in enumerate(log.groups):
        now = log.now_after[number]
        if _newer(log.reading(number), g):
            g = log.reading(number)
        if group.is_failed():
            log.decide(number, "failed", None, now)
            continue
        finished.append(number)
        sample(now, at_end=False)
    if log.groups:
        sample(log.now_after[-1], at_end=True)
    return log.result(batch_groups)


# One plain loop with its helpers inside, to be read against §13 top to bottom.
def nemo_windowed_reference(  # noqa: C901
    records: list[Record],
    *,
    max_staleness_versions: int,
    batch_groups: int,
    order: str = "fifo",
    clock: str = "own",
    **clock_args: Any,
) -> ReferenceResult:
    """NeMo-RL windowed (``staleness_sampler.py`` WindowedSampler.select,
    should_abort_inflight; BaseSampler.evict): abort in-flight groups with start < s - M
    (seen as a drop on arrival), evict ready groups below the window when the trainer
    version advances, select up to B ready groups inside the window, FIFO or freshest
    first. s is ``_trainer_version``: one more after each train step."""
    log = _Log(records, clock=clock, **clock_args)
    ready: list[int] = []
    s = log.first_reading()

    def below_window(number: int) -> bool:
        start = log.start[number]
        return start is not None and s is not None and start < s - max_staleness_versions

    def select(now: int, *, at_end: bool) -> None:
        nonlocal ready, s
        while ready and (len(ready) >= batch_groups or at_end):
            if order == "freshest":
                ordered = sorted(
                    ready,
                    key=lambda n: (-(start if (start := log.start[n]) is not None else -1), n),
                )
            else:
                ordered = list(ready)
            chosen = ordered[:batch_groups]
            if at_end and len(ready) < batch_groups:
                log.last_partial = True
            log.emit(chosen, now)
            ready = [n for n in ready if n not in chosen]
            if log.clock == "steps":
                s = log.after_batch()
                evict(now)

    def evict(now: int) -> None:
        nonlocal ready
        for waiting in list(ready):
            if below_window(waiting):
                log.decide(waiting, "dropped_stale", "pending", now)
                ready.remove(waiting)

    for number, group in enumerate(log.groups):
        now = log.now_after[number]
        if _newer(log.reading(number), s):
            s = log.reading(number)
            evict(now)
        if group.is_failed():
            log.decide(number, "failed", None, now)
        elif below_window(number):
            log.decide(number, "dropped_stale", "arrival", now)
        else:
            ready.append(number)
            select(now, at_end=False)
    if log.groups:
        select(log.now_after[-1], at_end=True)
    return log.result(batch_groups)


def start_indices(records: list[Record]) -> list[int | None]:
    """Each group's start version's index in observation order (§13.1), groups in arrival
    order; None when the start is not an observed version."""
    log = _Log(records)
    labels = [log.start_label(n) for n in range(len(log.groups))]
    return [None if v is None or v not in log.versions else log.versions.index(v) for v in labels]


def start_labels(records: list[Record]) -> list[str | None]:
    """Each group's start version as a label (§13.1), groups in arrival order."""
    log = _Log(records)
    return [log.start_label(n) for n in range(len(log.groups))]


def token_weighted_reference(
    records: list[Record], decisions: list[dict[str, Any]], *, max_preempts: int | None = None
) -> dict[str, float | None]:
    """§10.6 from a replay's decisions: each kept versioned trajectory's gap (current index at
    its batch - index of its own version) and each checked trajectory's span, weighted by the
    response tokens of its records."""
    groups = group_records(records)
    if any(r.response_tokens is None for g in groups for r in g.records):
        return dict.fromkeys(
            ("version_gap_mean", "version_span_mean_kept", "version_span_mean_all")
        )
    versions: list[str] = []
    by_id = {d["group_id"]: d for d in decisions}
    for group in groups:
        if by_id[group.group_id]["decision"] == "rejected_span":
            continue
        for _, version in group.trajectory_versions():
            if version not in versions:
                versions.append(version)
    gap_sum = gap_weight = 0
    spans: dict[str, list[int]] = {"kept": [0, 0], "all": [0, 0]}
    for group in groups:
        decision = by_id[group.group_id]
        kept = decision["decision"] == "kept"
        tokens = {
            t.key: sum(r.response_tokens or 0 for r in t.records) for t in group.trajectories()
        }
        if kept and decision["version_index"] is not None:
            current = decision["version_index"] + decision["version_gap"]
            for tid, version in group.trajectory_versions():
                weight = tokens["id:" + tid]
                gap_sum += weight * (current - versions.index(version))
                gap_weight += weight
        for trajectory in group.trajectories():
            span = trajectory.version_span()
            if span is None:
                continue
            for key in ("kept", "all") if kept else ("all",):
                spans[key][0] += tokens[trajectory.key] * span
                spans[key][1] += tokens[trajectory.key]
    return {
        "version_gap_mean": gap_sum / gap_weight if gap_weight else None,
        "version_span_mean_kept": spans["kept"][0] / spans["kept"][1] if spans["kept"][1] else None,
        "version_span_mean_all": spans["all"][0] / spans["all"][1] if spans["all"][1] else None,
    }
