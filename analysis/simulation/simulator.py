"""A small discrete-event model of an async rollout/training pipeline that writes Dressage logs.

Workers keep up to ``max_active_groups`` GRPO groups in flight; a trainer consumes
``batch_groups`` completed groups (in completion order), trains for
``train_step_time`` and then publishes a new weight version. With partial rollout on,
an in-flight trajectory keeps its tokens and continues under the new version, so its
token versions change mid-trajectory; with it off, the trajectory restarts.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections.abc import Iterator
from typing import Any

from analysis.errors import ConfigError, setting
from analysis.rules.simulated_admission import admits
from analysis.simulation.parameters import SimulationConfig
from analysis.simulation.simulated_records import Trajectory, group_records


def _duration(trajectory: Trajectory, config: SimulationConfig) -> float:
    return trajectory.response_tokens * config.token_time


def _draw_trajectory(
    rng: random.Random, group: int, member: int, config: SimulationConfig
) -> Trajectory:
    if config.response_lengths:
        total = min(config.max_response_tokens, rng.choice(config.response_lengths))
    else:
        drawn = rng.lognormvariate(math.log(config.median_response_tokens), config.tail_sigma)
        total = int(max(1, min(config.max_response_tokens, max(8, drawn))))
    turns = 1
    if rng.random() < config.multi_turn_fraction:
        turns = rng.randint(2, max(2, config.max_turns))
    cuts = sorted(rng.sample(range(1, total), turns - 1)) if turns > 1 and total > turns else []
    bounds = [0, *cuts, total]
    return Trajectory(group, member, [b - a for a, b in itertools.pairwise(bounds)])


def simulate(
    config: SimulationConfig, *, update_times: list[float] | None = None
) -> Iterator[dict[str, Any]]:
    """Yield slime-style sample dicts in group completion order, deterministic for a seed.

    Each carries its group (``group_index``, the draw ordinal) and Dressage's identity
    of its attempt: ``metadata.instance_id`` (the prompt), ``metadata.session_id`` (=
    ``metadata.parent_traj_id``, a ``bbs-<uuid>``-like id derived from seed, group and
    member) and ``metadata.dressage_start_rollout_id`` (the trainer step in which the
    group was submitted); ``analysis.output.raw_artifacts`` writes them in Dressage's shapes.
    ``update_times``, when given, receives the simulated time of each weight update.
    """
    pipeline = _Pipeline(config)
    if update_times is not None:  # the caller reads the trainer's clock (analysis.simulation.fit)
        pipeline.update_times = update_times
    pipeline.fill(0.0)
    while pipeline.events:
        now, _, kind, payload = heapq.heappop(pipeline.events)
        if kind == "done":
            yield from pipeline.on_done(now, payload)
        elif kind == "trained":
            pipeline.on_trained(now)
    if pipeline.n_completed < config.n_groups:  # a safety net: the settings are checked
        raise ConfigError(
            f"the simulation stopped after {pipeline.n_completed:,} of {config.n_groups:,} "
            "groups: its settings hold generation back for good (an admission rule or the "
            "output queue below " + setting("batch_groups", config.batch_groups) + ")"
        )


class _Pipeline:
    """The discrete-event state of one simulation: groups generating, completed groups
    waiting for the trainer, and the trainer's steps (weight updates)."""

    def __init__(self, config: SimulationConfig) -> None:
        self.config = config
        self.rng = random.Random(config.seed)
        # Its own stream, so that the drift model leaves every other draw as it was.
        self.log_prob_rng = (
            random.Random(f"log-probs:{config.seed}") if config.log_prob_drift else None
        )
        self.update_times: list[float] = []  # update_times[v-1] is when version v was published
        self.events: list[tuple[float, int, str, Any]] = []
        self.order = 0
        self.started = 0
        self.active: dict[int, list[Trajectory]] = {}
        self.pending: dict[int, int] = {}  # group -> trajectories still running
        self.completed: list[int] = []  # groups waiting for the trainer, in completion order
        self.trainer_busy = False
        self.step = 0
        self.generation: dict[tuple[int, int], int] = {}
        self.n_completed = 0
        # Round-robin prompt draws (SimulationConfig: prompts); the set holds the prompts
        # that started a group in the current trainer step.
        self.prompt_pool = config.n_prompts
        self.prompt_cursor = 0
        self.prompts_in_step: set[int] = set()
        self.last_stamp = -math.inf
        self.verl_window = 0  # verl-async's count (analysis.rules.simulated_admission)

    def push(self, time: float, kind: str, payload: Any) -> None:
        heapq.heappush(self.events, (time, self.order, kind, payload))
        self.order += 1

    def start_group(self, now: float) -> None:
        config = self.config
        group = self.started
        self.started += 1
        members = [
            _draw_trajectory(self.rng, group, m, config) for m in range(config.n_samples_per_prompt)
        ]
        prompt = self.draw_prompt()
        for trajectory in members:
            trajectory.prompt, trajectory.start_step = prompt, self.step
        self.active[group] = members
        self.pending[group] = len(members)
        for trajectory in members:
            trajectory.start = now
            self.generation[(group, trajectory.member)] = 0
            self.push(now + _duration(trajectory, config), "done", (group, trajectory.member, 0))

    def stamp_group(self, members: list[Trajectory], last: Trajectory) -> None:
        """Give a completed group's trajectories their completion times as written: a
        group that completed at the same instant as the one before (or within the float
        resolution of Unix seconds) gets its last one a microsecond later, so that a
        reader ordering groups by completion time (artifacts) meets them in this order."""
        for trajectory in members:
            trajectory.stamp = SIMULATED_EPOCH + trajectory.finished_at
        if last.stamp <= self.last_stamp:
            last.stamp = self.last_stamp + 1e-6
        self.last_stamp = max(t.stamp for t in members)

    def draw_prompt(self) -> int:
        """The next prompt round-robin, unless it already started a group in this trainer
        step: draws go round the dataset in order, so then every prompt has, and a new one
        is added (two draws of a prompt in one step would share Dressage's attempt key)."""
        prompt = self.prompt_cursor % self.prompt_pool
        if prompt in self.prompts_in_step:
            prompt = self.prompt_pool
            self.prompt_pool += 1
        self.prompt_cursor = prompt + 1
        self.prompts_in_step.add(prompt)
        return prompt

    def maybe_train(self, now: float) -> None:
        batch_groups = self.config.batch_groups
        if not self.trainer_busy and len(self.completed) >= batch_groups:
            batch = self.completed[:batch_groups]
            del self.completed[:batch_groups]
            self.trainer_busy = True
            self.push(now + self.config.train_step_time, "trained", batch)
            self.fill(now)  # the queue shrank: a worker held back by it starts again

    def on_done(self, now: float, payload: tuple[int, int, int]) -> Iterator[dict[str, Any]]:
        """A trajectory finished; when it was its group's last, the group's records."""
        group, member, gen = payload
        if self.generation.get((group, member)) != gen:
            return  # superseded by a restart after a weight update
        self.active[group][member].finished_at = now
        self.pending[group] -= 1
        if self.pending[group]:
            return
        finished = self.active.pop(group)
        # Forgotten once done, so that memory stays flat however many groups are
        # simulated (a superseded "done" still in the queue finds no entry).
        del self.pending[group]
        for trajectory in finished:
            del self.generation[(group, trajectory.member)]
        self.completed.append(group)
        self.stamp_group(finished, finished[member])
        # The trainer takes completed groups in completion order, B at a time.
        yield from group_records(
            finished, self.update_times,
            trainer_step=self.n_completed // self.config.batch_groups, config=self.config,
            rng=self.rng, log_prob_rng=self.log_prob_rng,
        )  # fmt: skip
        self.n_completed += 1
        self.fill(now)
        self.maybe_train(now)

    def fill(self, now: float) -> None:
        """Start groups while fewer than max_active_groups are in flight, groups remain
        and the queue of completed groups is under the watermark."""
        config = self.config
        while (
            self.started < config.n_groups
            and len(self.active) < config.max_active_groups
            and len(self.completed) < config.queue_watermark
            and self.admits()
        ):
            self.start_group(now)
            self.verl_window += 1

    def admits(self) -> bool:
        """Whether the admission rule, if any, lets the next group start now."""
        admission = self.config.admission
        return admission is None or admits(
            admission, started=self.started, version=self.step, window=self.verl_window,
            batch_groups=self.config.batch_groups,
        )  # fmt: skip

    def on_trained(self, now: float) -> None:
        """A trainer step ended: a new version; without partial rollout, running
        trajectories start again."""
        self.step += 1
        self.update_times.append(now)
        self.prompts_in_step.clear()
        # verl's count restarts at the groups still running or waiting for the trainer
        self.verl_window = len(self.active) + len(self.completed)
        self.trainer_busy = False
        if not self.config.partial_rollout:
            for group, members in self.active.items():
                for trajectory in members:
                    if _running(trajectory, now, self.config):
                        self._restart(group, trajectory, now)
        self.maybe_train(now)
        self.fill(now)  # a new version may admit groups an admission rule held back

    def _restart(self, group: int, trajectory: Trajectory, now: float) -> None:
        key = (group, trajectory.member)
        self.generation[key] += 1
        trajectory.start = now
        trajectory.restarts += 1
        self.push(now + _duration(trajectory, self.config), "done", (*key, self.generation[key]))


def _running(trajectory: Trajectory, now: float, config: SimulationConfig) -> bool:
    return trajectory.start <= now < trajectory.start + _duration(trajectory, config)


SIMULATED_EPOCH = 1.7e9
"""Unix time at which a simulation starts (2023-11-14), so times read as dates."""
