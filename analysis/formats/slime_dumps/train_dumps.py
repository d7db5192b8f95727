"""Read slime's train-side dumps (the trainer's log-probs of each step) and join them to a
rollout log, so that ``compare`` can measure log-prob drift by version gap.

Two layouts are recognised (``train_dump_layout``):

- ``slime``: slime HEAD's ``train_data/<rollout_id>.pt``, ``{"format_version": 2,
  "rollout_id", "rank", "samples": [{"sample_index", "rollout_position", "log_probs",
  "rollout_log_probs", "loss_masks", "tokens", "response_lengths", ...}], ...}``. A sample's
  ``sample_index`` is the rollout record's ``index``, so it joins on (rollout_id, index).
- ``slime-pinned``: the older ``<rollout_id>_<rank>.pt``, ``{"rollout_id", "rank",
  "rollout_data": {column: [one value per sample of the rank]}}``. It has no sample index:
  a row's position is within the rank's data-parallel share, whose partition is not
  stored, so its rows are read but cannot be joined to rollout records.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import polars as pl

from analysis.errors import InputNotFoundError, LogFormatError, UnknownFormatError, counted
from analysis.formats.fields import log_prob_drift
from analysis.formats.pickled.pickles import load_pickled
from analysis.table.limits import DEFAULT_LIMITS, Limits

Layout = Literal["slime", "slime-pinned"]

TRAIN_DUMP_SCHEMA: dict[str, pl.DataType] = {
    "source": pl.String(),
    "layout": pl.String(),
    "rollout_id": pl.Int64(),
    "rank": pl.Int64(),
    "sample_index": pl.Int64(),
    "rollout_position": pl.Int64(),
    "log_prob_drift": pl.Float64(),
    "log_prob_tokens": pl.Int64(),
    "has_log_probs": pl.Boolean(),
}
"""One row per trained sample. ``sample_index`` is null in the pinned layout, whose
``rollout_position`` is the position within its rank's file; ``log_prob_drift`` is the mean
|rollout - trainer| log-prob over the sample's trainable tokens (null without both lists)."""

_SAMPLE_KEYS = ("sample_index", "rollout_position", "log_probs", "loss_masks")


def train_dump_layout(payload: Any) -> Layout | None:
    """The train-side layout a loaded ``.pt`` payload has, or None for anything else."""
    if not isinstance(payload, dict):
        return None
    data = payload.get("rollout_data")
    if "samples" not in payload and isinstance(data, dict) and "rollout_id" in payload:
        return "slime-pinned"
    samples = payload.get("samples")
    if isinstance(samples, list) and (
        "format_version" in payload
        or (samples and isinstance(samples[0], dict) and "sample_index" in samples[0]
            and any(key in samples[0] for key in _SAMPLE_KEYS[1:]))
    ):  # fmt: skip
        return "slime"
    return None


@dataclass(frozen=True)
class TrainDumps:
    """Train-side dumps read into per-sample rows (:data:`TRAIN_DUMP_SCHEMA`), in file order."""

    rows: pl.DataFrame
    files: int

    @property
    def joinable(self) -> pl.DataFrame:
        """The rows that name their rollout sample (rollout_id and sample index)."""
        return self.rows.filter(pl.col("sample_index").is_not_null())


def read_train_dumps(
    inputs: Sequence[str | Path], *, trust_pickle: bool = False, limits: Limits = DEFAULT_LIMITS
) -> TrainDumps:
    """Read train-side dump files, or folders of them (``*.pt`` in name order), into rows,
    each within ``limits`` (the pickle limits; an archive's inflation) as logs are read.

    Examples
    --------
    >>> import analysis, tempfile, pathlib, pickle
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "0.pt"
    >>> sample = {"sample_index": 3, "rollout_position": 0, "loss_masks": [1, 1],
    ...           "log_probs": [-0.5, -1.0], "rollout_log_probs": [-0.5, -1.5]}
    >>> _ = path.write_bytes(pickle.dumps({"format_version": 2, "rollout_id": 0, "samples": [sample]}))
    >>> read_train_dumps([path]).rows.select("rollout_id", "sample_index", "log_prob_drift").row(0)
    (0, 3, 0.25)
    """
    files = _train_files(inputs)
    rows: list[dict[str, Any]] = []
    for path in files:
        payload = load_pickled(path, trust_pickle=trust_pickle, limits=limits)
        layout = train_dump_layout(payload)
        if layout is None:
            raise UnknownFormatError(
                f"{path}: not a slime train-side dump (expected {{'format_version': 2, "
                "'rollout_id', 'samples': [...]}} or {'rollout_id', 'rank', 'rollout_data': "
                "{...}}); point at the run's train_data/ folder"
            )
        reader = _head_rows if layout == "slime" else _pinned_rows
        rows += reader(payload, path)
    return TrainDumps(pl.DataFrame(rows, schema=TRAIN_DUMP_SCHEMA, orient="row"), len(files))


def _train_files(inputs: Sequence[str | Path]) -> list[Path]:
    files: list[Path] = []
    for raw in inputs:
        path = Path(raw)
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.suffix.lower() in (".pt", ".pkl"))
            if not found:
                raise UnknownFormatError(f"{path}: no train-side dumps (*.pt) in this folder")
            files += found
        elif path.is_file():
            files.append(path)
        else:
            raise InputNotFoundError(f"{raw}: no such file or directory; check the path")
    return files


def _rollout_id(payload: dict[str, Any], path: Path) -> int:
    rollout_id = payload.get("rollout_id")
    if isinstance(rollout_id, bool) or not isinstance(rollout_id, int):
        raise LogFormatError(f"{path}: rollout_id must be an integer (found {rollout_id!r})")
    return rollout_id


def _head_rows(payload: dict[str, Any], path: Path) -> list[dict[str, Any]]:
    rollout_id = _rollout_id(payload, path)
    rank = payload.get("rank")
    rows = []
    for number, sample in enumerate(payload["samples"]):
        if not isinstance(sample, dict):
            raise LogFormatError(f"{path}: sample {number + 1} is not a dict")
        drift, tokens = log_prob_drift(
            _values(sample.get("rollout_log_probs")),
            _values(sample.get("log_probs")),
            _values(sample.get("loss_masks")),
            where=f"{path}: sample {number + 1}",
        )
        position = sample.get("rollout_position")
        rows.append(
            {
                "source": str(path), "layout": "slime", "rollout_id": rollout_id,
                "rank": rank if type(rank) is int else None,
                "sample_index": _whole(sample.get("sample_index")),
                "rollout_position": _whole(position) if position is not None else number,
                "log_prob_drift": drift, "log_prob_tokens": tokens,
                "has_log_probs": sample.get("log_probs") is not None,
            }
        )  # fmt: skip
    return rows


def _pinned_rows(payload: dict[str, Any], path: Path) -> list[dict[str, Any]]:
    rollout_id = _rollout_id(payload, path)
    rank = payload.get("rank")
    data: dict[str, Any] = payload["rollout_data"]
    columns = {name: values for name, values in data.items() if isinstance(values, list)}
    size = max((len(values) for values in columns.values()), default=0)

    def column(name: str, i: int) -> Any:
        values = columns.get(name)
        return values[i] if values is not None and i < len(values) else None

    rows = []
    for i in range(size):
        drift, tokens = log_prob_drift(
            _values(column("rollout_log_probs", i)),
            _values(column("log_probs", i)),
            _values(column("loss_masks", i)),
            where=f"{path}: sample {i + 1}",
        )
        rows.append(
            {
                "source": str(path), "layout": "slime-pinned", "rollout_id": rollout_id,
                "rank": rank if type(rank) is int else None, "sample_index": None,
                "rollout_position": i, "log_prob_drift": drift, "log_prob_tokens": tokens,
                "has_log_probs": column("log_probs", i) is not None,
            }
        )  # fmt: skip
    return rows


def _whole(value: Any) -> int | None:
    return value if type(value) is int else None


def _values(value: Any) -> list[Any] | None:
    """A tensor or array (rebuilt by the safe reader, or a trusted ``torch.load``) as a list."""
    if value is None or isinstance(value, list):
        return value
    if hasattr(value, "tolist"):
        listed = value.tolist()
        return listed if isinstance(listed, list) else [listed]
    return None


def join_train_log_probs(
    table: pl.DataFrame, train: TrainDumps, *, name: str = "the log"
) -> tuple[pl.DataFrame, list[str]]:
    """The rollout table with ``log_prob_drift``/``log_prob_tokens`` taken from the train
    dumps, joined on (trainer_step = rollout_id, sample_index = sample_index); and notes
    on what could not be joined."""
    notes: list[str] = []
    pinned = train.rows.filter(pl.col("sample_index").is_null()).height
    if pinned:
        notes.append(
            f"{name}: {counted(pinned, 'train-dump sample')} without a sample index (the "
            "pinned <rollout_id>_<rank>.pt layout) cannot be joined to rollout records: "
            "their position is within a data-parallel share whose partition is not stored"
        )
    joinable = train.joinable.filter(pl.col("log_prob_drift").is_not_null())
    if train.joinable.height and joinable.height == 0:
        notes.append(f"{name}: the train dumps carry no log_probs with rollout_log_probs")
    drift = joinable.group_by("rollout_id", "sample_index").agg(
        pl.col("log_prob_drift").last().alias("_drift"),
        pl.col("log_prob_tokens").last().alias("_tokens"),
    )
    joined = (
        table.with_row_index("_row")
        .join(
            drift,
            left_on=["trainer_step", "sample_index"],
            right_on=["rollout_id", "sample_index"],
            how="left",
        )
        .sort("_row")  # (a join need not keep the rows' order)
    )
    matched = joined["_drift"].is_not_null().sum()
    if joinable.height and matched < joinable.height:
        notes.append(
            f"{name}: {joinable.height - matched} of {joinable.height} train-dump samples "
            "match no rollout record on (rollout_id, index)"
        )
    joined = joined.with_columns(
        log_prob_drift=pl.coalesce("_drift", "log_prob_drift"),
        log_prob_tokens=pl.coalesce("_tokens", "log_prob_tokens"),
    ).drop("_drift", "_tokens")
    return joined.select(table.columns), notes
