"""Read the per-step records a Dressage run leaves beside its artifacts:
``dressage_metrics.jsonl`` (what the rollout function returned per step; or a CSV exported
from a dashboard) and ``prompts.jsonl`` (the dataset order)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import polars as pl

from analysis.errors import LogFormatError, short_repr
from analysis.formats.dressage.log import log_lines
from analysis.formats.text.jsonl import jsonl_records
from analysis.table.limits import DEFAULT_LIMITS, Limits

METRICS_USE = (
    "the metrics are checked against the replay and, without dressage_log.txt, give the "
    "batch size and place the rollout calls"
)
"""What a run's metrics are for, said in the errors about them."""

USED_METRICS = (
    "staleness/dropped_groups",
    "staleness/current_version_index",
    "staleness/cutoff_version_index",
    "staleness/partial_rollout_rejected_groups",
    "dressage/partial_rollout_retried_groups",
    "dressage/partial_rollout_failed_groups",
    "dressage/partial_rollout_returned_groups",
    *(f"staleness/{name}_{stat}" for name in ("version_gap", "version_span")
      for stat in ("min", "max", "mean")),
    "dressage/partial_rollout_target_groups",
    "dressage/partial_rollout_target_samples",
)  # fmt: skip
"""The metrics the run loop reads: each must be a finite number (or absent / null)."""
_SIZES = USED_METRICS[-2:]
"""Batch-size metrics: whole numbers >= 1."""


def read_metrics(path: Path, limits: Limits = DEFAULT_LIMITS) -> list[dict[str, Any]]:
    """The rows of ``dressage_metrics.jsonl`` (one per rollout step, with ``rollout_id``),
    or of a CSV exported from a dashboard (:func:`read_metrics_csv`); the metrics the
    replay uses (:data:`USED_METRICS`) are checked to be numbers."""
    if path.suffix.lower() == ".csv":
        return read_metrics_csv(path, limits)
    rows: list[dict[str, Any]] = []
    for number, record in jsonl_records(path, limits):
        if isinstance(record, LogFormatError):
            raise record
        if not isinstance(record, dict) or not _is_int(record.get("rollout_id")):
            raise LogFormatError(
                f"{path}:{number}: expected an object with an integer `rollout_id`; "
                f"remove the line or the file ({METRICS_USE})"
            )
        rows.append(_checked_metrics(record, f"{path}:{number}"))
    return rows


def _checked_metrics(row: dict[str, Any], where: str) -> dict[str, Any]:
    """``row`` if the metrics the replay uses are numbers (null or absent: not checked)."""
    if not -(2**63) <= row["rollout_id"] < 2**63:
        raise LogFormatError(
            f"{where}: `rollout_id` does not fit in 64 bits; correct the line or remove it "
            f"({METRICS_USE})"
        )
    for name in USED_METRICS:
        value = row.get(name)
        if value is None:
            continue
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if (
            not number
            or not math.isfinite(value)
            or (name in _SIZES and (value < 1 or value != int(value)))
        ):
            wanted = "a whole number >= 1" if name in _SIZES else "a finite number"
            raise LogFormatError(
                f"{where}: `{name}` must be {wanted} (found {short_repr(value)}); correct the "
                f"line or remove it ({METRICS_USE})"
            )
    return row


_STEP_COLUMNS = ("rollout_id", "Step", "step", "_step", "trainer/global_step")
"""Column names a dashboard export gives the step, in order of preference."""


def read_metrics_csv(path: Path, limits: Limits = DEFAULT_LIMITS) -> list[dict[str, Any]]:
    """Per-step metrics from a CSV exported from a dashboard (one row per step): the step
    in ``rollout_id`` (or ``Step``, ``step``, ``_step``), metric names as columns, with a
    ``<run name> - `` prefix dropped and the ``__MIN``/``__MAX`` columns of an export
    left out. No line may be longer than ``max_record_bytes`` (checked before parsing)."""

    for _ in log_lines(path, limits):
        pass

    try:
        frame = pl.read_csv(path, infer_schema_length=None)
    except (pl.exceptions.PolarsError, OSError, UnicodeDecodeError) as exc:
        raise LogFormatError(
            f"{path}: not a readable CSV of metrics ({exc}); remove the file or export it "
            f"again ({METRICS_USE})"
        ) from exc
    step = next((name for name in _STEP_COLUMNS if name in frame.columns), None)
    if step is None or not frame.schema[step].is_integer():
        raise LogFormatError(
            f"{path}: no integer step column (looked for {', '.join(_STEP_COLUMNS)}; columns: "
            f"{', '.join(frame.columns[:8])}); name the step column rollout_id"
        )
    rows = []
    for number, row in enumerate(frame.iter_rows(named=True), start=2):
        if row[step] is None:
            raise LogFormatError(
                f"{path}:{number}: no step in column {step}; correct the line or remove it "
                f"({METRICS_USE})"
            )
        metrics: dict[str, Any] = {"rollout_id": row[step]}
        for name, value in row.items():
            if name == step or name.endswith(("__MIN", "__MAX")) or value is None:
                continue
            metrics[name.split(" - ", 1)[-1]] = value
        rows.append(_checked_metrics(metrics, f"{path}:{number}"))
    return rows


def read_prompt_order(path: Path, limits: Limits = DEFAULT_LIMITS) -> list[str]:
    """Instance ids of ``prompts.jsonl`` in file order: the order Dressage draws prompts in."""
    order: list[str] = []
    for number, record in jsonl_records(path, limits):
        if isinstance(record, LogFormatError):
            raise record
        metadata = record.get("metadata") if isinstance(record, dict) else None
        instance = (metadata or {}).get("instance_id") if isinstance(metadata, dict) else None
        if instance is None and isinstance(record, dict):
            instance = record.get("instance_id")
        if instance is None:
            raise LogFormatError(
                f"{path}:{number}: a prompt without `metadata.instance_id`; "
                "remove prompts.jsonl to fall back to instance-id order"
            )
        order.append(str(instance))
    return order


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
