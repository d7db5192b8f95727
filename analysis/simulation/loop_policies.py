"""Policies on a Dressage run folder's own loop (docs/semantics.md §12.9): each system's
rule run as the filter of Dressage's loop simulated on the run's fitted model, beside
Dressage's own settings (the run's own replayed, any other drawn from the same model), so
that the systems are compared on the same run, its pace and its workload."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import polars as pl

from analysis.engine.grid import pareto_front
from analysis.engine.run_loop.sweep import RUN_SWEEP_SCHEMA
from analysis.formats.dressage.run import RunLog
from analysis.rules.policies import PolicySweep
from analysis.rules.spec import DressagePolicy, NemoWindowedPolicy, PeerPolicy, Policy
from analysis.simulation.predict import (
    MODEL_DRAWS,
    MODEL_SCHEMA,
    ModelSetting,
    merged_figures,
    model_columns,
    run_sweep,
)
from analysis.simulation.run_loop_sim import SimRun, simulate_run
from analysis.simulation.run_model import fit_run_model

LOOP_POLICY_SCHEMA: dict[str, Any] = {
    "policy": pl.String,
    "clock": pl.String,
    **RUN_SWEEP_SCHEMA,
    **MODEL_SCHEMA,
}
"""A row of :func:`loop_policy_sweep`: the policy's label, the clock a peer rule ran on
(null for Dressage's), then a run folder's sweep row."""


def loop_clock(policy: PeerPolicy) -> str:
    """The clock a peer rule runs on in the simulated loop: ``versions`` when asked, else
    its system's own counter, which the loop knows exactly (§12.9): prime-rl's and verl's
    steps, NeMo-RL's trainer version (``versions``)."""
    own = "versions" if isinstance(policy, NemoWindowedPolicy) else "steps"
    return "versions" if policy.clock_asked == "versions" else own


@dataclass(frozen=True)
class LoopPolicy:
    """One policy on the run's loop: its draws (none when the row is the run's replay, at
    Dressage's own setting)."""

    policy: Policy
    draws: tuple[SimRun, ...]

    def __repr__(self) -> str:
        return f"LoopPolicy({self.policy.label()}, {len(self.draws)} draws)"


def loop_policy_sweep(
    run: RunLog,
    policies: Sequence[Policy],
    *,
    loop: Literal["partial", "fully"] | None = None,
    max_retries: int | None = None,
    draws: int = MODEL_DRAWS,
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
) -> PolicySweep:
    """One row per policy on the run's own loop: a Dressage policy is the row of
    :func:`run_sweep` at its K and M (the replay at the run's own setting); another
    system's rule is the loop simulated ``draws`` times on the run's model with that rule as
    its filter (no span control: M is none). Raises :class:`ConfigError` when no model can
    be fitted (no weight-update lines)."""
    model = fit_run_model(run)
    rows: list[dict[str, Any]] = []
    results: list[LoopPolicy] = []
    for done, policy in enumerate(policies, start=1):
        if isinstance(policy, DressagePolicy):
            swept = run_sweep(
                run, keep_versions=[policy.keep_versions], max_preempts=[policy.max_preempts],
                loop=loop, max_retries=max_retries, draws=draws, seed=seed,
            )  # fmt: skip
            record = swept.rows.to_dicts()[0]
            setting = swept.results[0]
            results.append(
                LoopPolicy(policy, setting.draws if isinstance(setting, ModelSetting) else ())
            )
        else:
            assert isinstance(policy, PeerPolicy)
            sims = tuple(
                simulate_run(model, keep_versions=0, max_preempts=None, seed=seed + i, rule=policy)
                for i in range(draws)
            )
            record = {
                **merged_figures(sims, model.loop),
                **model_columns(sims, model.loop),
                "keep_versions": None,
                "max_preempts": None,
                "batch_groups": model.batch_groups,
                "engine": "dressage-loop",
                "own_setting": False,
                "max_preempts_applied": True,
                "max_preempts_replayed": None,
                "unneeded_attempts": None,
                "clock": loop_clock(policy),
            }
            results.append(LoopPolicy(policy, sims))
        record["policy"] = policy.label()
        rows.append(record)
        if progress is not None:
            progress(done, len(policies))
    frame = pl.DataFrame(rows, schema=LOOP_POLICY_SCHEMA)
    # A rule that starved the loop (steps short of B) trains on less than the run did: not
    # comparable, never on the front.
    fed = frame["unfilled_batches"].fill_null(0) == 0
    front = iter(pareto_front(frame.filter(fed)) if frame.height else [])
    frame = frame.with_columns(
        pareto=pl.Series([bool(next(front)) if f else False for f in fed], dtype=pl.Boolean)
    )
    return PolicySweep(rows=frame, results=tuple(results))


__all__ = ["LOOP_POLICY_SCHEMA", "LoopPolicy", "loop_clock", "loop_policy_sweep"]
