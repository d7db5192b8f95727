"""prepare()'s shortcuts agree with the plain way of computing the same facts.

Each shortcut (spans read from Arrow string views, ids encoded by runs, per-group sums
over contiguous slices) is compared with a plain Python computation or with the
general path on generated inputs, and checked to be taken where it should be.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings, strategies as st
from polars.testing import assert_frame_equal

import analysis
from analysis.table.labels import real_label
from analysis.table.schema import SPAN_TYPE
from tests.strategies import raw_logs

prepare_module = importlib.import_module("analysis.engine.prepare")
views_module = importlib.import_module("analysis.table.arrow_views")
trajectories_module = importlib.import_module("analysis.engine.trajectories")

# Short labels (at most 12 bytes, held whole in a string view), including labels that
# are not real, labels that need stripping, two spellings of one number, non-ASCII
# text and a NUL byte.
SHORT_LABELS = [
    "-1", "0", "1", "2", "3", "03", "10", "11", "v2", "v10", " 3", "3 ", "", "none",
    "Unknown", "é", "版本7", "a\x00b", "123456789012", "-7",
]  # fmt: skip
LONG_LABEL = "weights-0123456789"  # 18 bytes: not inline in a view

label_lists = st.lists(st.lists(st.sampled_from(SHORT_LABELS), max_size=8) | st.none(), max_size=40)


def spans_column(records: Sequence[list[str] | None]) -> pl.Series:
    """A version_spans column with one span per label (positions do not matter here)."""
    rows = [
        None
        if labels is None
        else [{"start": i, "end": i + 1, "version": label} for i, label in enumerate(labels)]
        for labels in records
    ]
    return pl.Series("version_spans", rows, dtype=SPAN_TYPE)


def plain_span(labels: list[str] | None) -> int:
    """Distinct real labels of one record (docs/semantics.md §2), -1 for a record without spans."""
    if labels is None:
        return -1
    return len({real_label(label) for label in labels} - {None})


@settings(max_examples=200, deadline=None)
@given(
    records=label_lists,
    cut=st.integers(0, 5),
    slice_spans=st.sampled_from([1, 5, 1 << 18]),
    long_record=st.sampled_from([1, 3, 1 << 16]),
)
def test_views_give_each_records_span(
    records: list[list[str] | None], cut: int, slice_spans: int, long_record: int
) -> None:
    # A slice of a longer column (Arrow offsets that do not start at 0), in two chunks,
    # read in slices of a few records or in one.
    spans = spans_column([*([["9", "8"]] * cut), *records])
    spans = pl.concat([spans.slice(cut, len(records) // 2), spans.slice(cut + len(records) // 2)])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(views_module, "_SLICE_SPANS", slice_spans)
        patch.setattr(views_module, "_LONG_RECORD", long_record)  # counted, not sorted
        from_views = views_module._spans_from_views(spans)
    assert from_views is not None  # short labels without nulls take the view path
    written, span = from_views
    assert span.tolist() == [plain_span(labels) for labels in records]
    assert sorted(written) == sorted({label for labels in records if labels for label in labels})


@settings(max_examples=100, deadline=None)
@given(records=label_lists, long_at=st.integers(0, 39))
def test_long_labels_take_the_polars_path(records: list[list[str] | None], long_at: int) -> None:
    records = [*records, [LONG_LABEL, "1", LONG_LABEL]]
    records.insert(long_at % len(records), ["3", LONG_LABEL.upper(), "-1"])
    spans = spans_column(records)
    assert views_module._spans_from_views(spans) is None
    _, span = views_module.record_spans(spans)
    assert span.tolist() == [plain_span(labels) for labels in records]


def test_null_labels_take_the_polars_path() -> None:
    spans = pl.Series(
        "version_spans",
        [[{"start": 0, "end": 1, "version": None}, {"start": 1, "end": 2, "version": "4"}]],
        dtype=SPAN_TYPE,
    )
    assert views_module._spans_from_views(spans) is None
    assert views_module.record_spans(spans)[1].tolist() == [1]


def test_label_codes_follow_numbers_inside_labels() -> None:
    """Versions as written (v9 before v10, 9 before 10) get rising codes, so records in
    version order take the fast path; labels that are not real get -1."""
    written = ["v10", "v9", "10", "9", "-1", " 9", "ckpt-2", "ckpt-10", "²"]
    codes = dict(zip(written, views_module.label_codes(written).tolist(), strict=True))
    assert codes["v9"] < codes["v10"] and codes["9"] < codes["10"]
    assert codes["ckpt-2"] < codes["ckpt-10"]
    assert codes["-1"] == -1 and codes[" 9"] == codes["9"]


def test_codes_that_decrease_within_a_record_are_counted_exactly() -> None:
    # Natural order puts 2 before 10; a record that goes back (10 -> 2 -> 10) must still
    # count two labels, next to records in order.
    records = [["-1", "2", "10"], ["10", "2", "10", "-1", "2"], ["2", " 2", "2 "], ["7"], []]
    _, span = views_module._spans_from_views(spans_column(records))
    assert span.tolist() == [2, 2, 1, 1, 0]


ID_CHOICES = ["a", "b", "c", "g12", "abcdefgh", "123456789012", "é", "a-much-longer-id-1", None]


@settings(max_examples=150, deadline=None)
@given(ids=st.lists(st.sampled_from(ID_CHOICES), max_size=60), chunks=st.integers(1, 3))
def test_first_appearance_codes_agree_with_a_plain_loop(ids: list[str | None], chunks: int) -> None:
    """Views (short ids), runs and hashing all give codes in order of first appearance."""
    parts = [ids[i * len(ids) // chunks : (i + 1) * len(ids) // chunks] for i in range(chunks)]
    series = pl.concat([pl.Series("id", part, dtype=pl.String) for part in parts], rechunk=False)
    seen: dict[Any, int] = {}
    expected = [seen.setdefault(value, len(seen)) for value in ids]
    results = {"any": views_module.first_appearance_codes(series)}
    if None not in ids:  # the shortcuts are for ids without nulls
        results["views"] = views_module._codes_from_views(series)
        results["runs"] = views_module._codes_by_runs(series) if len(ids) > 1 else None
    for name, result in results.items():
        if result is not None:
            codes, distinct = result
            assert codes.tolist() == expected, name
            assert distinct.to_list() == list(seen), name
    short = all(i is not None and len(i.encode()) <= 12 for i in ids)
    assert (results.get("views") is not None) == short


@settings(max_examples=150, deadline=None)
@given(
    rows=st.lists(
        st.tuples(st.sampled_from(["g1", "g2", "g3"]), st.sampled_from(["t1", "t2", "t3", None])),
        max_size=30,
    ),
    together=st.booleans(),
)
def test_single_record_rows(rows: list[tuple[str, str | None]], together: bool) -> None:
    """A row is single when it has no id or its (group, id) pair is on no other row."""
    if together:  # groups together, ids rising within each: the shortcut applies
        rows = sorted({row for row in rows if row[1] is not None})
    groups = pl.Series("group_id", [g for g, _ in rows], dtype=pl.String)
    ids = pl.Series("trajectory_id", [t for _, t in rows], dtype=pl.String)
    codes, _ = views_module.first_appearance_codes(groups)
    single = trajectories_module.single_record_rows(groups, ids, codes)
    assert single.tolist() == [t is None or rows.count((g, t)) == 1 for g, t in rows]
    if together and len(rows) > 1:
        assert trajectories_module._ids_rise_within_groups(ids, codes)


def test_long_runs_are_encoded_by_runs() -> None:
    ids = pl.Series("id", ["g1"] * 5 + ["g0"] * 3 + ["g1"] * 4)
    codes, distinct = views_module.first_appearance_codes(ids)
    assert codes.tolist() == [0] * 5 + [1] * 3 + [0] * 4
    assert distinct.to_list() == ["g1", "g0"]


@pytest.mark.parametrize("in_order", [True, False])
def test_per_group_reductions(in_order: bool) -> None:
    rng = np.random.default_rng(7)
    position = np.repeat(np.arange(50), rng.integers(1, 6, size=50))
    if not in_order:
        rng.shuffle(position)
    values = rng.integers(-5, 100, size=len(position))
    flags = values % 7 == 0
    by_group = prepare_module._ByGroup(position, 50)
    assert (by_group.starts is not None) == in_order
    assert by_group.count().tolist() == [int((position == g).sum()) for g in range(50)]
    assert by_group.sum(values).tolist() == [int(values[position == g].sum()) for g in range(50)]
    assert by_group.any(flags).tolist() == [bool(flags[position == g].any()) for g in range(50)]
    assert by_group.max(values).tolist() == [int(values[position == g].max()) for g in range(50)]


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(records=raw_logs())
def test_prepare_with_and_without_the_view_path(records: list[dict[str, Any]]) -> None:
    table = analysis.records_to_table(records)
    fast = analysis.prepare(table)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(views_module, "_spans_from_views", lambda spans: None)
        slow = analysis.prepare(table)
    assert_frame_equal(fast.groups, slow.groups)
    assert_frame_equal(fast.trajectories, slow.trajectories)
    for name in ("codes", "owner", "max_switches", "span", "span_owner"):
        assert getattr(fast.arrays, name).tolist() == getattr(slow.arrays, name).tolist(), name


def test_versioned_trajectories_is_a_fact_of_the_group_not_of_the_setting() -> None:
    """A span-rejected group showed 0: it is never observed, but its trajectories have
    versions all the same."""
    table = analysis.records_to_table(
        list(analysis.simulate(analysis.SimulationConfig(n_groups=40, seed=5)))
    )
    prepared = analysis.prepare(table)
    loose = analysis.replay(prepared, analysis.ReplayConfig(batch_groups=4)).decisions
    strict = analysis.replay(
        prepared, analysis.ReplayConfig(max_preempts=0, batch_groups=4)
    ).decisions
    assert (strict["decision"] == "rejected_span").sum() > 0
    assert (loose["versioned_trajectories"] > 0).all()
    assert strict["versioned_trajectories"].to_list() == loose["versioned_trajectories"].to_list()


# Labels whose realness turns on how they are stripped and lowered: the ASCII separators
# str.strip removes (and Rust's trim does not), non-ASCII spaces, the Kelvin sign.
ODD_LABELS = [
    "\x1cnone\x1f", "\u3000-1\u2003", "\xa0Unknown\x85", "NONE", "\u212aey", "unknown\u200b",
    "\t7\n", "7", " 8 ", "İ", "-1 ", "", "x\x1cy",
]  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(
    records=st.lists(
        st.lists(st.sampled_from(SHORT_LABELS + ODD_LABELS), max_size=8) | st.none(), max_size=30
    )
)
def test_many_labels_are_judged_by_polars_as_by_real_label(
    records: list[list[str] | None],
) -> None:
    """Past MANY_LABELS distinct labels realness is decided by polars string functions
    for every span; each record's span and the real labels are those real_label gives."""
    spans = spans_column(records)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(views_module, "MANY_LABELS", 0)
        if any(records):  # too many for the view path
            assert views_module._spans_from_views(spans) is None
        real, span = views_module.record_spans(spans)
    assert span.tolist() == [plain_span(labels) for labels in records]
    got = spans.to_frame("s").select(pl.col("s").list.eval(real)).to_series().to_list()
    expected = [
        None if labels is None else [r for r in map(real_label, labels) if r is not None]
        for labels in records
    ]
    assert got == expected
