"""Read the groups each step of a Dressage run returned: the slime dumps
``rollout_data/<step>.pt`` (by the safe reader), else ``rollouts.jsonl``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from analysis.errors import (
    LogFormatError,
    MissingFieldError,
    UnsafePickleError,
    short_repr,
)
from analysis.formats.dressage.records import optional_int
from analysis.formats.dressage.sessions import files_in, is_kind
from analysis.formats.slime_dumps.reader import dump_samples
from analysis.formats.text.jsonl import jsonl_records
from analysis.formats.text.lean import lean_plan
from analysis.table.fieldmap import FieldMap
from analysis.table.limits import DEFAULT_LIMITS, Limits

KEPT_SCHEMA: dict[str, Any] = {
    "rollout_id": pl.Int64,
    "group_position": pl.Int64,
    "async_group_id": pl.Int64,
    "trajectory_id": pl.String,
    "sample_index": pl.Int64,
    "group_index": pl.Int64,
}

DUMPS, ROLLOUTS = "rollout_data", "rollouts.jsonl"


def read_dump_rows(
    root: Path, limits: Limits = DEFAULT_LIMITS
) -> tuple[list[dict[str, Any]], str | None]:
    """One row per session of each step's dump, in dump order (``KEPT_SCHEMA``), and which
    file gave them: ``rollout_data/<step>.pt`` (safe reader), else ``rollouts.jsonl``."""
    by_step: dict[int, list[tuple[str, dict[str, Any]]]] = {}
    folder = root / DUMPS
    paths = files_in(folder, ".pt")
    paths = [p for p in paths if p.stem.isdigit()]  # eval_<n>.pt dumps are not steps
    for path in paths:
        rollout_id, samples = _safe_dump(path, limits)
        if rollout_id is not None and optional_int(rollout_id) is None:
            raise LogFormatError(f"{path}: rollout_id does not fit in 64 bits; {DUMP_FIX}")
        by_step[rollout_id if rollout_id is not None else int(path.stem)] = [
            (f"{path}: sample {i}", _slim(_sample(sample, f"{path}: sample {i}", DUMP_FIX)))
            for i, sample in enumerate(samples)
        ]
    source = DUMPS if paths else None
    if not paths and is_kind(root / ROLLOUTS, "file"):
        source = ROLLOUTS
        fix = "correct the line, or remove rollouts.jsonl (the kept groups are then not checked)"
        # Lean: a long line's token lists are neither kept nor folded (only ids are read).
        lean = lean_plan(FieldMap(), fold=False)
        for number, record in jsonl_records(root / ROLLOUTS, limits, lean=lean):
            if isinstance(record, LogFormatError):
                raise record
            where = f"{root / ROLLOUTS}:{number}"
            sample = _sample(record, where, fix)
            step = optional_int(sample["metadata"].get("dressage_return_rollout_id"))
            if step is None:
                raise MissingFieldError(
                    f"{where}: no metadata.dressage_return_rollout_id; "
                    "remove rollouts.jsonl or provide rollout_data/"
                )
            by_step.setdefault(step, []).append((where, _slim(sample)))
    rows: list[dict[str, Any]] = []
    for step in sorted(by_step):
        rows += _dump_rows(step, [sample for _, sample in by_step[step]])
    return rows, source


DUMP_FIX = (
    "move rollout_data/ out of the run folder to replay without it (the run loop then "
    "checks against rollouts.jsonl if there is one, else the log and metrics only; the "
    "sample order of kept attempts is then guessed)"
)


def _safe_dump(path: Path, limits: Limits) -> tuple[int | None, list[Any]]:
    """A run folder's dump, read by the safe reader: it rebuilds tensors and NumPy arrays,
    and refuses other classes; trusting the pickle is no option here, so not suggested."""
    try:
        return dump_samples(path, trust_pickle=False, limits=limits)
    except UnsafePickleError as exc:
        raise UnsafePickleError(  # without its advice to trust the pickle
            exc.base + "; a run folder's dumps are always read by the safe reader (it rebuilds "
            f"tensors and NumPy arrays); {DUMP_FIX}"
        ) from None


def _sample(record: Any, where: str, fix: str) -> dict[str, Any]:
    """A sample of a dump or ``rollouts.jsonl``, with its ``metadata`` an object."""
    if not isinstance(record, dict):
        raise LogFormatError(
            f"{where}: expected a sample object (found {type(record).__name__}); {fix}"
        )
    metadata = record.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise LogFormatError(
            f"{where}: `metadata` must be an object (found {short_repr(metadata)}); {fix}"
        )
    return {**record, "metadata": metadata or {}}


_SAMPLE_KEYS = ("index", "group_index", "session_id")
_METADATA_KEYS = (
    "dressage_return_async_group_id", "instance_id", "parent_traj_id", "session_id",
    "dressage_return_rollout_id",
)  # fmt: skip


def _slim(sample: dict[str, Any]) -> dict[str, Any]:
    """What :func:`_dump_rows` reads of a sample: a run's samples are held until the
    whole file is read, and their token lists would be most of it."""
    meta = sample["metadata"]
    slim = {key: sample[key] for key in _SAMPLE_KEYS if key in sample}
    slim["metadata"] = {key: meta[key] for key in _METADATA_KEYS if key in meta}
    return slim


def _dump_rows(step: int, samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    groups: dict[Any, int] = {}
    seen: set[str] = set()
    rows = []
    for sample in samples:
        meta = sample["metadata"]
        group_id = optional_int(meta.get("dressage_return_async_group_id"))
        key = (
            group_id
            if group_id is not None
            else (str(meta.get("instance_id")), optional_int(sample.get("group_index")))
        )
        position = groups.setdefault(key, len(groups))
        session = meta.get("parent_traj_id") or meta.get("session_id") or sample.get("session_id")
        if session is None or str(session) in seen:
            continue  # later segments of a trajectory already listed
        seen.add(str(session))
        rows.append(
            {
                "rollout_id": step,
                "group_position": position,
                "async_group_id": group_id,
                "trajectory_id": str(session),
                "sample_index": optional_int(sample.get("index")),
                "group_index": optional_int(sample.get("group_index")),
            }
        )
    return rows
