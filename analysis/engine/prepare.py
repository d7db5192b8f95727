"""The work a replay does once per log, whatever the setting: arrival order, trajectory
versions, spans and counts per group (docs/semantics.md §2, §5)."""

from __future__ import annotations

import functools
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from analysis.engine.batching import GroupArrays, Observation, observe
from analysis.engine.trajectories import (
    TrajectoryArrays,
    single_record_rows,
    trajectory_arrays,
    trajectory_frame,
)
from analysis.errors import ConfigError, Message, MissingFieldError, counted, setting
from analysis.table.arrow_views import (
    first_appearance_codes,
    real_labels_expr,
    record_spans,
    written_labels,
)

REPLAY_COLUMNS = (
    "group_id", "trajectory_id", "segment_index", "end_version", "version_spans", "status",
    "response_length", "loss_mask_length", "trainer_step", "returned",
)  # fmt: skip
"""The canonical columns that :func:`prepare` (and so a replay or sweep) reads."""


SPAN_TABLE_CELLS = 8_000_000
"""Largest per-group table of span counts kept for sweeps (groups x spans; 64 MB)."""


@dataclass(frozen=True)
class PreparedLog:
    """Setting-independent facts of a log, one row per group (arrival order) and per trajectory."""

    groups: pl.DataFrame
    tokens_known: bool
    inferred_batch_groups: int | None
    arrays: GroupArrays
    """The groups as flat arrays for the collection loop."""
    per_trajectory: TrajectoryArrays = field(repr=False, compare=False)
    _rows: pl.DataFrame = field(repr=False, compare=False)
    _cache: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)
    only_returned: bool = False
    """Whether every record says Dressage returned it to the trainer
    (``metadata.dressage_partial_rollout_returned``): a log Dressage had filtered already."""

    def __repr__(self) -> str:
        return (
            f"PreparedLog({self.n_groups:,} groups, {self.n_trajectories:,} trajectories, "
            f"inferred batch groups {self.inferred_batch_groups})"
        )

    @functools.cached_property
    def trajectories(self) -> pl.DataFrame:
        """One row per trajectory in order of its first record: ids, records, tokens,
        version, span, switches and the group's arrival position (built on first use)."""
        return trajectory_frame(self._rows, self.per_trajectory)

    @property
    def n_trajectories(self) -> int:
        return len(self.per_trajectory.first_row)

    @property
    def n_groups(self) -> int:
        return self.groups.height

    @property
    def duplicate_records(self) -> int:
        """Records that repeat another's (group, trajectory, segment); see ``inspect``."""
        return self.per_trajectory.duplicate_records

    @property
    def warnings(self) -> tuple[str, ...]:
        """What preparing found that a user should hear about (the CLI prints it)."""
        warnings: list[str] = []
        if self.duplicate_records:
            warnings.append(
                f"{counted(self.duplicate_records, 'record')} share a (group, trajectory, "
                "segment) with another, so they are counted more than once: is the same run "
                "given twice, in two formats say? (inspect counts them too)"
            )
        if self.only_returned:
            warnings.append(
                Message(
                    "every record is of a group Dressage returned to the trainer "
                    "(dressage_partial_rollout_returned): the log was filtered already, so what "
                    "Dressage dropped is not in it, and it is in dump order (by sample index), not "
                    "arrival order. It shows the staleness of what was trained on (replay it with "
                    + setting("keep_versions", 0)
                    + ": the filter already ran, so its batches are the "
                    "trained steps, and `plot timeline` draws their gaps); a replay cannot show "
                    "what a looser setting would have kept, and at the run's own setting may drop "
                    "groups Dressage kept. Replay the run folder (traj_payload/, traj_err/, "
                    "dressage_log.txt) for Dressage's decisions"
                )
            )
        return tuple(warnings)

    def trajectory_versions(self) -> pl.Series:
        """Each group's trajectory versions (docs/semantics.md §2) as a list, groups in arrival order."""
        if "trajectory_versions" not in self._cache:
            arrays = self.arrays
            self._cache["trajectory_versions"] = _lists(
                arrays.labels, arrays.codes, arrays.owner, arrays.n
            )
        versions: pl.Series = self._cache["trajectory_versions"]
        return versions

    def span_histogram(self, groups: np.ndarray | None) -> np.ndarray:
        """How many checked trajectories have each span, in the groups selected by a
        boolean mask over arrival positions (or in all groups when None).

        A sweep asks this for every setting, so a per-group table of span counts is built
        once (when it is small, as it is in practice) and summed over the groups.
        """
        arrays = self.arrays
        if "span_table" not in self._cache:
            width = int(arrays.span.max()) + 1 if len(arrays.span) else 1
            table = None
            if arrays.n * width <= SPAN_TABLE_CELLS:
                cells = np.bincount(
                    arrays.span_owner * width + arrays.span, minlength=arrays.n * width
                )
                table = cells.reshape(arrays.n, width)
            self._cache["span_table"] = (table, np.bincount(arrays.span, minlength=width))
        everything: np.ndarray
        table, everything = self._cache["span_table"]
        if groups is None:
            return everything
        if table is not None:
            counts: np.ndarray = groups.astype(np.int64) @ table
            return counts
        return np.bincount(arrays.span[groups[arrays.span_owner]], minlength=len(everything))

    def observation(self, max_preempts: int | None) -> Observation:
        """Observation order under one ``max_preempts`` (computed once per value)."""
        key = ("observation", max_preempts)
        if key not in self._cache:
            self._cache[key] = observe(self.arrays, max_preempts)
        observation: Observation = self._cache[key]
        return observation


def prepare(table: pl.DataFrame, *, order_by: str | None = None) -> PreparedLog:
    """Compute per-group and per-trajectory facts that no setting changes.

    ``order_by`` names a column whose per-group maximum (the moment the group was
    complete) orders arrival instead of first appearance; ties keep first appearance.

    The work is mostly on integer codes in NumPy: a group's code is its rank of first
    appearance, realness is decided once per distinct label, and the trajectories that
    have a single record (nearly all of them in most logs) are read without grouping.
    """
    if order_by is not None and order_by not in table.columns:
        raise MissingFieldError(
            f"no column {order_by!r} to order arrival by (columns: {', '.join(table.columns)}); "
            "pass " + setting("order_by") + " with a field that the log has"
        )
    if order_by is not None and table.schema[order_by].is_nested():
        raise ConfigError(
            setting("order_by", order_by)
            + f": the field holds {table.schema[order_by]} values, which do "
            "not order arrival; pass a field holding numbers, text or times"
        )
    # The ordering column under a name of its own: it may be one of the columns above.
    order = [pl.col(order_by).alias(_ORDER_KEY)] if order_by else []
    rows = table.select(*REPLAY_COLUMNS, *order)
    # The pass over every token-version span runs in a second thread beside the group
    # and id work; it uses NumPy and Arrow only (no polars, whose threads the other side
    # uses), and both release the GIL, so the two cores share the work.
    with ThreadPoolExecutor(max_workers=1) as helper:
        labelled = helper.submit(record_spans, rows["version_spans"])
        group_code, group_ids = first_appearance_codes(rows["group_id"])
        n_groups = len(group_ids)
        single = single_record_rows(rows["group_id"], rows["trajectory_id"], group_code)
        inferred_batch_groups = _infer_batch_groups(rows["trainer_step"], group_code)
        position = _arrival_positions(rows, group_code, n_groups, order_by)
        arrival = position[group_code]  # of each row
        by_arrival = np.argsort(position)  # group code at each arrival position
        response = rows["response_length"]
        if response.null_count():
            response = rows.select(pl.coalesce("response_length", "loss_mask_length")).to_series()
        response_missing = response.is_null().to_numpy()
        response_tokens = response.fill_null(0).cast(pl.Int64).to_numpy()
        aborted = (rows["status"] == "aborted").fill_null(False).to_numpy()
        end_code, end_labels = first_appearance_codes(rows["end_version"])
        real_labels, record_span = labelled.result()

    per_trajectory = trajectory_arrays(
        rows, single, real_labels, record_span, response_tokens, response_missing, arrival
    )
    by_row = _ByGroup(arrival, n_groups)
    tokens = by_row.sum(response_tokens)
    tokens_missing = by_row.any(response_missing)
    arrays = _group_arrays(
        per_trajectory,
        by_trajectory=by_row if per_trajectory.arrival is arrival else None,
        end_code=end_code,
        end_labels=end_labels,
        samples=by_row.count(),
        tokens=np.where(tokens_missing, 0, tokens),
        failed=by_row.any(aborted),
    )
    groups = pl.DataFrame(
        {
            "arrival": np.arange(n_groups, dtype=np.int64),
            "group_id": group_ids.gather(by_arrival),
            "samples": arrays.samples,
            "trajectories": arrays.trajectories,
            "tokens": pl.Series(tokens).set(pl.Series(tokens_missing), None),
            "failed": arrays.failed,
            "max_switches": pl.Series(arrays.max_switches).replace(-1, None),
        }
    )
    return PreparedLog(
        groups=groups,
        tokens_known=not response_missing.any(),
        inferred_batch_groups=inferred_batch_groups,
        arrays=arrays,
        only_returned=bool(
            rows.height and rows["returned"].null_count() == 0 and rows["returned"].all()
        ),
        per_trajectory=per_trajectory,
        _rows=rows,
    )


_ORDER_KEY = "\x00order_by"


def _arrival_positions(
    rows: pl.DataFrame, group_code: np.ndarray, n_groups: int, order_by: str | None
) -> np.ndarray:
    """Arrival position of each group code (docs/semantics.md §5).

    Codes are already in order of first appearance; ``order_by`` sorts groups by the
    column's per-group maximum instead, nulls last, ties by first appearance.
    """
    if order_by is None:
        return np.arange(n_groups, dtype=np.int64)
    keys = (
        rows.select(pl.col(_ORDER_KEY).alias("key"))
        .with_columns(code=pl.Series(group_code))
        .group_by("code")
        .agg(pl.col("key").max())
        .sort("key", "code", nulls_last=True)
    )
    position = np.empty(n_groups, dtype=np.int64)
    position[keys["code"].to_numpy()] = np.arange(n_groups)
    return position


def _group_arrays(
    facts: TrajectoryArrays,
    *,
    by_trajectory: _ByGroup | None,
    end_code: np.ndarray,
    end_labels: pl.Series,
    samples: np.ndarray,
    tokens: np.ndarray,
    failed: np.ndarray,
) -> GroupArrays:
    """Per-group arrays in arrival order from the trajectory facts and per-group sums."""
    n_groups = len(samples)
    arrival, span = facts.arrival, facts.span
    by_trajectory = by_trajectory or _ByGroup(arrival, n_groups)
    checked = span >= 0
    every_checked = bool(checked.all())
    switches = np.maximum(span - 1, 0)
    max_switches = by_trajectory.max(switches if every_checked else np.where(checked, switches, -1))
    # One version per versioned trajectory, groups in arrival order, trajectories in
    # order of their first versioned record (docs/semantics.md §2). The version is the end version
    # of one record (``version_row``), whose label code is already known.
    version_row, first, owner = facts.version_row, facts.first_versioned_row, arrival
    every_versioned = bool((version_row >= 0).all())
    if not every_versioned:
        versioned = version_row >= 0
        version_row, first, owner = version_row[versioned], first[versioned], owner[versioned]
    # Usually already in that order: one record per trajectory, rows in arrival order.
    in_order = by_trajectory.starts is not None and every_versioned and facts.single_records
    if not in_order:
        steps, later = np.diff(owner), np.diff(first)
        if not np.all((steps > 0) | ((steps == 0) & (later > 0))):
            order = np.lexsort((first, owner))
            version_row, owner = version_row[order], owner[order]
    codes = end_code if in_order else end_code[version_row]
    used = np.bincount(codes, minlength=len(end_labels)) > 0
    if not used.all():
        codes = (np.cumsum(used) - 1)[codes]
    return GroupArrays(
        labels=end_labels.filter(pl.Series(used)).to_list(),
        codes=codes,
        owner=owner,
        samples=samples.astype(np.int64),
        trajectories=by_trajectory.count(),
        tokens=tokens,
        failed=failed,
        max_switches=max_switches,
        span=span if every_checked else span[checked],
        span_owner=arrival if every_checked else arrival[checked],
    )


class _ByGroup:
    """Per-group reductions of values given each one's group position (0 .. n_groups - 1).

    Every group must have a value. When the values are already in group order, as they
    are in most logs, a reduction is one pass over contiguous slices (``reduceat``);
    otherwise it scatters by position.
    """

    def __init__(self, position: np.ndarray, n_groups: int) -> None:
        self.position, self.n_groups = position, n_groups
        self.starts: np.ndarray | None = None
        if len(position) and bool(np.all(position[1:] >= position[:-1])):
            starts = np.flatnonzero(np.diff(position, prepend=-1))
            self.starts = starts if len(starts) == n_groups else None

    def count(self) -> np.ndarray:
        if self.starts is not None:
            return np.diff(self.starts, append=len(self.position))
        return np.bincount(self.position, minlength=self.n_groups)

    def sum(self, values: np.ndarray) -> np.ndarray:
        if self.starts is not None:
            return np.add.reduceat(values.astype(np.int64, copy=False), self.starts)
        totals = np.zeros(self.n_groups, dtype=np.int64)
        np.add.at(totals, self.position, values)
        return totals

    def any(self, flags: np.ndarray) -> np.ndarray:
        if self.starts is not None:
            return np.logical_or.reduceat(flags, self.starts)
        return np.bincount(self.position, weights=flags, minlength=self.n_groups) > 0

    def max(self, values: np.ndarray) -> np.ndarray:
        if self.starts is not None:
            return np.maximum.reduceat(values, self.starts)
        largest = np.full(self.n_groups, np.iinfo(values.dtype).min, dtype=values.dtype)
        np.maximum.at(largest, self.position, values)
        return largest


def _lists(labels: list[str], codes: np.ndarray, owner: np.ndarray, n_groups: int) -> pl.Series:
    """The per-group lists of trajectory versions, from flat codes grouped by owner."""
    offsets = np.zeros(n_groups + 1, dtype=np.int64)
    np.cumsum(np.bincount(owner, minlength=n_groups), out=offsets[1:])
    values = pa.array(labels, pa.large_string()).take(pa.array(codes, pa.int64()))
    lists = pa.LargeListArray.from_arrays(pa.array(offsets, pa.int64()), values)
    return pl.Series("trajectory_versions", pl.from_arrow(lists)).cast(pl.List(pl.String))


def _infer_batch_groups(steps: pl.Series, group_code: np.ndarray) -> int | None:
    """Most common number of groups per trainer step (ties: the larger), or None."""
    pairs = pl.DataFrame({"step": steps, "group": group_code}).drop_nulls("step")
    if pairs.height == 0:
        return None
    # A group's records mostly sit together: keep the first row of each run of one
    # (step, group) pair before the exact count of distinct groups per step.
    new_pair = (pl.col("step").diff() != 0) | (pl.col("group").diff() != 0)
    pairs = pairs.filter(new_pair.fill_null(True))
    per_step = pairs.group_by("step").agg(n=pl.col("group").n_unique())["n"]
    counts: Counter[int] = Counter(per_step.to_list())
    return max(counts, key=lambda n: (counts[n], n))


def real_token_labels(rows: pl.DataFrame, *, by: str) -> pl.DataFrame:
    """(``by``, label) for every real token-version label of each record, normalised."""
    real = real_labels_expr(written_labels(rows["version_spans"]))
    return (
        rows.select(by, label=pl.col("version_spans").list.eval(real))
        .explode("label")
        .drop_nulls("label")
    )
