"""What-if figures of a run folder's sweep from the fitted model (docs/semantics.md §12.8):
the run's loop simulated at each setting other than its own, several draws, the mean and
the range over draws, and how much rests on modelled events."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

import polars as pl

from analysis.errors import ConfigError
from analysis.formats.dressage.run import RunLog
from analysis.simulation.run_loop_sim import SimRun, simulate_run
from analysis.simulation.run_model import fit_run_model

MODEL_DRAWS = 5
"""Simulations per setting (seeds 0 .. 4): the figures are their mean, with their range."""
MODEL_SCHEMA: dict[str, Any] = {
    "model_kept_pct": pl.Float64,
    "model_kept_low": pl.Float64,
    "model_kept_high": pl.Float64,
    "model_rejected_span_pct": pl.Float64,
    "model_dropped_stale_pct": pl.Float64,
    "model_kept_per_step": pl.Float64,
    "model_gap_mean": pl.Float64,
    "modelled_pct": pl.Float64,
    "modelled_steps_pct": pl.Float64,
}
"""The model's columns of a run folder's sweep row (null at the run's own setting, where
the replay is what Dressage decided, and where no model can be fitted)."""


def _figures(run: SimRun) -> dict[str, float | None]:
    decided = [a for a in run.attempts if a.outcome != "leftover"]
    kept = [a for a in decided if a.outcome == "kept"]
    total = len(decided) or 1
    modelled_calls = {a.call for a in kept if a.modelled}
    return {
        "kept": 100.0 * len(kept) / total,
        "span": 100.0 * sum(a.outcome == "rejected_span" for a in decided) / total,
        "stale": 100.0 * sum(a.outcome == "dropped_stale" for a in decided) / total,
        "per_step": len(kept) / run.calls,
        "gap": statistics.mean(run.kept_gaps) if run.kept_gaps else None,
        "modelled": 100.0 * sum(a.modelled for a in decided) / total,
        "steps": 100.0 * len(modelled_calls) / run.calls,
    }


def predict_settings(
    run: RunLog,
    settings: Sequence[tuple[int, int | None]],
    *,
    draws: int = MODEL_DRAWS,
    seed: int = 0,
) -> tuple[dict[tuple[int, int | None], dict[str, float | None]], str | None]:
    """The model's columns (:data:`MODEL_SCHEMA`) per (K, M), and a note when no model
    can be fitted to the run (then no setting has any)."""
    try:
        model = fit_run_model(run)
    except ConfigError as exc:
        return {}, f"no what-if model: {exc}"
    rows: dict[tuple[int, int | None], dict[str, float | None]] = {}
    for k, m in dict.fromkeys(settings):
        runs = [
            _figures(simulate_run(model, keep_versions=k, max_preempts=m, seed=seed + i))
            for i in range(draws)
        ]

        def mean(name: str, runs: list[dict[str, float | None]] = runs) -> float | None:
            values = [r[name] for r in runs if r[name] is not None]
            return statistics.mean(v for v in values if v is not None) if values else None

        kept = [r["kept"] or 0.0 for r in runs]
        rows[k, m] = {
            "model_kept_pct": mean("kept"),
            "model_kept_low": min(kept),
            "model_kept_high": max(kept),
            "model_rejected_span_pct": mean("span"),
            "model_dropped_stale_pct": mean("stale"),
            "model_kept_per_step": mean("per_step"),
            "model_gap_mean": mean("gap") if k else None,
            "modelled_pct": mean("modelled"),
            "modelled_steps_pct": mean("steps"),
        }
    return rows, None


def with_model_columns(
    rows: pl.DataFrame, run: RunLog, *, draws: int = MODEL_DRAWS
) -> tuple[pl.DataFrame, str | None]:
    """A run folder's sweep rows with the model's columns: filled for every row that is not
    the run's own setting (``own_setting`` false), null for the own row."""
    wanted = [
        (int(k), m)
        for k, m, own in rows.select("keep_versions", "max_preempts", "own_setting").iter_rows()
        if own is False
    ]
    predicted, note = predict_settings(run, wanted, draws=draws) if wanted else ({}, None)
    columns: dict[str, list[float | None]] = {name: [] for name in MODEL_SCHEMA}
    for k, m, own in rows.select("keep_versions", "max_preempts", "own_setting").iter_rows():
        figures = predicted.get((int(k), m)) if own is False else None
        for name in MODEL_SCHEMA:
            columns[name].append(None if figures is None else figures[name])
    frame = rows.with_columns(
        pl.Series(name, values, dtype=MODEL_SCHEMA[name]) for name, values in columns.items()
    )
    return frame, note


__all__ = ["MODEL_DRAWS", "MODEL_SCHEMA", "predict_settings", "with_model_columns"]
