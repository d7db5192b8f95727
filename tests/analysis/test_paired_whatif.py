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
    like_errors,
    like_table,
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


def test_the_like_table_compares_each_figure_with_the_noise_floor() -> None:
    def figures(drops: float, gap: float | None) -> dict[str, float | None]:
        return {"steps": 12, "kept": 24, "dropped_stale": drops, "leftover": 4,
                "gap_mean": gap, "rejected_span": 5, "kept_pct": 60.0}  # fmt: skip

    table = like_table(
        {
            "w-k1-m1-r1": (figures(10, 0.5), figures(13, 0.5)),
            "w-k1-m1-r2": (figures(11, 0.5), figures(11, None)),
        }
    )
    rows = {line.split(" | ")[0].lstrip("| "): line for line in table.splitlines()}
    assert rows["stale drops"] == "| stale drops | 1.50 | 1.00 | yes |"
    assert rows["mean kept gap"] == "| mean kept gap | 0.000 | 0.000 | yes |"
    assert rows["trainer steps"] == "| trainer steps | 0 | 0 | yes |"


@pytest.mark.slow
def test_simulate_like_at_the_own_setting_of_every_paired_run(tmp_path: Path) -> None:
    """docs/semantics.md §12.8's table: steps and kept exact, leftovers and gap within 2x
    the noise floor, stale drops (not within 2x) bounded."""
    figures = like_errors(extract_runs(PAIRED, tmp_path))
    assert len(figures) >= 20
    rows = {line.split(" | ")[0].lstrip("| "): line for line in like_table(figures).splitlines()}
    for label in ("trainer steps", "kept groups", "leftovers", "mean kept gap"):
        assert rows[label].endswith("| yes |"), rows[label]
    for run, sim in figures.values():
        assert sim["steps"] == run["steps"] and sim["kept"] == run["kept"]
    drops = [abs(sim["dropped_stale"] - run["dropped_stale"]) for run, sim in figures.values()]  # type: ignore[operator]
    assert sum(drops) / len(drops) <= 1.0, drops
