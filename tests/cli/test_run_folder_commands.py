"""Every command on a Dressage run folder (docs/semantics.md §12.7): each names the replay it
ran (Dressage's own loop for settings of K; the simple loop for policies, said so), and
the figures at the run's own setting are ``replay RUN``'s wherever they are shown."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any, Literal

import pytest
from typer.testing import CliRunner

import analysis
from cli.app import app
from tests.cli.test_report import Page

runner = CliRunner()
OWN_K = 2  # k2-m1: the K its staleness metrics tell (and run.json records)


def _run(args: list[str]) -> Any:
    result = runner.invoke(app, args, terminal_width=250)
    assert result.exit_code == 0, result.stderr
    return result


@pytest.fixture(scope="module")
def folder(run_folders: dict[str, Path]) -> str:
    return str(run_folders["k2-m1"])


@pytest.fixture(scope="module")
def replayed(folder: str) -> dict[str, Any]:
    figures: dict[str, Any] = json.loads(
        _run(["replay", folder, "-k", str(OWN_K), "--json"]).stdout
    )
    assert figures["engine"] == "dressage-loop"
    return figures


def _kept_pct(figures: dict[str, Any]) -> float:
    return 100.0 * int(figures["groups"]["kept"]) / int(figures["groups"]["total"])


def test_replay_and_verify_name_dressages_loop(folder: str, replayed: dict[str, Any]) -> None:
    table = _run(["replay", folder, "-k", str(OWN_K)]).stdout
    assert table.splitlines()[0].strip() == "Dressage's partial loop: keep_versions=2"
    verified = json.loads(_run(["verify", folder, "--json"]).stdout)
    assert verified["engine"] == "dressage-loop" and verified["keep_versions"] == OWN_K


def test_sweep_rows_are_the_replays_and_say_their_engine(
    folder: str, replayed: dict[str, Any]
) -> None:
    rows = json.loads(_run(["sweep", folder, "-k", "1..3", "--json"]).stdout)
    assert {row["engine"] for row in rows} == {"dressage-loop"}
    (own,) = [row for row in rows if row["own_setting"]]
    assert own["keep_versions"] == OWN_K
    assert own["groups_kept_pct"] == pytest.approx(_kept_pct(replayed))
    assert own["version_gap_mean"] == pytest.approx(replayed["version_gap"]["mean"])
    assert {row["figures_from"] for row in rows} == {"replay", "model"}
    assert own["figures_from"] == "replay" and own["modelled_pct"] == 0.0
    table = _run(["sweep", folder, "-k", "1..3"]).stdout
    assert "Sweep (shares in %) on Dressage's partial loop" in table
    assert f"{OWN_K} own" in table and "kept range" in table and "modelled" in table
    replayed_only = _run(["sweep", folder, "-k", "1..3", "--what-if", "replay"]).stdout
    assert "batches" in replayed_only and "short" in replayed_only
    other_m = _run(["sweep", folder, "-k", "2", "-m", "none,1", "--what-if", "replay"]).stdout
    assert "none n/a" in other_m and "M not applied" in other_m
    modelled_m = json.loads(_run(["sweep", folder, "-k", "2", "-m", "none,1", "--json"]).stdout)
    (no_m,) = [row for row in modelled_m if row["max_preempts"] is None]
    assert no_m["max_preempts_applied"] and no_m["rejected_span_pct"] == 0.0


@pytest.mark.parametrize("kind", ["sweep", "heatmap", "spans", "gaps", "timeline"])
def test_every_plot_is_drawn_from_dressages_loop(folder: str, kind: str, tmp_path: Path) -> None:
    target = tmp_path / f"{kind}.png"
    _run(["plot", kind, folder, "-k", "1..3", "-o", str(target)])
    assert target.stat().st_size > 0
    run = analysis.read_run(folder)
    figure = analysis.make_run_plot(kind, run, keep_versions=[OWN_K, 3], max_preempts=[])
    titles = [figure.get_suptitle(), *(ax.get_title() for ax in figure.axes)]
    assert any("Dressage's partial loop" in title for title in titles), titles


@pytest.mark.parametrize("what_if", ["model", "replay"])
def test_a_heatmap_boxes_the_replayed_setting_among_modelled_ones(
    folder: str, what_if: Literal["model", "replay"]
) -> None:
    from matplotlib.patches import Rectangle

    run = analysis.read_run(folder)
    figure = analysis.make_run_plot(
        "heatmap", run, keep_versions=[1, OWN_K, 3], max_preempts=[None, 1], what_if=what_if
    )
    (ax, _) = figure.axes
    boxes = [p for p in ax.patches if isinstance(p, Rectangle) and not p.get_fill()]
    if what_if == "replay":  # every cell a replay: nothing to tell apart
        assert not boxes and "boxed" not in ax.get_title()
        return
    assert "boxed = own setting, replayed" in ax.get_title()
    (box,) = boxes  # one own setting: K=2 (column 1), M=1 (row 1)
    assert box.get_xy() == pytest.approx((1 - 0.48, 1 - 0.48))
    sweep = analysis.make_run_plot("sweep", run, keep_versions=[1, OWN_K], max_preempts=[1])
    assert "the rest simulated on the run's model" in sweep.get_suptitle()


@pytest.mark.parametrize("kind", ["spans", "timeline"])
def test_a_single_setting_plot_of_a_run_folder_draws_its_own_k(
    folder: str, kind: str, tmp_path: Path
) -> None:
    target = tmp_path / f"{kind}.png"
    result = _run(["plot", kind, folder, "-o", str(target)])
    assert target.stat().st_size > 0
    assert f"drew the run's own setting, K={OWN_K} as its staleness metrics tell" in " ".join(
        result.stderr.split()
    )


def test_report_shows_the_runs_loop(folder: str, replayed: dict[str, Any], tmp_path: Path) -> None:
    target = tmp_path / "run.html"
    _run(["report", folder, "-k", "1..3", "-o", str(target)])
    page = Page.of(target)
    sweep = page.table("Sweep (shares in %) on Dressage's partial loop")
    (own,) = [row for row in sweep.rows if row[sweep.headers.index("K")] == f"{OWN_K} own"]
    assert own[sweep.headers.index("groups kept")] == f"{_kept_pct(replayed):.1f}"
    text = html.unescape(target.read_text())
    # the setting looked at closely is the run's own, its figures the run loop's
    assert "Decisions (K=2, M=1, B=2, on Dressage's partial loop)" in text
    assert "every figure replayed on Dressage's partial loop" in text
    assert "-b" not in page.about()["to reproduce"].split()
    # every setting is on the run's loop: no warning that it is read on the simple loop,
    # and the header names the M it was swept at
    assert "read as one log on the simple loop" not in text
    assert page.about()["M (max preempts)"] == "the run's own: 1"


def test_compare_replays_each_run_folder_on_its_loop(
    folder: str, replayed: dict[str, Any], run_folders: dict[str, Path]
) -> None:
    other = str(run_folders["k3-m2-n8"])
    compared = json.loads(_run(["compare", folder, other, "-k", str(OWN_K), "--json"]).stdout)
    assert [run["engine"] for run in compared["runs"]] == ["dressage-loop", "dressage-loop"]
    (kept,) = [row for row in compared["table"] if row["metric"] == "groups kept (%)"]
    assert kept["k2-m1"] == pytest.approx(_kept_pct(replayed))
    assert "Comparison on Dressage's loop" in _run(["compare", folder, other, "-k", "2"]).stdout


def test_inspect_says_which_replay_settings_get(folder: str) -> None:
    found = json.loads(_run(["inspect", folder, "--json"]).stdout)
    assert found["engine"] == "dressage-loop" and found["run_batch_groups"] == 2


def test_policies_run_on_the_runs_loop_and_replay_policy_on_the_simple_loop(
    folder: str, replayed: dict[str, Any]
) -> None:
    args = ["sweep", folder, "--policy", "dressage:k=2,m=1", "--policy", "prime-rl"]
    own, prime = json.loads(_run([*args, "--json", "--draws", "2"]).stdout)
    assert own["engine"] == prime["engine"] == "dressage-loop"
    assert own["figures_from"] == "replay" and prime["figures_from"] == "model"
    assert own["groups_kept_pct"] == pytest.approx(_kept_pct(replayed))
    assert prime["knobs"] == {"max_off_policy_steps": 8, "clock": "own"}
    assert prime["clock"] == "steps"  # prime-rl's own counter, exact in the loop
    table = _run(args)
    assert "On the run's own loop" in " ".join(table.stdout.split())
    assert "read as one log on the simple loop here" not in table.stderr
    simple = _run(
        ["sweep", folder, "--policy", "dressage:k=2,m=1", "--json", "--what-if", "replay"]
    )
    (row,) = json.loads(simple.stdout)
    assert row["engine"] == "simple-loop"
    assert "read as one log on the simple loop here" in simple.stderr
    # replay --policy: one decision per group of the folder read as one log (no what-if)
    replayed_policy = _run(["replay", folder, "--policy", "dressage:k=2,m=1", "--json"])
    assert json.loads(replayed_policy.stdout)["engine"] == "simple-loop"


@pytest.mark.parametrize(
    ("flag", "value", "said"),
    [
        ("--draws", "0", "from 1 to 1,000"),
        ("--draws", "1001", "from 1 to 1,000"),
        ("--seed", "-1", "0 or more"),
    ],
)
def test_draws_and_seed_out_of_range_are_usage_errors(
    folder: str, flag: str, value: str, said: str
) -> None:
    result = runner.invoke(app, ["sweep", folder, flag, value])
    assert result.exit_code == 2 and said in result.stderr, result.stderr
