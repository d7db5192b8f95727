"""A small discrete-event model of an async rollout/training pipeline that writes Dressage logs.

Workers keep up to ``max_active_groups`` GRPO groups in flight; a trainer consumes
``batch_groups`` completed groups (in completion order), trains for
``train_step_time`` and then publishes a new weight version. With partial rollout on,
an in-flight trajectory keeps its tokens and continues under the new version, so its
token versions change mid-trajectory; with it off, the trajectory restarts.
"""

from __future__ import annotations

import bisect
import hashlib
import heapq
import itertools
import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from analysis.engine import MAX_SETTING
from analysis.errors import ConfigError, setting
from analysis.rules.simulated_admission import admits

if TYPE_CHECKING:
    from analysis.rules.admission import AdmissionRule


@dataclass(frozen=True)
class SimulationConfig:
    """Parameters of the pipeline model; every figure is in simulated seconds or tokens.

    Log-prob drift model (off while ``log_prob_drift`` is 0, and then no record carries
    log-probs, so the output is exactly that of a run without the model). When on, each
    record gets ``rollout_log_probs``, one per response token, drawn as
    ``-expovariate(2.0)``, and the trainer-side ``log_probs``: the rollout value plus a
    deviation drawn from ``N(0, log_prob_noise + log_prob_drift * behind)`` for a
    trainable token and exactly 0 for a tool token (loss mask 0). ``behind`` is the
    trainer's version when it consumes the token minus the token's own version; the
    trainer's version is the record's trainer step (``dressage_return_rollout_id``),
    because step s trains once s steps have published versions 1..s over the initial
    version 0. Both lists are rounded to 4 decimals. The draws come from a random stream
    of their own (seeded from ``seed``), so turning the model on changes no other field.

    Prompts (``n_prompts``): a group draws its prompt (``metadata.instance_id``,
    ``dapo_math_<prompt>``) from a dataset of ``n_prompts``, round-robin, so prompts
    recur across epochs as in Dressage, whose artifacts identify a group attempt by
    (instance, start rollout, retry count) only. Two draws of one prompt starting in the
    same trainer step would share that key and merge, so a draw skips a prompt that has
    already started a group in the current step; the dataset stays ``n_prompts`` prompts
    while at most that many groups start in any one trainer step, and otherwise grows by
    one prompt for each group beyond it. Every simulated group has its own key.
    """

    n_groups: int = 64
    n_samples_per_prompt: int = 4
    max_active_groups: int = 16
    batch_groups: int = 4
    train_step_time: float = 20.0
    token_time: float = 0.01
    """Seconds per generated token of one trajectory (engines generate in parallel)."""
    median_response_tokens: int = 300
    tail_sigma: float = 0.9
    """Spread of the log-normal response length: larger means a heavier long tail."""
    max_response_tokens: int = 16_000
    prompt_tokens: int = 64
    multi_turn_fraction: float = 0.3
    max_turns: int = 4
    tool_tokens: int = 24
    multi_segment_fraction: float = 0.2
    partial_rollout: bool = True
    abort_fraction: float = 0.0
    """Groups whose first trajectory fails; its record is what Dressage keeps of a failed
    trajectory (status ``aborted``, the prompt only: no response tokens, no end version)."""
    log_prob_drift: float = 0.0
    """Growth of the trainer/rollout log-prob deviation per version behind; 0 turns it off."""
    log_prob_noise: float = 0.02
    """Spread of the deviation for a token of the trainer's own version (numerical noise)."""
    n_prompts: int = 16
    """Prompts in the dataset the groups are drawn from, round-robin (see above)."""
    output_queue_size: int = 1000
    """Completed groups the worker may hold for the trainer, as Dressage's
    ``DRESSAGE_ASYNC_OUTPUT_QUEUE_SIZE`` (default 1000): no new group starts while the
    queue holds 80% of it (Dressage's high watermark), so a slow trainer does not let
    completed groups pile up without bound."""
    admission: AdmissionRule | None = None
    """An admission rule (AReaL, SkyRL, NeMo-RL gated, verl fully-async; see
    ``analysis.rules.simulated_admission``) that holds a group back before it starts; None: none."""
    response_lengths: tuple[int, ...] = ()
    """When given, each trajectory's generated tokens are drawn uniformly from these
    (an empirical distribution, e.g. a real run's, see ``analysis.simulation.fit``) instead of the
    log-normal of ``median_response_tokens`` and ``tail_sigma``."""
    seed: int = 0

    def __post_init__(self) -> None:
        rules: list[tuple[tuple[str, ...], Callable[[Any], bool], str]] = [
            (("n_groups", "n_samples_per_prompt", "max_active_groups", "batch_groups",
              "median_response_tokens", "max_response_tokens", "max_turns", "n_prompts",
              "output_queue_size"),
             lambda v: v >= 1, ">= 1"),
            # As K, M and B: far beyond any run (a million groups is a 60 GB log already),
            # so that a slip of the keyboard does not start filling the disk.
            (("n_groups", "n_samples_per_prompt", "max_active_groups", "batch_groups",
              "median_response_tokens", "max_response_tokens", "max_turns", "prompt_tokens",
              "tool_tokens", "n_prompts"),
             lambda v: v <= MAX_SETTING, f"<= {MAX_SETTING:,}"),
            (("prompt_tokens", "tool_tokens"), lambda v: v >= 0, ">= 0"),
            (("train_step_time", "token_time", "tail_sigma"),
             lambda v: 0 < v < math.inf, "> 0 and finite"),
            (("multi_turn_fraction", "multi_segment_fraction", "abort_fraction"),
             lambda v: 0 <= v <= 1, "between 0 and 1"),
            (("log_prob_drift", "log_prob_noise"), lambda v: 0 <= v < math.inf, ">= 0 and finite"),
        ]  # fmt: skip
        for names, ok, rule in rules:
            for name in names:
                value = getattr(self, name)
                if not ok(value):
                    found = f"{value:,}" if type(value) is int else repr(value)
                    raise ConfigError("require " + setting(name) + f" {rule} (found {found})")
        if self.queue_watermark < self.batch_groups:
            raise ConfigError(
                "require " + setting("output_queue_size", self.output_queue_size) + " x 0.8 (the "
                "queue's high watermark) >= " + setting("batch_groups", self.batch_groups) + ": "
                "else the worker stops before the trainer has a batch"
            )
        if any(type(n) is not int or not 1 <= n <= MAX_SETTING for n in self.response_lengths):
            raise ConfigError(
                "require every one of " + setting("response_lengths", "...") + " to be a whole "
                f"number from 1 to {MAX_SETTING:,}"
            )

    @property
    def queue_watermark(self) -> int:
        """Completed groups at which no new group starts (80% of the queue, at least 1)."""
        return max(1, int(self.output_queue_size * 0.8))


@dataclass
class _Trajectory:
    group: int
    member: int
    turns: list[int]
    """Response tokens generated in each turn; tool tokens come between turns."""
    prompt: int = 0
    start_step: int = 0
    """Weight updates published when the group was submitted (its start rollout id)."""
    start: float = 0.0
    restarts: int = 0
    finished_at: float = 0.0
    stamp: float = 0.0
    """Completion time as written (Unix seconds; see _Pipeline.stamp_group)."""

    @property
    def response_tokens(self) -> int:
        return sum(self.turns)


def _duration(trajectory: _Trajectory, config: SimulationConfig) -> float:
    return trajectory.response_tokens * config.token_time


def _draw_trajectory(
    rng: random.Random, group: int, member: int, config: SimulationConfig
) -> _Trajectory:
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
    return _Trajectory(group, member, [b - a for a, b in itertools.pairwise(bounds)])


def simulate(
    config: SimulationConfig, *, update_times: list[float] | None = None
) -> Iterator[dict[str, Any]]:
    """Yield slime-style sample dicts in group completion order, deterministic for a seed.

    Each carries its group (``group_index``, the draw ordinal) and Dressage's identity
    of its attempt: ``metadata.instance_id`` (the prompt), ``metadata.session_id`` (=
    ``metadata.parent_traj_id``, a ``bbs-<uuid>``-like id derived from seed, group and
    member) and ``metadata.dressage_start_rollout_id`` (the trainer step in which the
    group was submitted); ``analysis.output.raw_logs`` writes them in Dressage's shapes.
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
        self.active: dict[int, list[_Trajectory]] = {}
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

    def stamp_group(self, members: list[_Trajectory], last: _Trajectory) -> None:
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
        yield from _group_records(
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

    def _restart(self, group: int, trajectory: _Trajectory, now: float) -> None:
        key = (group, trajectory.member)
        self.generation[key] += 1
        trajectory.start = now
        trajectory.restarts += 1
        self.push(now + _duration(trajectory, self.config), "done", (*key, self.generation[key]))


def _running(trajectory: _Trajectory, now: float, config: SimulationConfig) -> bool:
    return trajectory.start <= now < trajectory.start + _duration(trajectory, config)


def _response_versions(
    trajectory: _Trajectory, update_times: list[float], config: SimulationConfig
) -> list[tuple[str, int]]:
    """Runs (version label, tokens) of the response: token i is generated at
    start + (i+1) * token_time, under the last version published by then."""
    total = trajectory.response_tokens
    version = bisect.bisect_right(update_times, trajectory.start)
    runs: list[tuple[str, int]] = []
    done = 0
    for update in update_times[version:]:
        # Tokens generated before this update keep the version in force until it.
        before = min(
            total, max(done, math.ceil((update - trajectory.start) / config.token_time) - 1)
        )
        if before > done:
            runs.append((str(version), before - done))
        done = before
        if done >= total:
            break
        version += 1
    if total > done:
        runs.append((str(version), total - done))
    return runs


def _slice_runs(runs: list[tuple[str, int]], start: int, stop: int) -> list[tuple[str, int]]:
    """The runs covering response tokens [start, stop)."""
    out: list[tuple[str, int]] = []
    position = 0
    for label, count in runs:
        low, high = max(start, position), min(stop, position + count)
        if low < high:
            out.append((label, high - low))
        position += count
        if position >= stop:
            break
    return out


def _group_records(
    members: list[_Trajectory],
    update_times: list[float],
    *,
    trainer_step: int,
    config: SimulationConfig,
    rng: random.Random,
    log_prob_rng: random.Random | None = None,
) -> Iterator[dict[str, Any]]:
    aborted = rng.random() < config.abort_fraction
    for trajectory in members:
        versions = _response_versions(trajectory, update_times, config)
        segments = _split_segments(trajectory, rng, config)
        reward = round(rng.random() * (1.0 if trajectory.response_tokens < 2000 else 0.6), 4)
        if aborted and trajectory.member == 0:
            # What Dressage keeps of a failed trajectory, one record whatever its segments.
            segments = [range(len(trajectory.turns))]
        for segment_index, turn_range in enumerate(segments):
            record = _record(
                trajectory, segment_index, turn_range, versions, config,
                reward=reward, aborted=aborted and trajectory.member == 0,
                trainer_step=trainer_step,
            )  # fmt: skip
            if record["status"] == "aborted":
                _as_failed(record, config)
            if log_prob_rng is not None:
                _add_log_probs(record, trainer_step=trainer_step, config=config, rng=log_prob_rng)
            yield record


def _as_failed(record: dict[str, Any], config: SimulationConfig) -> None:
    """Make an aborted trajectory's record what Dressage keeps of a failed one (an
    ``error.json``): the prompt only, no response tokens and no end version, so that no
    format of the log observes a version or counts a span the trainer never saw."""
    prompt = config.prompt_tokens
    metadata = record["metadata"]
    record["tokens"] = record["tokens"][:prompt]
    record["response_length"] = 0
    record["loss_mask"] = []
    metadata["full_versions"] = ["-1"] * prompt
    metadata["version_spans"] = [{"start": 0, "end": prompt, "version": "-1"}] if prompt else []
    metadata["dressage_start_token_version"] = metadata["dressage_end_token_version"] = "-1"


def _add_log_probs(
    record: dict[str, Any], *, trainer_step: int, config: SimulationConfig, rng: random.Random
) -> None:
    """Give a record rollout and trainer log-probs under the drift model of SimulationConfig."""
    response_length = record["response_length"]
    labels = record["metadata"]["full_versions"][-response_length:] if response_length else []
    # One spread per version run, not per token: "-1" (tool) runs deviate by exactly 0.
    sigma = {
        label: config.log_prob_noise + config.log_prob_drift * max(0, trainer_step - int(label))
        for label in set(labels)
        if label != "-1"
    }
    # -expovariate(2.0) written out, and round(x * 1e4) / 1e4 for round(x, 4): the same
    # values (to the last bit) at a third of the cost of the library calls.
    uniform, gauss, log = rng.random, rng.gauss, math.log
    rollout = [round(log(1.0 - uniform()) * 5000) / 10000 for _ in range(response_length)]
    trainer = [
        round((value + gauss(0.0, sigma[label])) * 10000) / 10000 if trainable else value
        for value, label, trainable in zip(rollout, labels, record["loss_mask"], strict=True)
    ]
    record["rollout_log_probs"] = rollout
    record["log_probs"] = trainer


def _split_segments(
    trajectory: _Trajectory, rng: random.Random, config: SimulationConfig
) -> list[range]:
    """Turn ranges making up each segment record of a trajectory (most have one)."""
    turns = len(trajectory.turns)
    if turns > 1 and rng.random() < config.multi_segment_fraction:
        cut = rng.randint(1, turns - 1)
        return [range(0, cut), range(cut, turns)]
    return [range(0, turns)]


def _merge_runs(runs: list[tuple[str, int]]) -> list[tuple[int, int, str]]:
    """Spans (start, end, label) of consecutive runs, equal neighbours merged, empty ones dropped."""
    spans: list[tuple[int, int, str]] = []
    position = 0
    for label, count in runs:
        if count <= 0:
            continue
        if spans and spans[-1][2] == label:
            spans[-1] = (spans[-1][0], position + count, label)
        else:
            spans.append((position, position + count, label))
        position += count
    return spans


def _record(
    trajectory: _Trajectory,
    segment_index: int,
    turn_range: range,
    versions: list[tuple[str, int]],
    config: SimulationConfig,
    *,
    reward: float,
    aborted: bool,
    trainer_step: int,
) -> dict[str, Any]:
    first_token = sum(trajectory.turns[: turn_range.start])
    runs: list[tuple[str, int]] = [("-1", config.prompt_tokens)]
    loss_mask: list[int] = []
    position = first_token
    for turn in turn_range:
        if turn > turn_range.start:
            runs.append(("-1", config.tool_tokens))
            loss_mask += [0] * config.tool_tokens
        count = trajectory.turns[turn]
        runs += _slice_runs(versions, position, position + count)
        loss_mask += [1] * count
        position += count
    response_length = len(loss_mask)
    spans = _merge_runs(runs)
    labels: list[str] = []
    for _, end, label in spans:
        labels += [label] * (end - len(labels))
    # Every turn token is trainable and every turn has tokens, so the first and last
    # trainable labels are those of the segment's first and last generated tokens.
    start_version = _slice_runs(versions, first_token, first_token + 1)[0][0]
    end_version = _slice_runs(versions, position - 1, position)[0][0]
    token_base = (trajectory.group * 7919) % 30_000
    session = session_id(config.seed, trajectory.group, trajectory.member)
    return {
        "group_index": trajectory.group,
        "index": trajectory.group * config.n_samples_per_prompt + trajectory.member,
        "tokens": list(range(token_base, token_base + len(labels))),
        "response_length": response_length,
        "loss_mask": loss_mask,
        "reward": reward,
        "status": "aborted" if aborted else "completed",
        "metadata": {
            "parent_traj_id": session,
            "session_id": session,
            "instance_id": instance_id(trajectory.prompt),
            "dressage_start_rollout_id": trajectory.start_step,
            "segment_index": segment_index,
            "full_versions": labels,
            "version_spans": [{"start": s, "end": e, "version": v} for s, e, v in spans],
            "dressage_start_token_version": start_version,
            "dressage_end_token_version": end_version,
            "dressage_return_rollout_id": trainer_step,
            "restarts": trajectory.restarts,
            # When the trajectory finished, as Dressage's proxy stamps it (text of Unix
            # seconds; simulated time starts at SIMULATED_EPOCH).
            "proxy_extra_info": {"timestamp": repr(trajectory.stamp)},
        },
    }


def instance_id(prompt: int) -> str:
    """A prompt's instance id, in the style of Dressage's datasets (``dapo_math_00007``)."""
    return f"dapo_math_{prompt:05d}"


def session_id(seed: int, group: int, member: int) -> str:
    """A trajectory's session id, shaped like Dressage's ``bbs-<uuid4>`` but derived from
    the seed, group and member: the same run gets the same ids, and a group's sessions
    sort in member order (its second field), so artifact paths keep sample order."""
    digest = hashlib.blake2b(f"{seed}:{group}".encode(), digest_size=16).hexdigest()
    return (
        f"bbs-{digest[:8]}-{member:04x}-4{digest[8:11]}-{'89ab'[int(digest[11], 16) % 4]}"
        f"{digest[12:15]}-{digest[15:27]}"
    )


SIMULATED_EPOCH = 1.7e9
"""Unix time at which a simulation starts (2023-11-14), so times read as dates."""
