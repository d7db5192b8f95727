"""A run folder's what-ifs from the model fitted to it (docs/semantics.md §12.8): every
setting other than the run's own is the run's loop simulated on that model, several
draws, read as the figures read a replay (:class:`ModelSetting`); the run's own setting
stays its replay, which is what Dressage decided."""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import polars as pl

from analysis.engine.grid import SweepResult, pareto_front
from analysis.engine.run_loop.sweep import RUN_SWEEP_SCHEMA, LoopSetting, RunSettings, sweep_run
from analysis.errors import ConfigError, setting
from analysis.formats.dressage.run import RunLog
from analysis.simulation.run_loop_sim import SimAttempt, SimRun, SimTrajectory, simulate_run
from analysis.simulation.run_model import RunModel, fit_run_model

MODEL_DRAWS = 5
"""Simulations per setting (seeds ``seed`` .. ``seed + 4``): figures are their mean."""
MODEL_SCHEMA: dict[str, Any] = {
    "figures_from": pl.String,
    "groups_kept_low": pl.Float64,
    "groups_kept_high": pl.Float64,
    "modelled_pct": pl.Float64,
    "modelled_steps_pct": pl.Float64,
}
"""What a run folder's sweep row adds (docs/semantics.md §12.8): ``figures_from``
(``replay``: the run's own setting, or no model; ``model``), the range of
``groups_kept_pct`` over the draws, and how much of the row rests on drawn events."""
_SUMMED = ("batches_emitted", "unfilled_batches", "groups_short")
_LARGEST = ("version_gap_max", "version_span_max")


MOST_DRAWS = 1000
"""The most simulations per setting a caller may ask for."""


def check_draws(draws: int) -> None:
    """``draws`` is a whole number from 1 to :data:`MOST_DRAWS`, else a :class:`ConfigError`."""
    if isinstance(draws, bool) or not isinstance(draws, int) or not 1 <= draws <= MOST_DRAWS:
        raise ConfigError(
            f"require draws to be a whole number from 1 to {MOST_DRAWS:,} (found {draws!r}); "
            "pass " + setting("draws") + " (5 by default)"
        )


def _pct(part: int | float, whole: int | float) -> float | None:
    return 100.0 * part / whole if whole else None


def _mean(values: Sequence[float]) -> float | None:
    return statistics.mean(values) if values else None


def _weighted(pairs: list[tuple[float, int]]) -> float | None:
    total = sum(weight for _, weight in pairs)
    return sum(value * weight for value, weight in pairs) / total if total else None


def draw_figures(run: SimRun, loop: str) -> dict[str, Any]:
    """One draw's figures, with the keys and meanings of a replay's sweep row
    (:meth:`LoopSetting.figures`): shares of the draw's attempts, trajectories' records and
    generated tokens; gaps and spans of kept trajectories."""
    attempts = run.attempts
    n = len(attempts)

    def share(outcome: str, *stages: str) -> float | None:
        return _pct(sum(a.outcome == outcome and (not stages or a.stage in stages)
                        for a in attempts), n)  # fmt: skip

    kept_per_call = [0] * run.calls
    for attempt in attempts:
        if attempt.outcome == "kept" and attempt.call is not None:
            kept_per_call[attempt.call] += 1
    everything: list[SimTrajectory] = [t for a in attempts for t in a.trajectories]
    kept: list[SimTrajectory] = [t for a in attempts if a.outcome == "kept" for t in a.trajectories]
    gaps = [t.gap for t in kept if t.gap is not None]
    spans = [len(t.versions) for t in kept if t.versions]
    return {
        "groups_kept_pct": share("kept"),
        "samples_kept_pct": _pct(
            sum(t.work.segments for t in kept), sum(t.work.segments for t in everything)
        ),
        "tokens_kept_pct": _pct(
            sum(t.generated for t in kept), sum(t.generated for t in everything)
        ),
        "dropped_stale_pct": share("dropped_stale"),
        # a group another system's rule cancelled in flight reads as one that arrived and
        # was dropped, as a log shows it (§13)
        "dropped_arrival_pct": share("dropped_stale", "arrival", "in_flight"),
        "dropped_pending_pct": share("dropped_stale", "pending"),
        "rejected_span_pct": share("rejected_span"),
        "failed_pct": share("failed"),
        "batches_emitted": sum(k >= run.batch_groups for k in kept_per_call),
        "version_gap_mean": _mean(gaps) if run.measures_gap else None,
        "version_gap_max": max(gaps) if gaps and run.measures_gap else None,
        "version_span_mean": _mean(spans),
        "version_span_max": max(spans) if spans else None,
        "version_gap_mean_tokens": _weighted(
            [(t.gap, t.generated) for t in kept if t.gap is not None]
        )
        if run.measures_gap
        else None,
        "version_span_mean_tokens": _weighted(
            [(len(t.versions), t.generated) for t in kept if t.versions]
        ),
        "loop": loop,
        "leftover_pct": share("leftover"),
        "discarded_surplus_pct": share("discarded_surplus"),
        "unknown_pct": 0.0,
        "unfilled_batches": sum(k < run.batch_groups for k in kept_per_call),
        "groups_short": sum(max(0, run.batch_groups - k) for k in kept_per_call),
    }


def _modelled(run: SimRun) -> tuple[float, float]:
    """Shares of decided attempts, and of trainer steps, resting on drawn events."""
    decided = [a for a in run.attempts if a.outcome != "leftover"]
    steps = {a.call for a in decided if a.modelled and a.outcome == "kept"}
    return _pct(sum(a.modelled for a in decided), len(decided)) or 0.0, (
        _pct(len(steps), run.calls) or 0.0
    )


@dataclass(frozen=True)
class ModelSetting(LoopSetting):
    """A setting of a run folder's sweep that is not the run's own: its figures come from
    ``draws``, the run's loop simulated on its fitted model (``replay`` is the replay of
    the run's attempts at that K, kept for reference)."""

    draws: tuple[SimRun, ...] = ()

    def __repr__(self) -> str:
        return f"ModelSetting({self.config.describe()}, {len(self.draws)} draws)"

    @property
    def notes(self) -> tuple[str, ...]:
        return ()

    def kept_gaps(self) -> np.ndarray:
        """Every draw's kept trajectories' gaps (a distribution over the draws)."""
        return np.asarray([g for run in self.draws for g in run.kept_gaps], dtype=np.int64)

    def span_histograms(self) -> tuple[np.ndarray, np.ndarray]:
        everything = [
            len(t.versions)
            for run in self.draws
            for a in run.attempts
            for t in a.trajectories
            if t.versions
        ]
        kept = [
            len(t.versions)
            for run in self.draws
            for a in run.attempts
            if a.outcome == "kept"
            for t in a.trajectories
            if t.versions
        ]
        size = max(everything, default=-1) + 1
        return (
            np.bincount(np.asarray(everything, dtype=np.int64), minlength=size),
            np.bincount(np.asarray(kept, dtype=np.int64), minlength=size),
        )

    @property
    def batches(self) -> pl.DataFrame:
        """The first draw, per rollout call (the columns :attr:`LoopSetting.batches` has)."""
        run = self.draws[0]
        k = run.keep_versions

        by_call: dict[int | None, list[SimAttempt]] = {}
        for attempt in run.attempts:  # one pass: a call's attempts are looked up, not searched
            by_call.setdefault(attempt.call, []).append(attempt)

        def of(call: int, outcome: str, stage: str | None = None) -> list[SimAttempt]:
            return [
                a
                for a in by_call.get(call, [])
                if a.outcome == outcome and (stage is None or a.stage == stage)
            ]

        rows = []
        for call in range(run.calls):
            gaps = [t.gap for a in of(call, "kept") for t in a.trajectories if t.gap is not None]
            index = run.call_index[call] if call < len(run.call_index) else None
            rows.append(
                {
                    "batch": call,
                    "rollout_id": call,
                    "groups": len(of(call, "kept")),
                    "dropped_arrival": len(of(call, "dropped_stale", "arrival")),
                    "dropped_pending": len(of(call, "dropped_stale", "pending")),
                    "current_version_index": index
                    if k and index is not None and index >= 0
                    else None,
                    "cutoff_version_index": max(0, index + 1 - k)
                    if k and index is not None and index >= 0
                    else None,
                    "version_gap_mean": _mean(gaps) if k and gaps else None,
                    "version_gap_max": max(gaps) if k and gaps else None,
                }
            )
        frame = pl.DataFrame(
            rows,
            schema={
                "batch": pl.Int64, "rollout_id": pl.Int64, "groups": pl.Int64,
                "dropped_arrival": pl.Int64, "dropped_pending": pl.Int64,
                "current_version_index": pl.Int64, "cutoff_version_index": pl.Int64,
                "version_gap_mean": pl.Float64, "version_gap_max": pl.Int64,
            },
        )  # fmt: skip
        size = self.config.batch_groups or 0
        return frame.with_columns(
            short=pl.max_horizontal(pl.lit(size) - pl.col("groups"), pl.lit(0))
        )

    def figures(self) -> dict[str, Any]:
        """The mean of the draws' figures (the largest for maxima)."""
        return merged_figures(self.draws, self.replay.loop)


def merged_figures(draws: Sequence[SimRun], loop: str) -> dict[str, Any]:
    """The mean of the draws' figures (the largest for maxima; counts of the first)."""
    each = [draw_figures(run, loop) for run in draws]
    merged: dict[str, Any] = {}
    for name, value in each[0].items():
        values = [f[name] for f in each if f[name] is not None]
        if name == "loop" or name in _SUMMED:
            merged[name] = value
        elif name in _LARGEST:
            merged[name] = max(values) if values else None
        else:
            merged[name] = _mean(values)
    return merged


def model_columns(draws: Sequence[SimRun], loop: str) -> dict[str, Any]:
    """What a model row says of its draws: the range of its kept share, and how much of it
    rests on drawn events."""
    kept = [draw_figures(r, loop)["groups_kept_pct"] or 0.0 for r in draws]
    shares = [_modelled(r) for r in draws]
    return {
        "figures_from": "model",
        "groups_kept_low": min(kept),
        "groups_kept_high": max(kept),
        "modelled_pct": statistics.mean(s for s, _ in shares),
        "modelled_steps_pct": statistics.mean(s for _, s in shares),
    }


def model_settings(
    run: RunLog,
    model: RunModel,
    setting: LoopSetting,
    *,
    draws: int = MODEL_DRAWS,
    seed: int = 0,
) -> ModelSetting:
    """The row ``setting`` (its config's K and M) simulated ``draws`` times."""
    k = setting.config.keep_versions
    m = setting.config.max_preempts
    runs = tuple(
        simulate_run(model, keep_versions=k, max_preempts=m, seed=seed + i) for i in range(draws)
    )
    return ModelSetting(setting.replay, setting.config, setting.segments, draws=runs)


def with_model(
    swept: SweepResult, run: RunLog, *, draws: int = MODEL_DRAWS, seed: int = 0
) -> SweepResult:
    """A run folder's sweep whose rows at settings other than the run's own come from its
    fitted model (:class:`ModelSetting`); the own row stays the replay. Without a model (no
    weight-update lines to fit the clocks from) the rows stay replays and a note says why.
    Rows that are no what-if (no metrics tell the run's own K) stay replays."""
    rows = swept.rows
    own = rows["own_setting"].to_list()
    try:
        model = fit_run_model(run) if any(o is False for o in own) else None
    except ConfigError as exc:
        model, swept = (
            None,
            dataclasses.replace(swept, notes=(*swept.notes, f"no what-if model: {exc}")),
        )
    settings = list(swept.results)
    records = rows.to_dicts()
    for i, record in enumerate(records):
        record.update(figures_from="replay", groups_kept_low=None, groups_kept_high=None,
                      modelled_pct=0.0, modelled_steps_pct=0.0)  # fmt: skip
        if model is None or own[i] is not False:
            if own[i] is None:
                record.update(modelled_pct=None, modelled_steps_pct=None)
            continue
        modelled = model_settings(run, model, settings[i], draws=draws, seed=seed)
        settings[i] = modelled
        record.update(modelled.figures())
        record.update(max_preempts_applied=True, unneeded_attempts=None)
        record.update(model_columns(modelled.draws, record["loop"]))
    frame = pl.DataFrame(records, schema={**RUN_SWEEP_SCHEMA, **MODEL_SCHEMA})
    applied = frame["max_preempts_applied"]
    front = iter(pareto_front(frame.filter(applied)) if frame.height else [])
    frame = frame.with_columns(
        pareto=pl.Series([bool(next(front)) if a else False for a in applied], dtype=pl.Boolean)
    )
    return dataclasses.replace(swept, rows=frame, results=RunSettings(settings))


WhatIf = Literal["model", "replay"]
"""How a run folder's sweep gets its rows at settings other than the run's own: the
fitted model (the default) or the replay of the run's attempts only (§12.7)."""


def run_sweep(
    run: RunLog,
    *,
    keep_versions: Sequence[int],
    max_preempts: Sequence[int | None],
    loop: Literal["partial", "fully"] | None = None,
    max_retries: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    what_if: WhatIf = "model",
    draws: int = MODEL_DRAWS,
    seed: int = 0,
) -> SweepResult:
    """A run folder's sweep on Dressage's loop (:func:`sweep_run`), its what-ifs from the
    model fitted to the run (:func:`with_model`) unless ``what_if`` is ``"replay"``."""
    check_draws(draws)
    swept = sweep_run(
        run, keep_versions=keep_versions, max_preempts=max_preempts, loop=loop,
        max_retries=max_retries, progress=progress,
    )  # fmt: skip
    return swept if what_if == "replay" else with_model(swept, run, draws=draws, seed=seed)


__all__ = [
    "MODEL_DRAWS",
    "MODEL_SCHEMA",
    "MOST_DRAWS",
    "ModelSetting",
    "WhatIf",
    "check_draws",
    "draw_figures",
    "merged_figures",
    "model_columns",
    "run_sweep",
    "with_model",
]
