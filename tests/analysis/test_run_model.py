"""The model fitted to a run folder and Dressage's loop simulated on it (docs/semantics.md
§12.8): the reader's turn profile, the clocks fitted against what the builder of each
fixture run set (run.json, which the fit never reads), and the loop's invariants at every
setting."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis.formats.dressage.run import read_run
from analysis.formats.dressage.sessions import turn_profile
from analysis.simulation.predict import ModelSetting
from analysis.simulation.run_loop_sim import simulate_run
from analysis.simulation.run_model import RunModel, fit_run_model
from tests.real_runs import FULLY_FIXTURES, RUNS, extract_runs


def _segments(*labels: list[str]) -> list[dict[str, list[str]]]:
    return [{"full_versions": list(seg)} for seg in labels]


def test_turn_profile_counts_turns_and_the_tail_after_a_mid_turn_switch() -> None:
    one_turn_switch = _segments(["-1", "-1", "1", "1", "1", "2", "2"])
    assert turn_profile(one_turn_switch) == ((5,), 2)
    # the switch is in the first turn; a second turn follows: no tail
    earlier = _segments(["-1", "1", "2", "-1", "-1", "2", "2", "2"])
    assert turn_profile(earlier) == ((2, 3), None)
    # a switch between turns (at a tool call) is not within a turn
    between = _segments(["-1", "1", "1", "-1", "2", "2"])
    assert turn_profile(between) == ((2, 2), None)
    # a history rewrite opens a new segment: the turn ends with the segment
    rewrite = _segments(["-1", "1", "1"], ["-1", "1", "2", "2"])
    assert turn_profile(rewrite) == ((2, 3), 2)
    assert turn_profile([{"full_versions": None}]) == ((), None)


@pytest.fixture(scope="module")
def fixture_runs(
    tmp_path_factory: pytest.TempPathFactory, run_folders: dict[str, Path]
) -> dict[str, Path]:
    fully = extract_runs(FULLY_FIXTURES, tmp_path_factory.mktemp("model_fully"))
    return {**{name: run_folders[name] for name in RUNS}, **fully}


@pytest.fixture(scope="module")
def models(fixture_runs: dict[str, Path]) -> dict[str, RunModel]:
    return {name: fit_run_model(read_run(folder)) for name, folder in fixture_runs.items()}


def _made(folder: Path) -> dict[str, object]:
    made: dict[str, object] = json.loads((folder / "run.json").read_text())
    return made


def test_the_fitted_clocks_are_the_ones_the_runs_were_built_with(
    fixture_runs: dict[str, Path], models: dict[str, RunModel]
) -> None:
    for name, folder in fixture_runs.items():
        made, model = _made(folder), models[name]
        assert model.token_time == pytest.approx(float(made["token_time"]), rel=0.15), name  # type: ignore[arg-type]
        assert model.update_pause == pytest.approx(float(made["update_time"]), rel=0.75), name  # type: ignore[arg-type]
        active = int(made["max_active_groups"])  # type: ignore[call-overload]
        if model.loop == "partial":  # the worker's drain tells it exactly
            assert model.max_active_groups == active, name
        else:
            assert abs(model.max_active_groups - active) <= 1, name
        assert model.calls == len(made["rollout_ids"]), name  # type: ignore[arg-type]


SETTINGS = [(0, None), (1, None), (1, 1), (2, 0), (2, 1), (3, 2), (4, None)]


@pytest.mark.parametrize(("k", "m"), SETTINGS)
def test_the_simulated_loop_keeps_its_invariants(
    models: dict[str, RunModel], k: int, m: int | None
) -> None:
    for name, model in models.items():
        run = simulate_run(model, keep_versions=k, max_preempts=m, seed=3)
        kept = [a for a in run.attempts if a.outcome == "kept"]
        # every call returns B groups (the model draws what the run did not make)
        assert len(kept) == model.batch_groups * model.calls, name
        outcomes = {a.outcome for a in run.attempts}
        assert None not in outcomes
        if k == 0:
            assert "dropped_stale" not in outcomes and not run.kept_gaps, name
        else:  # a kept trajectory is within the K newest versions when its call returns
            assert all(0 <= gap <= k - 1 for gap in run.kept_gaps), name
        if m is None:
            assert "rejected_span" not in outcomes, name
        for attempt in kept:
            assert not attempt.failed
            for trajectory in attempt.trajectories:
                assert m is None or len(trajectory.versions) <= m + 1, name
        if model.loop == "partial":
            assert "discarded_surplus" not in outcomes, name
        # a failed attempt is retried while below the retry limit, as its next retry
        # count (unless the final call returned before the worker took the retry)
        keys = {(a.draw, a.retry) for a in run.attempts}
        for attempt in run.attempts:
            if attempt.stage == "retried":
                assert attempt.retry < model.max_retries
                final = attempt.call == model.calls - 1
                assert final or (attempt.draw, attempt.retry + 1) in keys, name
            elif attempt.outcome in ("rejected_span", "failed"):
                assert attempt.retry >= model.max_retries, name


def test_the_simulation_is_deterministic_for_a_seed_and_draws_differ_between_seeds(
    models: dict[str, RunModel],
) -> None:
    model = models["k2-m1"]

    def outcomes(seed: int) -> list[tuple[int, int, str | None]]:
        run = simulate_run(model, keep_versions=1, max_preempts=0, seed=seed)
        return [(a.draw, a.retry, a.outcome) for a in run.attempts]

    assert outcomes(5) == outcomes(5)
    assert any(outcomes(seed) != outcomes(5) for seed in range(6, 10))


def _share(model: RunModel, k: int, m: int | None, outcome: str) -> float:
    """The share of decided attempts with ``outcome`` at (K, M), mean of 3 draws."""
    total = 0.0
    for seed in range(3):
        run = simulate_run(model, keep_versions=k, max_preempts=m, seed=seed)
        decided = [a for a in run.attempts if a.outcome != "leftover"]
        total += sum(a.outcome == outcome for a in decided) / len(decided)
    return total / 3


def test_a_stricter_m_rejects_more_and_a_stricter_k_drops_more(models: dict[str, RunModel]) -> None:
    for name, model in models.items():
        assert _share(model, 2, 0, "rejected_span") > _share(model, 2, 2, "rejected_span"), name
        assert _share(model, 1, None, "dropped_stale") >= _share(model, 3, None, "dropped_stale"), (
            name
        )


def test_the_simulation_at_the_runs_own_setting_comes_close_to_what_dressage_decided(
    fixture_runs: dict[str, Path], models: dict[str, RunModel]
) -> None:
    """Measured, not tuned on these runs: the kept share of decided attempts, simulated at
    the run's own setting (mean of 4 draws), against truth.jsonl (which the fit never
    reads). The mean error over the fixtures is bounded; docs/semantics.md §12.8 gives it."""
    errors = []
    for name, folder in fixture_runs.items():
        made = _made(folder)
        truth = [json.loads(line) for line in (folder / "truth.jsonl").read_text().splitlines()]
        decided = [row for row in truth if row["outcome"] != "leftover"]
        true_kept = 100.0 * sum(row["outcome"] == "kept" for row in decided) / len(decided)
        shares = []
        for seed in range(4):
            run = simulate_run(
                models[name],
                keep_versions=int(made["keep_versions"] or 0),  # type: ignore[call-overload]
                max_preempts=made["max_preempts"],  # type: ignore[arg-type]
                seed=seed,
            )
            sim_decided = [a for a in run.attempts if a.outcome != "leftover"]
            shares.append(100.0 * sum(a.outcome == "kept" for a in sim_decided) / len(sim_decided))
        errors.append(abs(sum(shares) / len(shares) - true_kept))
    assert sum(errors) / len(errors) <= 6.0, errors


def test_a_run_folders_sweep_takes_its_what_ifs_from_the_model(
    fixture_runs: dict[str, Path],
) -> None:
    import analysis

    folder = fixture_runs["k2-m1"]
    swept = analysis.sweep_log(folder, keep_versions=[1, 2, 3], max_preempts=[0, 1, None])
    assert isinstance(swept.result, analysis.SweepResult)
    rows = swept.result.rows
    replayed = analysis.replay(folder, analysis.ReplayConfig(keep_versions=2)).to_dict()
    for row, kept in zip(rows.iter_rows(named=True), swept.result.results, strict=True):
        assert row["max_preempts_applied"]  # the model applies every M
        if row["own_setting"]:  # the replay: what Dressage decided, nothing modelled
            assert row["figures_from"] == "replay" and row["modelled_pct"] == 0.0
            assert row["batches_emitted"] == replayed["batches"]["emitted"]
            assert not isinstance(kept, ModelSetting)
            continue
        assert row["figures_from"] == "model" and isinstance(kept, ModelSetting)
        assert row["groups_kept_low"] <= row["groups_kept_pct"] <= row["groups_kept_high"]
        assert 0.0 <= row["modelled_pct"] <= 100.0
        assert row["unfilled_batches"] == 0 and row["groups_short"] == 0
        shares = [row[c] for c in ("groups_kept_pct", "dropped_stale_pct", "rejected_span_pct",
                                   "failed_pct", "leftover_pct")]  # fmt: skip
        assert sum(shares) == pytest.approx(100.0)  # every attempt has one outcome
        if row["max_preempts"] is None:
            assert row["rejected_span_pct"] == 0.0
        assert kept.kept_gaps().size > 0
    by = {(r["keep_versions"], r["max_preempts"]): r for r in rows.iter_rows(named=True)}
    assert by[3, 0]["rejected_span_pct"] > by[3, 1]["rejected_span_pct"] > 0.0
    twice = [
        analysis.sweep_log(folder, keep_versions=[1], max_preempts=[0], seed=4, draws=2).result
        for _ in range(2)
    ]
    assert all(isinstance(r, analysis.SweepResult) for r in twice)
    first, second = (r.rows.to_dicts() for r in twice if isinstance(r, analysis.SweepResult))
    assert first == second  # one seed, one answer
