"""Per-trajectory facts of a log, the part of :func:`~analysis.engine.prepare.prepare` that
reads records: which records are a trajectory by themselves, the grouping of the others by
(group, trajectory id), and each trajectory's records, tokens, span and the record that
gives its version (docs/semantics.md §2, §4)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from analysis.table.arrow_views import arrow_chunks


@dataclass(frozen=True)
class TrajectoryArrays:
    """Per-trajectory facts as flat arrays, trajectories in order of their first record.

    -1 stands for "none" in ``span`` (no token versions), ``version_row`` and
    ``first_versioned_row`` (no version).
    """

    first_row: np.ndarray
    records: np.ndarray
    tokens: np.ndarray
    tokens_missing: np.ndarray
    span: np.ndarray
    version_row: np.ndarray
    """The record whose end version is the trajectory's version (docs/semantics.md §2)."""
    first_versioned_row: np.ndarray
    arrival: np.ndarray
    """Arrival position of the trajectory's group."""
    single_records: bool = False
    """Every trajectory is one record: the arrays are per record, in row order."""
    duplicate_records: int = 0
    """Records whose (group, trajectory, segment) another record has too: the same run
    read twice, say (counted among trajectories of several records, the only place)."""


def single_record_rows(group_ids: pl.Series, ids: pl.Series, group_code: np.ndarray) -> np.ndarray:
    """Rows that are a trajectory by themselves: no id, or a (group, id) pair no other row has.

    When each group's rows are together and its ids rise from row to row (as logs are
    often written), every pair is distinct. Otherwise it is decided on a 64-bit hash of
    the pair: a hash no other row shares implies a pair no other row has; the rows that
    share one (the same pair, or rarely a collision) are left to the exact grouping.
    Only rows in crowded hash buckets are sorted.
    """
    if _ids_rise_within_groups(ids, group_code):
        return np.ones(len(ids), dtype=bool)
    pair = ids.hash().to_numpy() ^ (group_ids.hash().to_numpy() * np.uint64(0x9E3779B97F4A7C15))
    single = ids.is_null().to_numpy()
    if pl.Series(pair).n_unique() == len(pair):
        return np.ones(len(pair), dtype=bool)
    n_buckets = 1 << max(4, (4 * len(pair)).bit_length())
    bucket = (pair & np.uint64(n_buckets - 1)).astype(np.intp)
    crowded = np.flatnonzero(np.bincount(bucket, minlength=n_buckets)[bucket] > 1)
    unique = np.ones(len(pair), dtype=bool)
    if len(crowded):
        ordered = np.sort(pair[crowded])
        shared = ordered[1:][ordered[1:] == ordered[:-1]]
        unique[crowded] = ~np.isin(pair[crowded], shared)
    return single | unique


def _ids_rise_within_groups(ids: pl.Series, group_code: np.ndarray) -> bool:
    """Whether each group's rows are consecutive and its ids strictly rise along them."""
    if len(ids) < 2 or ids.null_count() or np.any(group_code[1:] < group_code[:-1]):
        return False
    values = arrow_chunks(ids)
    try:
        rises = pc.less(values[:-1], values[1:]).to_numpy()
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError):  # an older pyarrow
        return False
    return bool(np.all(rises | (group_code[1:] != group_code[:-1])))


def trajectory_arrays(
    rows: pl.DataFrame,
    single: np.ndarray,
    real_labels: pl.Expr,
    record_span: np.ndarray,
    response_tokens: np.ndarray,
    response_missing: np.ndarray,
    arrival: np.ndarray,
) -> TrajectoryArrays:
    """Per trajectory: records, tokens, span and the record that gives its version (docs/semantics.md §2, §4).

    A trajectory is (group, trajectory id); a record without an id is its own. The
    trajectories that have a single record (``single``; nearly all in most logs) take
    that record's facts without grouping; only the others are grouped.
    """
    valid = (rows["trajectory_id"].is_not_null() & rows["end_version"].is_not_null()).to_numpy()
    span = record_span
    every_row = np.arange(rows.height)
    if single.all():  # the per-record arrays are the per-trajectory ones
        versioned_rows = np.where(valid, every_row, -1)
        return TrajectoryArrays(
            first_row=every_row,
            records=np.ones(rows.height, dtype=np.int64),
            tokens=response_tokens,
            tokens_missing=response_missing,
            span=span,
            version_row=versioned_rows,
            first_versioned_row=versioned_rows,
            arrival=arrival,
            single_records=True,
        )
    single_rows = np.flatnonzero(single)
    versioned_rows = np.where(valid[single_rows], single_rows, -1)
    parts = {
        "first_row": single_rows,
        "records": np.ones(len(single_rows), dtype=np.int64),
        "tokens": response_tokens[single_rows],
        "tokens_missing": response_missing[single_rows],
        "span": span[single_rows],
        "version_row": versioned_rows,
        "first_versioned_row": versioned_rows,
    }
    multi_rows = np.flatnonzero(~single)
    subset = rows[multi_rows].with_columns(
        row=pl.Series(multi_rows),
        group=pl.Series(arrival[multi_rows]),
        tokens=pl.Series(response_tokens[multi_rows]),
        tokens_missing=pl.Series(response_missing[multi_rows]),
        valid=pl.Series(valid[multi_rows]),
    )
    multi = _multi_record_facts(subset, real_labels)
    duplicates = subset.select(
        pl.struct("group", "trajectory_id", "segment_index").is_duplicated().sum()
    ).item()
    order = np.argsort(np.concatenate([single_rows, multi["first_row"].to_numpy()]))
    merged = {
        name: np.concatenate([values, multi[name].to_numpy()])[order]
        for name, values in parts.items()
    }
    return TrajectoryArrays(
        first_row=merged["first_row"],
        records=merged["records"],
        tokens=merged["tokens"],
        tokens_missing=merged["tokens_missing"],
        span=merged["span"],
        version_row=merged["version_row"],
        first_versioned_row=merged["first_versioned_row"],
        arrival=arrival[merged["first_row"]],
        duplicate_records=int(duplicates),
    )


def _multi_record_facts(subset: pl.DataFrame, real_labels: pl.Expr) -> pl.DataFrame:
    """Facts of the trajectories with several records, grouped by (group, trajectory id)."""
    versioned = pl.col("valid")
    return subset.group_by("group", "trajectory_id").agg(
        first_row=pl.col("row").min(),
        records=pl.len().cast(pl.Int64),
        tokens=pl.col("tokens").sum(),
        tokens_missing=pl.col("tokens_missing").any(),
        first_versioned_row=pl.col("row").filter(versioned).min().fill_null(-1),
        # The record with the highest (segment_index, position in the group) gives the
        # version; within a group, row order is position order.
        version_row=pl.col("row")
        .filter(versioned)
        .sort_by(pl.col("segment_index").filter(versioned), pl.col("row").filter(versioned))
        .last()
        .fill_null(-1),
        # Span: distinct real labels over all the trajectory's records.
        span=pl.when(pl.col("version_spans").is_not_null().any())
        .then(pl.col("version_spans").list.eval(real_labels).explode().drop_nulls().n_unique())
        .cast(pl.Int64)
        .fill_null(-1),
    )


def trajectory_frame(rows: pl.DataFrame, facts: TrajectoryArrays) -> pl.DataFrame:
    """The per-trajectory arrays as a frame, with ids and versions read from the records."""
    every = len(facts.first_row) == rows.height  # then first_row is every row in order
    first_row = pl.Series(facts.first_row)
    no_span = pl.Series(facts.span < 0)
    span = pl.Series(facts.span).set(no_span, None)
    return pl.DataFrame(
        {
            "group_id": rows["group_id"] if every else rows["group_id"].gather(first_row),
            "trajectory_id": (
                rows["trajectory_id"] if every else rows["trajectory_id"].gather(first_row)
            ),
            "first_row": first_row,
            "records": facts.records,
            "tokens": pl.Series(facts.tokens).set(pl.Series(facts.tokens_missing), None),
            "version": rows["end_version"].gather(_nullable(facts.version_row)),
            "first_versioned_row": _nullable(facts.first_versioned_row),
            "span": span,
            "switches": (span - 1).clip(lower_bound=0),
            "arrival": facts.arrival,
        }
    )


def _nullable(values: np.ndarray) -> pl.Series:
    """An Int64 series with null where ``values`` is -1."""
    return pl.Series(values, dtype=pl.Int64).set(pl.Series(values < 0), None)
