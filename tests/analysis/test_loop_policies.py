"""Other systems' rules as the filter of Dressage's loop simulated on a run's model
(docs/semantics.md §12.9): each rule's decisions against the rule itself, read off every
simulated attempt (what it measured, when, on which clock), and the run folder's policy
sweep that shows them."""

from __future__ import annotations

from pathlib import Path

import pytest

import analysis
from analysis.formats.dressage.run import read_run
from analysis.rules.spec import PeerPolicy, PrimeRLPolicy, VerlDropPolicy, parse_policy
from analysis.simulation.loop_policies import LoopPolicy, loop_policy_sweep
from analysis.simulation.predict import draw_figures
from analysis.simulation.run_loop_sim import (
    MOST_ATTEMPTS_PER_GROUP,
    SimAttempt,
    SimRun,
    simulate_run,
)
from analysis.simulation.run_model import RunModel, fit_run_model
from tests.real_runs import FULLY_FIXTURES, extract_runs

RULES = [
    "prime-rl:max_off_policy_steps=0,clock=versions",
    "prime-rl:max_off_policy_steps=1",
    "prime-rl:max_off_policy_steps=1,clock=versions",
    "verl-drop:max_off_policy_threshold=1,clock=versions",
    "verl-drop:max_off_policy_threshold=2",
    "nemo-windowed:max_staleness_versions=0",
    "nemo-windowed:max_staleness_versions=1,order=freshest",
]


@pytest.fixture(scope="module")
def folders(
    tmp_path_factory: pytest.TempPathFactory, run_folders: dict[str, Path]
) -> dict[str, Path]:
    fully = extract_runs(FULLY_FIXTURES, tmp_path_factory.mktemp("policy_fully"))
    return {"k2-m1": run_folders["k2-m1"], "fa-k2-m1-n4-s33": fully["fa-k2-m1-n4-s33"]}


@pytest.fixture(scope="module")
def models(folders: dict[str, Path]) -> dict[str, RunModel]:
    return {name: fit_run_model(read_run(folder)) for name, folder in folders.items()}


def _lag(rule: PeerPolicy, run: SimRun, attempt: SimAttempt, call: int) -> int:
    """The rule's lag, written from its source as docs/semantics.md §12.9 states it (not
    from the simulation's code): weight updates since the start on the version clock;
    prime-rl's (step - 1) - version at creation and verl's g - g0 on their own."""
    if rule.clock_asked != "versions" and isinstance(rule, PrimeRLPolicy):
        return call - attempt.start_updates
    if rule.clock_asked != "versions" and isinstance(rule, VerlDropPolicy):
        return call - attempt.start_steps
    return run.call_updates[call] - attempt.start_updates


@pytest.mark.parametrize("spec", RULES)
@pytest.mark.parametrize("name", ["k2-m1", "fa-k2-m1-n4-s33"])
def test_every_decision_of_a_rule_in_the_loop_is_the_rules(
    models: dict[str, RunModel], name: str, spec: str
) -> None:
    rule = parse_policy(spec)
    assert isinstance(rule, PeerPolicy)
    model = models[name]
    for seed in (0, 1):
        run = simulate_run(model, keep_versions=2, max_preempts=0, seed=seed, rule=rule)
        assert run.rule is rule and run.keep_versions == 0  # K and M not applied
        assert len(run.call_updates) == model.calls
        kept_per_call = [0] * model.calls
        for attempt in run.attempts:
            assert attempt.outcome is not None
            assert attempt.outcome != "rejected_span"  # no span control
            if attempt.outcome == "kept":
                assert attempt.call is not None
                kept_per_call[attempt.call] += 1
                assert _lag(rule, run, attempt, attempt.call) <= rule.bound, attempt
            elif attempt.outcome == "dropped_stale":
                assert attempt.call is not None
                assert _lag(rule, run, attempt, attempt.call) > rule.bound, attempt
                if attempt.stage == "arrival":
                    assert rule.checks_on_arrival
                if attempt.stage == "in_flight":  # cancelled: never completed
                    assert rule.name in ("prime-rl", "nemo-windowed")
                    assert attempt.done_at is None
        assert kept_per_call == [model.batch_groups] * model.calls  # every step trains on B
        assert all(gap >= 0 for gap in run.kept_gaps) and run.measures_gap


def test_a_rule_that_never_binds_drops_nothing_and_a_tight_one_drops(
    models: dict[str, RunModel],
) -> None:
    model = models["k2-m1"]
    loose = simulate_run(
        model, keep_versions=0, max_preempts=None, seed=0,
        rule=parse_policy("prime-rl:max_off_policy_steps=1000"),  # type: ignore[arg-type]
    )  # fmt: skip
    assert not any(a.outcome == "dropped_stale" for a in loose.attempts)
    plain = simulate_run(model, keep_versions=0, max_preempts=None, seed=0)
    outcomes = [(a.draw, a.retry, a.outcome) for a in loose.attempts]
    assert outcomes == [(a.draw, a.retry, a.outcome) for a in plain.attempts]  # = K off
    tight = simulate_run(
        model, keep_versions=0, max_preempts=None, seed=0,
        rule=parse_policy("prime-rl:max_off_policy_steps=0,clock=versions"),  # type: ignore[arg-type]
    )  # fmt: skip
    assert any(a.stage == "in_flight" for a in tight.attempts)  # cancelled at an update
    assert len(tight.attempts) > len(loose.attempts)  # replacements for what it dropped
    assert not tight.starved and draw_figures(tight, "partial")["unfilled_batches"] == 0


def test_a_rule_no_attempt_passes_stops_at_the_cap_and_says_its_steps_are_short(
    models: dict[str, RunModel],
) -> None:
    """prime-rl's bound 0 on its own step clock: in Dressage's loop a step's batch trains
    weights one version older than the step, so no group is ever fresh enough."""
    model = models["k2-m1"]
    rule = parse_policy("prime-rl:max_off_policy_steps=0")
    assert isinstance(rule, PeerPolicy)
    starved = simulate_run(model, keep_versions=0, max_preempts=None, seed=0, rule=rule)
    assert starved.starved
    cap = MOST_ATTEMPTS_PER_GROUP * model.calls * model.batch_groups + 100
    assert len(starved.attempts) <= cap + model.max_active_groups
    figures = draw_figures(starved, "partial")
    assert figures["unfilled_batches"] >= model.calls - 1
    assert figures["batches_emitted"] == model.calls - figures["unfilled_batches"]


def test_verl_takes_the_oldest_submitted_first(models: dict[str, RunModel]) -> None:
    """verl selects finished groups by g0 ascending: when a call's first poll fills its
    batch (every kept group had finished before the call began), no group that had also
    finished then and waited past the call was submitted before a kept one."""
    rule = parse_policy("verl-drop:max_off_policy_threshold=100")
    assert isinstance(rule, PeerPolicy)
    checked = 0
    for seed in range(4):
        run = simulate_run(models["k2-m1"], keep_versions=0, max_preempts=None, seed=seed,
                           rule=rule)  # fmt: skip
        for call in range(1, run.calls):
            began = run.call_returns[call - 1]  # the call starts no sooner
            kept = [a for a in run.attempts if a.outcome == "kept" and a.call == call]
            if not all(a.done_at is not None and a.done_at <= began for a in kept):
                continue
            waited = [
                a
                for a in run.attempts
                if a.done_at is not None
                and a.done_at <= began
                and not a.failed
                and (a.outcome == "leftover" or (a.call is not None and a.call > call))
            ]
            checked += bool(waited)
            for other in waited:
                assert other.start_steps >= max(a.start_steps for a in kept), (call, other)
    assert checked  # the case arose


def test_a_run_folders_policies_run_on_its_loop(folders: dict[str, Path]) -> None:
    folder = folders["k2-m1"]
    specs = [
        "dressage:k=2,m=1",  # the run's own setting: its replay
        "dressage:k=1,m=1",
        "prime-rl:max_off_policy_steps=1",
        "verl-drop:max_off_policy_threshold=2",
    ]
    swept = analysis.sweep_log(folder, policies=specs, draws=2)
    assert isinstance(swept.result, analysis.PolicySweep) and swept.run is not None
    rows = swept.result.rows.to_dicts()
    assert [r["policy"] for r in rows] == specs
    assert {r["engine"] for r in rows} == {"dressage-loop"}
    own, stricter, prime, verl = rows
    replayed = analysis.replay(folder, analysis.ReplayConfig(keep_versions=2)).to_dict()
    groups = replayed["groups"]
    assert own["figures_from"] == "replay" and own["modelled_pct"] == 0.0
    assert own["groups_kept_pct"] == pytest.approx(100.0 * groups["kept"] / groups["total"])
    grid = analysis.sweep_log(folder, keep_versions=[1], max_preempts=[1], draws=2).result
    assert stricter["groups_kept_pct"] == grid.rows["groups_kept_pct"][0]  # the sweep's row
    for peer in (prime, verl):
        assert peer["figures_from"] == "model" and peer["keep_versions"] is None
        assert peer["rejected_span_pct"] == 0.0 and peer["max_preempts"] is None
        assert peer["groups_kept_low"] <= peer["groups_kept_pct"] <= peer["groups_kept_high"]
        shares = ("groups_kept_pct", "dropped_stale_pct", "failed_pct", "leftover_pct")
        assert sum(peer[c] for c in shares) == pytest.approx(100.0)
        assert peer["dropped_stale_pct"] == pytest.approx(
            peer["dropped_arrival_pct"] + peer["dropped_pending_pct"]
        )  # a group cancelled in flight counts as dropped on arrival
    results = swept.result.results
    assert all(isinstance(r, LoopPolicy) for r in results)
    assert [len(r.draws) for r in results if isinstance(r, LoopPolicy)] == [0, 2, 2, 2]
    again = loop_policy_sweep(read_run(folder), [parse_policy(s) for s in specs], draws=2)
    assert again.rows.to_dicts() == rows  # one seed, one answer
    simple = analysis.sweep_log(folder, policies=specs, what_if="replay")
    assert isinstance(simple.result, analysis.PolicySweep)
    assert {r["engine"] for r in simple.result.rows.to_dicts()} == {"simple-loop"}


def test_a_policy_that_starves_the_loop_is_said_and_never_starred(
    folders: dict[str, Path],
) -> None:
    swept = loop_policy_sweep(
        read_run(folders["k2-m1"]),
        [parse_policy("prime-rl:max_off_policy_steps=0"), parse_policy("dressage:k=2,m=1")],
        draws=1,
    )
    starved, own = swept.rows.to_dicts()
    assert starved["unfilled_batches"] > 0 and starved["groups_kept_pct"] < 5.0
    assert not starved["pareto"] and own["pareto"]  # alone it would be efficient (gap 0)
    said = analysis.run_policy_note(swept.rows)
    assert said is not None and "prime-rl:max_off_policy_steps=0: no attempt passed" in said
