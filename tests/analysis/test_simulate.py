"""The simulator: deterministic, Dressage-shaped records, and the what-ifs users rely on."""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

import analysis
from analysis.errors import ConfigError
from analysis.simulation.parameters import SimulationConfig
from analysis.simulation.simulator import simulate
from analysis.table.labels import derive_end_version, run_length_spans
from cli.main import app

BASE = SimulationConfig(
    n_groups=60,
    n_samples_per_prompt=4,
    max_active_groups=12,
    batch_groups=4,
    train_step_time=3.0,
    median_response_tokens=120,
    max_response_tokens=2000,
    prompt_tokens=16,
    multi_turn_fraction=0.5,
    multi_segment_fraction=0.5,
    seed=5,
)


def test_same_seed_same_log_other_seed_other_log() -> None:
    first = list(simulate(BASE))
    assert first == list(simulate(BASE))
    assert first != list(simulate(dataclasses.replace(BASE, seed=6)))


def test_records_carry_dressage_fields_with_their_types() -> None:
    for record in simulate(BASE):
        assert isinstance(record["group_index"], int)
        assert isinstance(record["index"], int)
        assert record["status"] in {"completed", "aborted"}
        assert isinstance(record["reward"], float)
        metadata = record["metadata"]
        assert metadata["parent_traj_id"] == metadata["session_id"]
        assert re.fullmatch(r"bbs-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}",
                            metadata["session_id"])  # fmt: skip
        assert re.fullmatch(r"dapo_math_\d{5}", metadata["instance_id"])
        assert isinstance(metadata["segment_index"], int)
        assert isinstance(metadata["dressage_return_rollout_id"], int)
        assert 0 <= metadata["dressage_start_rollout_id"] <= metadata["dressage_return_rollout_id"]
        labels = metadata["full_versions"]
        assert len(labels) == len(record["tokens"])
        assert len(record["loss_mask"]) == record["response_length"] <= len(labels)
        assert labels[: BASE.prompt_tokens] == ["-1"] * BASE.prompt_tokens
        assert all(isinstance(label, str) for label in labels)


def test_spans_are_the_run_length_form_and_end_versions_follow_the_loss_mask() -> None:
    for record in simulate(BASE):
        metadata = record["metadata"]
        spans = run_length_spans(metadata["full_versions"])
        assert [(s["start"], s["end"], s["version"]) for s in metadata["version_spans"]] == spans
        kwargs = {"response_length": record["response_length"], "loss_mask": record["loss_mask"]}
        assert derive_end_version(spans, **kwargs) == metadata["dressage_end_token_version"]
        trainable = [
            v
            for v, m in zip(
                metadata["full_versions"][-record["response_length"] :],
                record["loss_mask"],
                strict=True,
            )
            if m
        ]
        assert metadata["dressage_start_token_version"] == trainable[0]


def test_multi_segment_trajectories_and_tool_tokens_exist() -> None:
    records = list(simulate(BASE))
    assert any(r["metadata"]["segment_index"] == 1 for r in records)
    assert any(0 in r["loss_mask"] for r in records)


def test_written_in_completion_order_with_consecutive_trainer_steps() -> None:
    steps = [r["metadata"]["dressage_return_rollout_id"] for r in simulate(BASE)]
    assert steps == sorted(steps)
    groups_per_step = (
        pl.DataFrame({"step": steps, "group": [r["group_index"] for r in simulate(BASE)]})
        .group_by("step")
        .agg(pl.col("group").n_unique())["group"]
    )
    assert set(groups_per_step.to_list()) == {BASE.batch_groups}


def multi_version_share(config: SimulationConfig) -> float:
    table = analysis.records_to_table(list(simulate(config)))
    spans = analysis.prepare(table).trajectories["span"]
    return float((spans >= 2).mean())  # type: ignore[arg-type]


def test_faster_trainer_means_more_trajectories_spanning_versions() -> None:
    shares = [
        multi_version_share(dataclasses.replace(BASE, train_step_time=step, n_groups=80))
        for step in (12.0, 4.0, 1.0)
    ]
    assert shares[0] < shares[1] < shares[2]


def test_without_partial_rollout_no_trajectory_switches_version() -> None:
    config = dataclasses.replace(BASE, partial_rollout=False, train_step_time=1.0)
    assert multi_version_share(config) == 0.0
    restarts = [r["metadata"]["restarts"] for r in simulate(config)]
    assert max(restarts) > 0


def test_replay_of_simulated_log_shows_spans_rejections_and_stale_drops() -> None:
    config = dataclasses.replace(BASE, train_step_time=1.5, tail_sigma=1.2)
    table = analysis.records_to_table(list(simulate(config)))
    free = analysis.replay(table, analysis.ReplayConfig()).summary
    assert free.version_span["all"]["max"] > 1
    strict = analysis.replay(table, analysis.ReplayConfig(max_preempts=0)).summary
    assert (strict.counts["groups"]["rejected_span"] or 0) > 0
    stale = analysis.replay(table, analysis.ReplayConfig(keep_versions=1)).summary
    assert (stale.counts["groups"]["dropped_stale"] or 0) > 0


@pytest.mark.parametrize(
    "change",
    [
        {"n_groups": 0},
        {"train_step_time": 0.0},
        {"abort_fraction": 1.5},
        {"n_groups": 1_000_001},  # `simulate --groups 1000000000` started filling the disk
        {"max_response_tokens": 10**9},
        {"n_prompts": 0},
        {"output_queue_size": 0},
        {"output_queue_size": 4},  # a watermark of 3 < B = 4: the trainer would never train
        {"response_lengths": (10, 0)},
        {"response_lengths": (10, 2.5)},
    ],
)
def test_invalid_parameters_are_refused(change: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match="require"):
        dataclasses.replace(BASE, **change)


def decisions_by_trajectories(
    table: pl.DataFrame, config: analysis.ReplayConfig
) -> set[tuple[Any, ...]]:
    """A replay's decisions keyed by each group's set of trajectory ids, not its group id
    (artifacts carry no group id: their groups are attempts, docs/semantics.md §1.3)."""
    prepared = analysis.prepare(table)
    result = analysis.replay(prepared, config)
    members = prepared.trajectories.group_by("group_id").agg(pl.col("trajectory_id").sort())
    rows = result.decisions.join(members, on="group_id").drop("group_id")
    return {
        (tuple(row.pop("trajectory_id")), *sorted(row.items(), key=lambda item: item[0]))
        for row in rows.iter_rows(named=True)
    }


@pytest.mark.parametrize("log_format", ["jsonl", "parquet", "artifacts", "pt"])
def test_simulate_command_writes_each_format(tmp_path: Path, log_format: str) -> None:
    target = tmp_path / f"sim.{log_format}"
    args = ["simulate", "-o", str(target), "--format", log_format, "--groups", "20", "--seed", "4",
            "--abort-fraction", "0.2"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.stderr
    table = analysis.load_logs([target])
    assert table["group_id"].n_unique() == 20
    config = SimulationConfig(n_groups=20, seed=4, abort_fraction=0.2)
    reference = analysis.records_to_table(list(simulate(config)))
    if log_format != "artifacts":
        assert table.drop("source", "record").equals(reference.drop("source", "record"))
    for setting in (analysis.ReplayConfig(), analysis.ReplayConfig(keep_versions=1, max_preempts=0),
                    analysis.ReplayConfig(keep_versions=2, max_preempts=1)):  # fmt: skip
        assert decisions_by_trajectories(table, setting) == decisions_by_trajectories(
            reference, setting
        )


def _sample_config() -> SimulationConfig:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sample_data"))
    try:
        from generate import CONFIG
    finally:
        sys.path.pop(0)
    assert isinstance(CONFIG, SimulationConfig)
    return CONFIG


# The README's simulate examples, the sample, and a run that starts far more groups in one
# trainer step than there are prompts.
README_RUNS = {
    "what-if": SimulationConfig(n_groups=1000, n_samples_per_prompt=8, batch_groups=16,
                                max_active_groups=64, train_step_time=10, seed=1),
    "slow": SimulationConfig(n_groups=300, train_step_time=20, log_prob_drift=0.05, seed=1),
    "fast": SimulationConfig(n_groups=300, train_step_time=3, log_prob_drift=0.05, seed=1),
    "base": BASE,
    "busy": dataclasses.replace(BASE, n_prompts=3, max_active_groups=20, abort_fraction=0.3),
}  # fmt: skip


@pytest.mark.parametrize("name", [*README_RUNS, "sample"])
def test_every_group_has_its_own_attempt_key_and_prompts_recur(name: str) -> None:
    """Artifacts identify a group only by (instance, start rollout, retry count): two
    draws of one prompt submitted in one trainer step would be merged into one attempt."""
    config = _sample_config() if name == "sample" else README_RUNS[name]
    groups: dict[tuple[str, int], set[int]] = {}
    for record in simulate(config):
        metadata = record["metadata"]
        key = (metadata["instance_id"], metadata["dressage_start_rollout_id"])
        groups.setdefault(key, set()).add(record["group_index"])
    assert all(len(members) == 1 for members in groups.values())
    assert len(groups) == config.n_groups
    prompts = {instance for instance, _ in groups}
    assert len(prompts) < config.n_groups  # prompts are shared across epochs
    assert len(prompts) >= config.n_prompts


def test_prompts_are_drawn_round_robin_while_few_groups_start_per_step() -> None:
    config = dataclasses.replace(BASE, n_prompts=6, max_active_groups=2, train_step_time=0.05)
    first: dict[int, str] = {}
    for record in simulate(config):
        first.setdefault(record["group_index"], record["metadata"]["instance_id"])
    assert [first[g] for g in sorted(first)] == [
        f"dapo_math_{g % 6:05d}" for g in range(config.n_groups)
    ]


def test_simulate_options_take_decimals_and_refuse_what_is_not_a_number(tmp_path: Path) -> None:
    target = tmp_path / "sim.jsonl"
    # A whole number may be written as a decimal, as typer's own parser took it.
    args = ["simulate", "-o", str(target), "--groups", "6.0", "--train-step-time", "2.5"]
    drift = ["--log-prob-drift", "0.05", "--format", "JSONL"]  # any letter case
    assert CliRunner().invoke(app, [*args, *drift]).exit_code == 0
    config = SimulationConfig(n_groups=6, train_step_time=2.5, log_prob_drift=0.05)
    reference = analysis.records_to_table(list(simulate(config)))
    assert (
        analysis.load_logs([target])
        .drop("source", "record")
        .equals(reference.drop("source", "record"))
    )
    for option, value, message in (
        ("--groups", "1e3", "'--groups': expected a whole number (found '1e3')"),
        ("--token-time", "fast", "'--token-time': expected a number (found 'fast')"),
        ("--format", "csv", "expected one of jsonl, parquet, artifacts, pt (found 'csv')"),
    ):
        result = CliRunner().invoke(app, [*args, option, value])
        assert result.exit_code == 2
        assert message in " ".join(result.stderr.replace("│", " ").split())


def test_simulated_jsonl_is_one_object_per_line(tmp_path: Path) -> None:
    target = tmp_path / "sim.jsonl"
    CliRunner().invoke(app, ["simulate", "-o", str(target), "--groups", "5"])
    lines = target.read_text().splitlines()
    assert all(isinstance(json.loads(line), dict) for line in lines)


# --------------------------------------------------------------------------- log-prob drift

DRIFT = dataclasses.replace(BASE, log_prob_drift=0.05)


def _without_log_probs(record: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k not in ("rollout_log_probs", "log_probs")}


def test_drift_off_writes_no_log_probs() -> None:
    records = list(simulate(BASE))
    assert not any("rollout_log_probs" in r or "log_probs" in r for r in records)
    table = analysis.records_to_table(records)
    assert table["log_prob_drift"].null_count() == table.height


def test_drift_on_gives_response_aligned_log_probs_and_changes_nothing_else() -> None:
    records = list(simulate(DRIFT))
    assert records == list(simulate(DRIFT))
    assert [_without_log_probs(r) for r in records] == list(simulate(BASE))
    for record in records:
        rollout, trainer = record["rollout_log_probs"], record["log_probs"]
        assert len(rollout) == len(trainer) == record["response_length"]
        assert all(isinstance(v, float) and v <= 0 for v in rollout)
        assert all(isinstance(v, float) for v in trainer)
        # Tool tokens are not trained on, so the trainer does not recompute them.
        pairs = zip(rollout, trainer, record["loss_mask"], strict=True)
        assert all(a == b for a, b, trainable in pairs if not trainable)


def test_drift_on_is_seeded() -> None:
    other = list(simulate(dataclasses.replace(DRIFT, seed=6)))
    assert [r["log_probs"] for r in simulate(DRIFT)] != [r["log_probs"] for r in other]


def mean_abs_diff_by_versions_behind(config: SimulationConfig) -> dict[int, tuple[int, float]]:
    """(tokens, mean |rollout - trainer|) per versions behind, over trainable tokens."""
    sums: dict[int, list[float]] = {}
    for record in simulate(config):
        step = record["metadata"]["dressage_return_rollout_id"]
        labels = record["metadata"]["full_versions"][-record["response_length"] :]
        log_probs = (record["rollout_log_probs"], record["log_probs"])
        pairs = zip(*log_probs, labels, record["loss_mask"], strict=True)
        for rollout, trainer, label, trainable in pairs:
            if trainable:
                sums.setdefault(step - int(label), []).append(abs(rollout - trainer))
    return {behind: (len(d), sum(d) / len(d)) for behind, d in sorted(sums.items())}


def test_tokens_more_versions_behind_drift_more() -> None:
    by_behind = mean_abs_diff_by_versions_behind(DRIFT)
    assert min(by_behind) >= 0  # the trainer never consumes tokens from its future
    means = [mean for tokens, mean in by_behind.values() if tokens >= 200]
    assert len(means) >= 3
    assert means == sorted(means)
    assert by_behind[2][1] > by_behind[0][1]
    # Mean |N(0, s)| is s * sqrt(2/pi): the model's spread shows through.
    assert by_behind[0][1] == pytest.approx(0.02 * (2 / 3.14159) ** 0.5, rel=0.15)


def test_loaded_drift_is_the_mean_over_trainable_tokens() -> None:
    records = list(simulate(DRIFT))
    table = analysis.records_to_table(records)
    assert table["log_prob_drift"].null_count() == 0
    assert table["log_prob_tokens"].to_list() == [sum(r["loss_mask"]) for r in records]


@pytest.mark.parametrize("change", [{"log_prob_drift": -0.1}, {"log_prob_noise": float("nan")}])
def test_invalid_drift_parameters_are_refused(change: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=r"require log_prob_\w+ >= 0 and finite"):
        dataclasses.replace(BASE, **change)


@pytest.mark.slow
def test_memory_stays_flat_however_many_groups_are_simulated() -> None:
    """What a finished group needed is forgotten: memory grows only by the trainer's
    update times (one number a step), however many groups are simulated."""
    import tracemalloc

    def peak(groups: int) -> int:
        config = SimulationConfig(
            n_groups=groups, median_response_tokens=8, max_response_tokens=16, prompt_tokens=2,
            tool_tokens=1, train_step_time=0.05, partial_rollout=False, seed=1,
        )  # fmt: skip
        tracemalloc.start()
        try:
            for _ in simulate(config):
                pass
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    # Only the trainer's update times are kept (8 bytes a group here); 450 bytes a group
    # were kept before.
    assert (peak(4_000) - peak(500)) / 3_500 < 40


def test_an_upper_case_gz_name_is_written_compressed(tmp_path: Path) -> None:
    """It was written as plain text, which the reader (any letter case) then took for gzip."""
    target = tmp_path / "run.JSONL.GZ"
    result = CliRunner().invoke(app, ["simulate", "-o", str(target), "--groups", "3"])
    assert result.exit_code == 0, result.stderr
    assert target.read_bytes()[:2] == b"\x1f\x8b"
    assert analysis.load_logs([target])["group_id"].n_unique() == 3


def _lags(config: SimulationConfig) -> list[int]:
    """Per record: trainer step that consumed it minus the step in which it started."""
    return [
        r["metadata"]["dressage_return_rollout_id"] - r["metadata"]["dressage_start_rollout_id"]
        for r in simulate(config)
    ]


@pytest.mark.parametrize("queue", [5, 10, 40])
def test_a_slow_trainer_meets_a_bounded_queue(queue: int) -> None:
    """With the trainer the bottleneck, the worker stops starting groups once the queue
    of completed groups reaches Dressage's high watermark (80%): a group then waits at most
    (watermark + groups in flight) / B trainer steps, where an unbounded queue let the wait
    grow with the run (a tester's drift figures were all queue)."""
    slow = dataclasses.replace(BASE, n_groups=300, train_step_time=50.0, output_queue_size=queue)
    bound = -(-(slow.queue_watermark + slow.max_active_groups) // slow.batch_groups) + 1
    assert max(_lags(slow)) <= bound
    assert len({r["group_index"] for r in simulate(slow)}) == slow.n_groups  # none held for good
    unbounded = dataclasses.replace(slow, output_queue_size=100_000)
    assert max(_lags(unbounded)) > 3 * bound


def test_a_queue_that_never_fills_changes_nothing() -> None:
    assert list(simulate(BASE)) == list(
        simulate(dataclasses.replace(BASE, output_queue_size=10**6))
    )


def test_response_lengths_are_drawn_from_the_given_ones() -> None:
    lengths = (7, 50, 333)
    config = dataclasses.replace(BASE, response_lengths=lengths, multi_turn_fraction=0.0)
    drawn = {r["response_length"] for r in simulate(config) if r["status"] == "completed"}
    assert drawn == set(lengths)
