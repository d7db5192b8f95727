"""`dressage-replay sweep` and `replay --bias`: rows equal single replays; who gets dropped."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal
from typer.testing import CliRunner

import analysis
from cli.app import app

runner = CliRunner()


def test_sweep_rows_equal_single_replays(small_logs: dict[str, Path]) -> None:
    log = str(small_logs["jsonl"])
    result = runner.invoke(app, ["sweep", log, "-k", "0..3", "-m", "none,0..2", "--json"])
    assert result.exit_code == 0, result.stderr
    rows = json.loads(result.stdout)
    assert len(rows) == 4 * 4
    assert {(r["keep_versions"], r["max_preempts"]) for r in rows} == {
        (k, m) for k in range(4) for m in (None, 0, 1, 2)
    }
    for row in rows:
        m = "none" if row["max_preempts"] is None else str(row["max_preempts"])
        single = runner.invoke(
            app, ["replay", log, "-k", str(row["keep_versions"]), "-m", m, "--json"]
        )
        summary = json.loads(single.stdout)
        assert row["batch_groups"] == summary["config"]["batch_groups"]
        assert row["groups_kept_pct"] == pytest.approx(100 * summary["groups"]["rates"]["kept"])
        assert row["tokens_kept_pct"] == pytest.approx(100 * summary["tokens"]["rates"]["kept"])
        assert row["dropped_arrival_pct"] == pytest.approx(
            100 * summary["groups"]["rates"]["dropped_stale_arrival"]
        )
        assert row["rejected_span_pct"] == pytest.approx(
            100 * summary["groups"]["rates"]["rejected_span"]
        )
        assert row["batches_emitted"] == summary["batches"]["emitted"]
        assert row["version_gap_mean"] == summary["version_gap"]["mean"]
        assert row["version_gap_max"] == summary["version_gap"]["max"]
        assert row["version_span_max"] == summary["version_span"]["kept"]["max"]


def test_pareto_marks_exactly_the_undominated_rows(small_logs: dict[str, Path]) -> None:
    prepared = analysis.prepare(analysis.load_logs([small_logs["jsonl"]]))
    rows = analysis.sweep(prepared, keep_versions=range(5), max_preempts=[None, 0, 1, 2]).rows
    points = rows.select("tokens_kept_pct", "version_gap_mean", "pareto").rows()
    assert any(p for *_, p in points) and not all(p for *_, p in points)
    for kept, gap, efficient in points:
        better = [
            (k, g) for k, g, _ in points
            if k is not None and g is not None and k >= kept and g <= gap and (k > kept or g < gap)
        ]  # fmt: skip
        assert efficient == (gap is not None and not better)


@pytest.mark.parametrize("suffix", [".csv", ".parquet", ".json"])
def test_sweep_output_file(small_logs: dict[str, Path], tmp_path: Path, suffix: str) -> None:
    target = tmp_path / f"sweep{suffix}"
    result = runner.invoke(
        app, ["sweep", str(small_logs["pt"]), "-k", "0,2", "-m", "none,1", "-o", str(target)]
    )
    assert result.exit_code == 0, result.stderr
    assert "Pareto-efficient" in result.stdout
    readers: dict[str, Callable[[Path], pl.DataFrame]] = {
        ".csv": pl.read_csv,
        ".parquet": pl.read_parquet,
        ".json": pl.read_json,
    }
    read = readers[suffix]
    frame = read(target)
    prepared = analysis.prepare(analysis.load_logs([small_logs["pt"]]))
    expected = analysis.sweep(prepared, keep_versions=[0, 2], max_preempts=[None, 1]).rows
    assert_frame_equal(frame, expected, check_dtypes=False)


def test_lists_take_whole_numbers_as_single_values_do() -> None:
    """One rule: "3.0" was a K for replay but not in a sweep's list."""
    assert analysis.parse_keep_versions("0.0..2,3.0") == [0, 1, 2, 3]
    assert analysis.parse_max_preempts("none,1.") == [None, 1]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-k", "1..x"], "--keep-versions"),
        (["-m", "3..1"], "--max-preempts"),
        (["-k", "0,\u0663"], "(found '\u0663')"),  # int() takes other scripts' digits
        (["-k", "1e3"], "(found '1e3')"),
    ],
)
def test_bad_lists_are_usage_errors(
    small_logs: dict[str, Path], args: list[str], message: str
) -> None:
    result = runner.invoke(app, ["sweep", str(small_logs["jsonl"]), *args])
    assert result.exit_code == 2
    assert message in result.stderr


@pytest.mark.parametrize("command", ["sweep", "report", "plot"])
@pytest.mark.parametrize("values", ["-1", "0..-1", "2,1000001"])
def test_values_out_of_range_are_invalid_settings_as_in_replay(
    small_logs: dict[str, Path], tmp_path: Path, command: str, values: str
) -> None:
    """Exit 7, as `replay -k -1` (a list that does not parse is a usage error, exit 2)."""
    output = {
        "sweep": [],
        "report": ["-o", tmp_path / "r.html"],
        "plot": ["-o", tmp_path / "p.png"],
    }
    args = [command, *(["spans"] if command == "plot" else []), small_logs["jsonl"]]
    result = runner.invoke(app, [str(a) for a in [*args, "-k", values, *output[command]]])
    assert result.exit_code == 7, result.stderr
    found = "1,000,001" if "1000001" in values else "-1"
    assert f"values must be between 0 and 1,000,000 (found {found}); give values" in " ".join(
        result.stderr.replace("│", " ").split()
    )
    assert list(tmp_path.iterdir()) == []


def test_replay_bias_compares_outcomes(small_logs: dict[str, Path]) -> None:
    log = str(small_logs["jsonl"])
    result = runner.invoke(app, ["replay", log, "-k", "1", "-m", "0", "--bias", "--json"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    by_outcome = {row["outcome"]: row for row in data["bias"]["by_outcome"]}
    assert set(by_outcome) == {"kept", "dropped_stale", "rejected_span", "failed"}
    for outcome in ("kept", "dropped_stale", "rejected_span", "failed"):
        assert by_outcome[outcome]["groups"] == data["groups"][outcome]
        assert by_outcome[outcome]["trajectories"] == data["trajectories"][outcome]
    never = data["bias"]["never_batched"]
    assert len(never) == data["groups"]["total"] - data["groups"]["kept"]
    # Span rejection at M=0 removes exactly the trajectories that switched versions while
    # generating, which are the long ones: the bias the table is there to show.
    assert (
        by_outcome["rejected_span"]["tokens_per_trajectory_mean"]
        > by_outcome["kept"]["tokens_per_trajectory_mean"]
    )
    table = runner.invoke(app, ["replay", log, "-k", "1", "-m", "0", "--bias"])
    assert "Who gets dropped" in table.stdout and "never reached a batch" in table.stdout


@pytest.mark.parametrize("abort_fraction", [0.0, 0.3])
def test_the_table_shows_failed_groups_when_there_are_some(
    tmp_path: Path, abort_fraction: float
) -> None:
    log = tmp_path / "log.jsonl"
    config = analysis.SimulationConfig(n_groups=40, abort_fraction=abort_fraction, seed=2)
    analysis.write_log(analysis.simulate(config), log, "jsonl")
    args = ["sweep", str(log), "-k", "0,2", "-m", "none,1"]
    table = runner.invoke(app, args)
    assert table.exit_code == 0, table.stderr
    rows = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    shares = ("groups_kept_pct", "dropped_stale_pct", "rejected_span_pct", "failed_pct")
    for row in rows:
        assert sum(row[share] for share in shares) == pytest.approx(100)
    header = table.stdout.splitlines()[3].split()  # the second line of the headers
    assert ("failed" in header) == (abort_fraction > 0)
    assert any(row["failed_pct"] > 0 for row in rows) == (abort_fraction > 0)
    if abort_fraction:
        failed_column = [line.split()[header.index("failed")] for line in _table_rows(table.stdout)]
        assert failed_column == [f"{row['failed_pct']:.1f}" for row in rows]
    assert "…" not in table.stdout  # the whole table fits the 120 columns of piped output


def _table_rows(text: str) -> list[str]:
    """The data lines of the sweep table, without the Pareto star."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if "───" in line) + 1
    end = next(i for i, line in enumerate(lines) if i > start and not line.strip())
    return [line.lstrip(" *") for line in lines[start:end]]


@pytest.mark.parametrize("width", [40, 60, 80, 100, 200])
def test_tables_too_wide_for_the_terminal_are_split_not_cut(
    small_logs: dict[str, Path], width: int
) -> None:
    import io

    from rich.console import Console

    from cli.render import print_bias, print_summary, print_sweep

    table = analysis.load_logs([small_logs["jsonl"]])
    prepared = analysis.prepare(table)
    result = analysis.sweep(prepared, keep_versions=[0, 2], max_preempts=[None, 1])
    out = io.StringIO()
    print_sweep(result, Console(file=out, width=width))
    text = out.getvalue()
    assert "…" not in text
    assert all(len(line) <= width for line in text.splitlines())
    parts = text.count("Sweep (shares in %")
    assert (parts == 1) == (width >= 120)
    # Every part repeats K and M: each shows every setting's row.
    assert text.count(" none ") == 2 * parts
    replayed = analysis.replay(prepared, analysis.ReplayConfig(keep_versions=2))
    out = io.StringIO()
    out = io.StringIO()
    print_summary(replayed.summary, Console(file=out, width=width))  # the replay's own table
    assert "…" not in out.getvalue()
    assert out.getvalue().count("span rejected") == out.getvalue().count("Simple loop:")
    out = io.StringIO()
    report = analysis.who_gets_dropped(prepared, replayed, table=table)
    print_bias(report, Console(file=out, width=width))
    assert "…" not in out.getvalue()
    # Every part has the outcome column and a row per outcome.
    bias_parts = out.getvalue().split("Who gets dropped")[1:]
    assert len(bias_parts) == 1 if width >= 120 else bias_parts
    from analysis.views.bias import OUTCOME_WORDS  # the rows say the summary's words

    outcomes = [OUTCOME_WORDS[outcome] for outcome in report.table["outcome"].to_list()]
    for part in bias_parts:
        lines = [line.strip() for line in part.splitlines()]
        assert all(
            sum(line.startswith(f"{outcome} ") for line in lines) == 1 for outcome in outcomes
        ), part


def test_every_file_written_is_said_on_stderr(small_logs: dict[str, Path], tmp_path: Path) -> None:
    """sweep -o and replay --decisions wrote silently, unlike every other command."""
    from typer.testing import CliRunner

    from cli.app import app

    runner = CliRunner()
    rows, decisions = tmp_path / "rows.csv", tmp_path / "decisions.csv"
    swept = runner.invoke(app, ["sweep", str(small_logs["jsonl"]), "-k", "1", "-o", str(rows)])
    replayed = runner.invoke(
        app, ["replay", str(small_logs["jsonl"]), "--decisions", str(decisions)]
    )
    assert f"wrote {rows}" in swept.stderr and f"wrote {decisions}" in replayed.stderr


def test_a_figure_of_one_setting_says_which_it_drew(
    small_logs: dict[str, Path], tmp_path: Path
) -> None:
    """`plot spans -k 1,2 -m 1,2` silently used the first values."""
    from typer.testing import CliRunner

    from cli.app import app

    out = tmp_path / "spans.png"
    args = ["plot", "spans", str(small_logs["jsonl"]), "-k", "1,2", "-m", "1,2", "-o", str(out)]
    args.append("--force")  # one figure written over and over
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "draws one setting: K=1, M=1" in result.stderr
    one = CliRunner().invoke(app, [*args[:3], "-k", "2", "-m", "1", "-o", str(out), "--force"])
    assert "note:" not in one.stderr
    # with one control not given, the note says it was left off
    k_only = CliRunner().invoke(app, [*args[:3], "-k", "2", "-o", str(out), "--force"])
    assert k_only.exit_code == 0, k_only.output
    assert "drew K=2, M=off (--max-preempts not given, so off)" in k_only.stderr
    gaps = CliRunner().invoke(
        app, ["plot", "gaps", args[2], "-k", "1,2", "-o", str(out), "--force"]
    )
    assert "drew K=1, 2 at M=off (--max-preempts not given, so off)" in gaps.stderr


def test_a_figure_of_one_setting_needs_a_setting(
    small_logs: dict[str, Path], tmp_path: Path
) -> None:
    """`plot spans LOG` without -k/-m silently drew both controls off, with a note about
    "the first of those given" when none were given: now a usage error saying what to give."""
    from typer.testing import CliRunner

    from cli.app import app

    out = tmp_path / "spans.png"
    for kind in ("spans", "timeline"):
        result = CliRunner().invoke(app, ["plot", kind, str(small_logs["jsonl"]), "-o", str(out)])
        assert result.exit_code == 2
        assert "give -k K and -m M" in " ".join(result.stderr.replace("│", " ").split())
        assert not out.exists()
