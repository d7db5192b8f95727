"""What a simulated trajectory is written as: its segment records in slime's sample
shape with Dressage's metadata (token versions and spans, attempt ids, completion time,
log-probs under the drift model, a failed trajectory's remains)."""

from __future__ import annotations

import bisect
import hashlib
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from analysis.simulation.parameters import SimulationConfig


@dataclass
class Trajectory:
    """One simulated trajectory of a group, as the pipeline moves it and its records tell it."""

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
    """Completion time as written (Unix seconds; see the simulator's _Pipeline.stamp_group)."""

    @property
    def response_tokens(self) -> int:
        return sum(self.turns)


def _response_versions(
    trajectory: Trajectory, update_times: list[float], config: SimulationConfig
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


def group_records(
    members: list[Trajectory],
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
    trajectory: Trajectory, rng: random.Random, config: SimulationConfig
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
    trajectory: Trajectory,
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
