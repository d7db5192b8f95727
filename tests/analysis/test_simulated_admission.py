"""Admission control in the simulator: each rule's bound holds on every generated group."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest
from typer.testing import CliRunner

import analysis
from analysis.errors import ConfigError
from analysis.rules.admission import RULES
from analysis.rules.simulated_admission import simulation_rule
from analysis.simulation.parameters import SimulationConfig
from analysis.simulation.simulator import simulate
from cli.app import app

# Generation far faster than the trainer: without a rule, groups start many steps ahead.
FAST_ROLLOUT = SimulationConfig(
    n_groups=240, n_samples_per_prompt=4, max_active_groups=24, batch_groups=4,
    train_step_time=30.0, token_time=0.001, median_response_tokens=200, seed=3,
)  # fmt: skip


def _starts(config: SimulationConfig) -> dict[int, int]:
    """Each group's draw ordinal (the order it started) -> the version it started under."""
    return {
        r["group_index"]: r["metadata"]["dressage_start_rollout_id"]
        for r in simulate(config)
        if r["metadata"]["segment_index"] == 0
    }


def _worst_lead(starts: dict[int, int], batch_groups: int) -> int:
    """max over groups of floor(n / B) - v_start: how far ahead of the trainer it started."""
    return max(n // batch_groups - version for n, version in starts.items())


@pytest.mark.parametrize("rule", ["areal", "skyrl", "nemo-gated"])
@pytest.mark.parametrize("bound", [0, 1, 3])
def test_counting_rules_bound_every_group(rule: str, bound: int) -> None:
    knob = RULES[rule][0]
    spec = simulation_rule(f"{rule}:{knob}={bound}", batch_groups=FAST_ROLLOUT.batch_groups)
    config = dataclasses.replace(FAST_ROLLOUT, admission=spec)
    starts = _starts(config)
    assert len(starts) == config.n_groups  # the rule held groups back; it lost none
    assert _worst_lead(starts, config.batch_groups) <= bound
    # the bound is met exactly once generation is fast: the rule is what holds it
    assert _worst_lead(starts, config.batch_groups) == bound


def test_without_a_rule_fast_generation_runs_far_ahead() -> None:
    assert _worst_lead(_starts(FAST_ROLLOUT), FAST_ROLLOUT.batch_groups) > 10


@pytest.mark.parametrize("threshold", [0.0, 0.5, 2.0])
def test_verl_async_bounds_the_groups_started_between_updates(threshold: float) -> None:
    """Its count restarts, at each weight update, at the groups still running or waiting,
    and each start adds one: so no more than int(R x (threshold + 1)) groups (R = B by
    default) start under one version."""
    rule = simulation_rule(f"verl-async:staleness_threshold={threshold}", batch_groups=4)
    assert rule.knobs["required_samples"] == 4
    config = dataclasses.replace(FAST_ROLLOUT, admission=rule)
    per_version = Counter(_starts(config).values())
    assert max(per_version.values()) <= int(4 * (threshold + 1))
    assert sum(per_version.values()) == config.n_groups
    unbounded = Counter(_starts(FAST_ROLLOUT).values())
    assert max(unbounded.values()) > int(4 * (threshold + 1))


def test_a_rule_that_never_binds_changes_nothing() -> None:
    slow = dataclasses.replace(FAST_ROLLOUT, n_groups=40, train_step_time=0.01)
    ruled = dataclasses.replace(
        slow, admission=simulation_rule("areal:max_head_offpolicyness=1000", batch_groups=4)
    )
    assert list(simulate(ruled)) == list(simulate(slow))


def test_verl_async_needs_one_sync_per_step() -> None:
    with pytest.raises(ConfigError, match="trigger_parameter_sync_step must be 1"):
        simulation_rule(
            "verl-async:staleness_threshold=1,trigger_parameter_sync_step=2", batch_groups=4
        )


def test_a_bad_verl_async_spec_is_named_as_given() -> None:
    """simulate gives verl-async R = B itself; an error names the spec the user wrote."""
    with pytest.raises(ConfigError) as raised:
        simulation_rule("verl-async:staleness_threshold=-3", batch_groups=4)
    assert str(raised.value).startswith("admission=verl-async:staleness_threshold=-3: ")
    rule = simulation_rule("verl-async:staleness_threshold=0.5", batch_groups=4)
    assert rule.knobs["required_samples"] == 4 and rule.max_required == 6


def test_simulate_admission_on_the_command_line(tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "a.jsonl"
    result = CliRunner().invoke(
        app, ["simulate", "-o", str(out), "--groups", "60", "--train-step-time", "30",
              "--token-time", "0.001", "--max-active-groups", "24",
              "--admission", "areal:max_head_offpolicyness=0"],
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    table = analysis.load_logs([out])
    assert table["group_id"].n_unique() == 60
    bad = CliRunner().invoke(app, ["simulate", "-o", str(out), "--admission", "areal:speed=1"])
    assert bad.exit_code == analysis.ExitCode.CONFIG
    assert bad.stderr.count("\n") == 1 and "max_head_offpolicyness" in bad.stderr


def test_verl_async_that_could_never_fill_a_batch_is_refused() -> None:
    """R below B let 4 groups start, then the trainer waited for 8 for ever: the
    simulator wrote 4 of 64 groups and said 64."""
    with pytest.raises(ConfigError, match="fewer than the 8 a trainer step takes"):
        simulation_rule("verl-async:staleness_threshold=0,required_samples=4", batch_groups=8)
    with pytest.raises(ConfigError, match="step_offset"):
        simulation_rule("areal:max_head_offpolicyness=1,step_offset=1", batch_groups=4)


@pytest.mark.parametrize(
    "spec", ["areal:max_head_offpolicyness=0", "verl-async:staleness_threshold=0"]
)
def test_every_group_is_simulated_under_the_tightest_rules(spec: str) -> None:
    for active in (1, 3, 24):
        config = dataclasses.replace(
            FAST_ROLLOUT, max_active_groups=active, n_groups=60,
            admission=simulation_rule(spec, batch_groups=FAST_ROLLOUT.batch_groups),
        )  # fmt: skip
        assert len(_starts(config)) == 60
