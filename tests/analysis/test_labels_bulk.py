"""Token lists with a run per token (alternating versions, alternating masks; issue 18)
are read in bulk, by NumPy, and give what the plain loop over every token gives.

The bulk paths are taken after :data:`analysis.table.labels.BULK_RUNS` runs of a piece; the
tests lower it so that short generated lists take them."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from analysis.formats.text.lean import LeanList
from analysis.table import labels as labels_module
from analysis.table.labels import SpanBuilder, derive_end_version, label_text, true_runs
from tests import reference

HUGE = 10**5000  # a whole number whose text Python refuses to make (a bad label)
PLAIN = ["0", "1", "-1", "", " 1", "unknown", "v2", 0, 1, -1, 2]
OTHER = [1.0, True, None, 2.5, HUGE]
_NO_RUN = object()


def plain_spans(values: list[Any]) -> list[tuple[int, int, str]]:
    """Spans token by token: a run goes on while a value equals the run's first value
    (``itertools.groupby``), and runs whose labels agree are one span."""
    spans: list[list[Any]] = []
    key: Any = _NO_RUN
    for i, value in enumerate(values):
        if key is value or key == value:
            spans[-1][1] = i + 1
            continue
        text = label_text(value) or ""
        if spans and spans[-1][2] == text:
            spans[-1][1] = i + 1
        else:
            spans.append([i, i + 1, text])
        key = value
    return [(start, end, text) for start, end, text in spans]


def outcome(run: Any) -> Any:
    try:
        return run()
    except ValueError as exc:
        return f"ValueError: {exc}"


@st.composite
def runs_of(draw: st.DrawFn, pool: list[Any], most: int = 120) -> list[Any]:
    """Values in runs of 1-3 (a run a token, mostly), from the pool."""
    values: list[Any] = []
    for _ in range(draw(st.integers(0, most))):
        values += [draw(st.sampled_from(pool))] * draw(st.integers(1, 3))
    return values


@settings(max_examples=300, deadline=None)
@given(
    values=runs_of(PLAIN) | runs_of(PLAIN + OTHER),
    cuts=st.lists(st.integers(0, 400), max_size=6),
    bulk_runs=st.sampled_from([1, 2, 5, 64]),
)
def test_spans_read_in_bulk_are_the_plain_loops(
    values: list[Any], cuts: list[int], bulk_runs: int
) -> None:
    bounds = sorted({0, len(values), *(cut for cut in cuts if cut < len(values))})

    def fed() -> list[tuple[int, int, str]]:
        builder = SpanBuilder()
        for start, stop in itertools.pairwise(bounds):
            builder.feed(values[start:stop])
        return list(builder.spans)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(labels_module, "BULK_RUNS", bulk_runs)
        got = outcome(fed)
    assert got == outcome(lambda: plain_spans(values))


def test_a_run_per_token_takes_the_bulk_path(monkeypatch: pytest.MonkeyPatch) -> None:
    taken = []
    bulk = SpanBuilder._feed_bulk

    def spy(self: SpanBuilder, labels: Any) -> None:
        taken.append(len(labels))
        bulk(self, labels)

    monkeypatch.setattr(SpanBuilder, "_feed_bulk", spy)
    builder = SpanBuilder()
    builder.feed(["0", "1"] * 1000)
    assert taken == [2000 - labels_module.BULK_RUNS]
    assert list(builder.spans) == plain_spans(["0", "1"] * 1000)
    builder = SpanBuilder()
    builder.feed(["-1"] * 100 + ["7"] * 1000 + ["8"] * 10)  # few runs: one by one
    assert len(taken) == 1 and len(builder.spans) == 3


@settings(max_examples=200, deadline=None)
@given(flags=runs_of([0, 1, True, False, "", "x", None, 2]), base=st.integers(0, 50))
def test_true_runs_are_the_runs_of_true_values(flags: list[Any], base: int) -> None:
    expected_starts, expected_ends, start = [], [], 0
    for on, run in itertools.groupby(map(bool, flags)):
        end = start + len(list(run))
        if on:
            expected_starts.append(base + start)
            expected_ends.append(base + end)
        start = end
    assert true_runs(flags, base) == (expected_starts, expected_ends)


@settings(max_examples=300, deadline=None)
@given(
    versions=runs_of(["-1", "0", "1", "2", "unknown", " 3"], 60),
    mask=st.none() | runs_of([0, 1], 60),
    response=st.none() | st.integers(0, 200),
    lean_mask=st.booleans(),
    bulk_runs=st.sampled_from([0, 1, 3]),
)
def test_end_versions_over_many_spans_are_the_reference_models(
    versions: list[Any], mask: list[Any] | None, response: int | None, lean_mask: bool,
    bulk_runs: int,
) -> None:  # fmt: skip
    expected = reference.derive_end_version(versions, response_length=response, loss_mask=mask)
    given_mask: Any = mask
    if mask is not None and lean_mask:  # a mask kept as runs, fed in two pieces
        given_mask = LeanList(mask=True)
        given_mask.feed(mask[: len(mask) // 2])
        given_mask.feed(mask[len(mask) // 2 :])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(labels_module, "BULK_RUNS", bulk_runs)
        spans = SpanBuilder()
        spans.feed(versions)
        got = derive_end_version(spans.spans, response_length=response, loss_mask=given_mask)
    assert got == expected


@settings(max_examples=200, deadline=None)
@given(values=runs_of(PLAIN, 60), most=st.integers(0, 40), piece=st.sampled_from([1, 7, 1 << 16]))
def test_a_list_past_most_spans_is_refused_and_one_within_is_whole(
    values: list[Any], most: int, piece: int
) -> None:
    expected = plain_spans(values)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(labels_module, "_SLICE", piece)  # read a slice at a time
        patch.setattr(labels_module, "BULK_RUNS", 2)
        if len(expected) > most:
            with pytest.raises(labels_module.TooManySpans, match=f"more than {most:,} runs"):
                labels_module.run_length_spans(values, most)
        else:
            assert list(labels_module.run_length_spans(values, most)) == expected
