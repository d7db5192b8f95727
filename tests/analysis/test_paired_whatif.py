"""The what-if of a run folder's sweep against real runs at the other setting (issue 30,
docs/semantics.md §12.8): every prediction of the paired fixtures within issue 30's bound,
and better than the "no change" answer (the source run's own figures)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.paired_runs import (
    BOTH,
    LOOSER_K,
    LOOSER_M,
    METRICS,
    PAIRED,
    STRICTER_K,
    STRICTER_M,
    direction,
    mae,
    measure,
    noise_floor,
    parse_name,
)
from tests.real_runs import extract_runs


def test_paired_names_and_directions() -> None:
    run = parse_name("pa-wG-k2-mnone-r1")
    assert (run.workload, run.setting, run.repeat) == ("pa-wG", (2, None), 1)
    with pytest.raises(ValueError, match="not a paired run's name"):
        parse_name("pa-wG-k2")
    assert direction((2, 1), (1, 1)) == STRICTER_K
    assert direction((2, 1), (0, 1)) == LOOSER_K  # K = 0: no filter, the loosest
    assert direction((2, 1), (2, None)) == LOOSER_M
    assert direction((2, None), (2, 0)) == STRICTER_M
    assert direction((2, 1), (3, 0)) == BOTH


@pytest.mark.slow
def test_every_paired_what_if_is_within_issue_30s_bound(tmp_path: Path) -> None:
    folders = extract_runs(PAIRED, tmp_path)
    assert len(folders) >= 20
    whatif = measure(folders, draws=3)
    assert len(whatif.predictions) >= 80
    floor, settings = noise_floor(whatif)
    assert settings >= 10
    for metric in METRICS:
        error = mae(whatif.predictions, metric.key)
        assert error is not None and error <= metric.threshold, (metric.label, error)
    for key in ("kept", "span"):  # the model says more than "nothing changes"
        model, unchanged = (mae(whatif.predictions, key, unchanged=u) for u in (False, True))
        assert model is not None and unchanged is not None and model < unchanged / 2
        noise = floor[key]
        assert noise is not None and noise < 3.0
