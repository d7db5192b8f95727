"""Fully-loop calls no trainer's weight-update line times (docs/semantics.md §12.4): the
search tries a near-tie the other way at a cut before a later cut, and a second reading
tries the latest cuts first."""

from __future__ import annotations

from analysis.engine.run_loop.collector import Collector, PollTiming
from analysis.engine.run_loop.fully import FullyCollector
from analysis.engine.run_loop.inference import _call_replays, search_call_starts
from tests.analysis.test_ticks import make_attempt

TIMING = PollTiming()


def collector() -> Collector:
    # g0 and g1 share a tick (5 ms apart); g2 and g3 come later, 200 ms apart
    attempts = [make_attempt(0, 1.000), make_attempt(1, 1.005), make_attempt(2, 1.2)]
    attempts.append(make_attempt(3, 1.4))
    return FullyCollector(attempts, keep_versions=0, max_retries=2, timing=TIMING)


def kinds(expected: dict[int, float], *, latest: bool = False) -> list[tuple[float, bool]]:
    """(start, whether the replay changed the files' order or polls), in the order tried."""
    base = collector()
    found = []
    for start, trial, _ in _call_replays(
        base, 0, 1, None, 3, final=False, expected=expected, latest=latest
    ):
        end = len(base.order)
        changed = trial.order != base.order or trial.poll_breaks(0, end) != base.poll_breaks(0, end)
        found.append((start, changed))
    return found


def test_an_untimed_call_tries_a_tie_at_a_cut_before_a_later_cut() -> None:
    tried = kinds({})
    starts = [start for start, changed in tried if not changed]
    first_change = next(i for i, (_, changed) in enumerate(tried) if changed)
    later_cut = next(i for i, (start, changed) in enumerate(tried) if start > starts[0])
    assert first_change < later_cut
    cuts = list(dict.fromkeys(starts))  # each cut first as the files order it
    assert cuts == sorted(cuts)


def test_a_timed_call_tries_every_cut_as_the_files_order_first() -> None:
    tried = kinds({0: 1.1})
    changed = [c for _, c in tried]
    assert True in changed
    assert changed == sorted(changed)  # every as-is cut, then the reorderings


def test_the_latest_reading_tries_the_latest_cut_first() -> None:
    plain = list(dict.fromkeys(start for start, changed in kinds({}) if not changed))
    latest = list(dict.fromkeys(s for s, changed in kinds({}, latest=True) if not changed))
    assert len(plain) > 1
    assert latest == sorted(plain, reverse=True)


def test_a_call_no_placement_reproduces_is_reported_unmatched() -> None:
    """A step whose dump no cut of the completions gives (here: call 1 keeping g0 again,
    which call 0 kept) is placed where it comes closest and reported, so that its
    decisions can be left unknown."""
    base = collector()
    unmatched: set[int] = set()
    starts, notes, _ = search_call_starts(
        base.order, 1, 1, {0: {"g0/t0"}, 1: {"g0/t0"}}, {},
        keep_versions=0, max_retries=2, timing=TIMING, collector_class=FullyCollector,
        unmatched=unmatched,
    )  # fmt: skip
    assert unmatched == {1}
    assert set(starts) == {0, 1}
    assert any("call 1" in note for note in notes)
    unmatched.clear()
    search_call_starts(
        base.order, 1, 1, {0: {"g0/t0"}, 1: {"g1/t0"}}, {},
        keep_versions=0, max_retries=2, timing=TIMING, collector_class=FullyCollector,
        unmatched=unmatched,
    )  # fmt: skip
    assert unmatched == set()
