"""`replay --policy` and `sweep --policy` (docs/semantics.md §13): every input format the
tool reads, the policy and its knobs in --json, one sweep table, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import analysis
from analysis.rules.policies import parse_policy, replay_policy
from cli.app import app
from tests.figures import bars

runner = CliRunner()

SPECS = (
    "dressage:k=2,m=1",
    "prime-rl:max_off_policy_steps=1",
    "verl-drop:max_off_policy_threshold=2",
    "nemo-windowed:max_staleness_versions=1",
    "nemo-windowed:max_staleness_versions=1,order=freshest",
)
SAMPLES = ("sample_data/rollouts.jsonl", "sample_data/dumps", "sample_data/artifacts")


@pytest.mark.parametrize("sample", SAMPLES)
@pytest.mark.parametrize("spec", SPECS)
def test_replay_policy_on_every_sample_format(sample: str, spec: str) -> None:
    result = runner.invoke(app, ["replay", sample, "--policy", spec, "--json"])
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    policy = parse_policy(spec)
    assert summary["policy"]["name"] == policy.name
    assert summary["policy"]["knobs"] == policy.knobs()
    assert summary["groups"]["total"] == 40
    assert set(summary["token_weighted"]) == {
        "version_gap_mean", "version_span_mean_kept", "version_span_mean_all",
    }  # fmt: skip
    terminal = runner.invoke(app, ["replay", sample, "--policy", spec])
    assert terminal.exit_code == 0, terminal.stderr
    assert "by response tokens  gap mean, kept" in terminal.stdout
    if not spec.startswith("dressage"):  # the clock that ran: in the title, --json, a note
        assert summary["policy"]["clock"] == "steps"
        assert "batch_groups=4  clock=steps" in terminal.stdout
        assert "clock: steps (the default, clock=own)" in " ".join(terminal.stdout.split())


def test_jsonl_and_dumps_give_the_same_peer_decisions() -> None:
    """The same run in two formats replays to the same figures under a peer rule."""
    figures = []
    for sample in SAMPLES[:2]:
        result = runner.invoke(
            app, ["replay", sample, "--policy", "prime-rl:max_off_policy_steps=1", "--json"]
        )
        figures.append({k: json.loads(result.stdout)[k] for k in ("groups", "version_gap")})
    assert figures[0] == figures[1]


@pytest.mark.parametrize("spec", SPECS[:4])
def test_replay_policy_on_a_real_run_folder(run_folders: dict[str, Path], spec: str) -> None:
    result = runner.invoke(app, ["replay", str(run_folders["k2-m1"]), "--policy", spec, "--json"])
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["policy"]["knobs"] == parse_policy(spec).knobs()
    assert summary["groups"]["total"] == 47
    assert summary["config"]["batch_groups"] == 2  # the run's own batch size
    assert "the run's own batch size" in result.stderr
    assert "checks" not in summary  # the simple loop, as sweep --policy: not the run's loop


def test_replay_policy_writes_decisions_with_the_start_version(tmp_path: Path) -> None:
    out = tmp_path / "decisions.csv"
    result = runner.invoke(
        app,
        ["replay", SAMPLES[0], "--policy", SPECS[1], "--decisions", str(out), "--json"],
    )
    assert result.exit_code == 0, result.stderr
    import polars as pl

    frame = pl.read_csv(out)
    assert frame.columns[:6] == [
        "group_id",
        "decision",
        "stage",
        "batch",
        "version_index",
        "version_gap",
    ]
    assert {"start_version", "start_version_index"} <= set(frame.columns)
    library = replay_policy(analysis.load_logs([Path(SAMPLES[0])]), parse_policy(SPECS[1]))
    assert frame["decision"].to_list() == library.decisions["decision"].to_list()


def test_sweep_policies_is_one_table_with_the_same_columns() -> None:
    args = ["sweep", SAMPLES[0]]
    for spec in SPECS:
        args += ["--policy", spec]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.stderr
    rows = json.loads(result.stdout)
    assert [row["policy"] for row in rows] == [parse_policy(s).label() for s in SPECS]
    plain = json.loads(
        runner.invoke(app, ["sweep", SAMPLES[0], "-k", "2", "-m", "1", "--json"]).stdout
    )
    assert set(plain[0]) | {"policy", "knobs", "clock"} == set(rows[0])
    # Each peer rule on its own clock (none of these logs is its system's: steps).
    assert [row["clock"] for row in rows] == [None, "steps", "steps", "steps", "steps"]
    for row, spec in zip(rows, SPECS, strict=True):
        single = json.loads(
            runner.invoke(app, ["replay", SAMPLES[0], "--policy", spec, "--json"]).stdout
        )
        assert row["groups_kept_pct"] == pytest.approx(100 * single["groups"]["rates"]["kept"])
        assert row["version_gap_mean_tokens"] == single["token_weighted"]["version_gap_mean"]
    terminal = runner.invoke(app, args)
    assert terminal.exit_code == 0, terminal.stderr
    assert terminal.stdout.count("Sweep (shares in %)") >= 1
    for spec in SPECS:
        assert parse_policy(spec).label() in terminal.stdout


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (["--policy", "tinker:eta=1"], 7, "no policy named 'tinker'; known: dressage:"),
        (["--policy", "areal:eta=1"], 7, "give it as --admission areal:max_head_offpolicyness=N"),
        (["--policy", "dressage:k=2000000"], 7, "require k= (keep_versions) between 0 and"),
        (["--policy", "dressage:k=2,k=3"], 7, "keep_versions is given twice"),
        (["--policy", "prime-rl:max_off_policy_steps=-1"], 7, "between 0 and"),
        (["--policy", "nemo-windowed:max_staleness_versions=1,order=random"], 7, "fifo, freshest"),
        (["--policy", "prime-rl", "-k", "2"], 2, "give K and M"),
    ],
)
def test_bad_policy_specs_are_one_line(args: list[str], code: int, says: str) -> None:
    for command in ("replay", "sweep"):
        result = runner.invoke(app, [command, SAMPLES[0], *args])
        assert result.exit_code == code, result.output
        if code == 2:  # a usage error, in typer's words (as every flag's)
            assert says in result.stderr and "--policy" in result.stderr
            continue
        error = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(error) == 1 and says in error[0], result.stderr
        assert error[0].startswith("Error: --policy ")


def test_replay_takes_one_policy_and_says_a_default_bound() -> None:
    two = runner.invoke(app, ["replay", SAMPLES[0], "--policy", "prime-rl", "--policy", "dressage"])
    assert two.exit_code == 2 and "replay takes one policy (given 2)" in two.stderr
    alone = runner.invoke(app, ["replay", SAMPLES[0], "--policy", "prime-rl", "--json"])
    assert alone.exit_code == 0, alone.stderr
    assert json.loads(alone.stdout)["policy"]["knobs"]["max_off_policy_steps"] == 8
    assert "note: --policy prime-rl: max_off_policy_steps=8, prime-rl's default" in alone.stderr
    given = runner.invoke(
        app, ["replay", SAMPLES[0], "--policy", "prime-rl:max_off_policy_steps=8"]
    )
    assert "default" not in given.stderr


def test_sweep_gives_a_policy_given_twice_one_row() -> None:
    result = runner.invoke(app, [
        "sweep", SAMPLES[0], "--json", "--policy", "prime-rl:max_off_policy_steps=1",
        "--policy", "dressage:k=2", "--policy", "prime-rl:max_off_policy_steps=1,clock=own",
    ])  # fmt: skip
    assert result.exit_code == 0, result.stderr
    rows = json.loads(result.stdout)
    assert [row["policy"] for row in rows] == [
        "prime-rl:max_off_policy_steps=1",
        "dressage:k=2,m=none",
    ]
    assert "prime-rl:max_off_policy_steps=1,clock=own: given twice; one row" in result.stderr


def test_plot_sweep_of_policies_draws_every_policy(tmp_path: Path) -> None:
    from analysis.rules.policies import sweep_policies
    from analysis.views.policy_plots import plot_policies

    prepared = analysis.prepare(analysis.load_logs([Path(SAMPLES[0])]))
    result = sweep_policies(prepared, [parse_policy(s) for s in SPECS])
    scatter_ax, loss_ax = plot_policies(result).axes
    drawn = scatter_ax.get_legend()
    assert drawn is not None
    # every policy named once, those that decide alike in one entry ("A\n= B")
    legend = [name for text in drawn.get_texts() for name in text.get_text().split("\n= ")]
    assert [parse_policy(s).label() for s in SPECS] == legend[: len(SPECS)]
    # One bar per policy and outcome, of the outcome's share.
    assert len(loss_ax.patches) == 4 * len(SPECS)
    widths = [bar.get_width() for bar in bars(loss_ax.patches[: len(SPECS)])]
    assert widths == pytest.approx(result.rows["dropped_arrival_pct"].to_list())
    out = tmp_path / "policies.png"
    args = ["plot", "sweep", SAMPLES[0], "-o", str(out)]
    for spec in SPECS[:3]:
        args += ["--policy", spec]
    done = runner.invoke(app, args)
    assert done.exit_code == 0, done.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    refused = runner.invoke(
        app, ["plot", "spans", SAMPLES[0], "-o", str(out), "--policy", SPECS[1]]
    )
    assert refused.exit_code == 2


def test_plot_of_policies_tells_coinciding_points_and_keeps_its_legend_out_of_the_way() -> None:
    """Policies that decide alike share one marker, at their own point, with one label
    naming them all (drawn apart, 36.2 and 34.8 read as a difference where both are
    35.5); the legend is under the axes (ten policies covered the points and the y
    label); the losses are greys, not any policy's colour."""
    from matplotlib.colors import to_rgba

    from analysis.rules.policies import sweep_policies
    from analysis.views.policy_plots import coinciding, plot_policies

    prepared = analysis.prepare(analysis.load_logs([Path(SAMPLES[0])]))
    specs = [*SPECS, "prime-rl:max_off_policy_steps=2", "dressage:k=1", "dressage:k=3",
             "verl-drop:max_off_policy_threshold=3", "prime-rl:max_off_policy_steps=1,clock=versions"]  # fmt: skip
    result = sweep_policies(prepared, [parse_policy(s) for s in specs])
    alike = coinciding(result.rows, "tokens_kept_pct")
    assert [1, 2, 3, 4] in alike  # prime-rl M=1, verl T=2 and both NeMo-RL orders (§13.4)
    figure = plot_policies(result)
    scatter_ax, loss_ax = figure.axes
    legend = scatter_ax.get_legend()
    assert legend is not None
    labels = [text.get_text() for text in legend.get_texts()]
    policies = result.rows["policy"].to_list()
    (shared,) = [label for label in labels if policies[1] in label.split("\n= ")]
    assert shared.split("\n= ") == policies[1:5]  # one entry names the four
    points = len(result.rows) - sum(len(members) - 1 for members in alike)
    filled = [c for c in scatter_ax.collections if c.get_label() in labels[:points]]
    assert len(filled) == points
    kept_of = dict(zip(policies, result.rows["tokens_kept_pct"].to_list(), strict=True))
    for collection in filled:  # each marker at its own value: nothing moved apart
        y = float(collection.get_offsets()[0][1])  # type: ignore[index,arg-type]
        assert y == pytest.approx(kept_of[str(collection.get_label()).split("\n")[0]])
    assert "decide alike" in legend.get_title().get_text()
    kept = [v for v in result.rows["tokens_kept_pct"].to_list() if v is not None]
    low, high = scatter_ax.get_ylim()
    assert low < min(kept) and max(kept) < high  # every point in view, shifted ones too
    figure.canvas.draw()
    box, axes = legend.get_window_extent(), scatter_ax.get_window_extent()
    assert box.y1 <= axes.y0  # under the axes, not over the points
    policy_colours = {to_rgba(f"C{n}") for n in range(10)}
    assert not {to_rgba(bar.get_facecolor()) for bar in loss_ax.patches} & policy_colours


@pytest.mark.parametrize(
    ("log", "says"),
    [
        ("empty", "no records: no kept share to show"),
        ("verl", "no weight versions in the log: no version gap to show"),
    ],
)
def test_plot_of_policies_says_why_it_is_blank(tmp_path: Path, log: str, says: str) -> None:
    from tests.fixtures.peer_logs import write_all

    path = tmp_path / "empty.jsonl"
    path.write_text("")
    if log == "verl":
        path = write_all(tmp_path)["verl"]
    out = tmp_path / "policies.png"
    done = runner.invoke(app, ["plot", "sweep", str(path), "-b", "2", "-o", str(out),
                               "--policy", "prime-rl:max_off_policy_steps=1"])  # fmt: skip
    assert done.exit_code == 0, done.stderr
    from analysis.rules.policies import sweep_policies
    from analysis.views.policy_plots import plot_policies

    table = analysis.load_logs([path])
    result = sweep_policies(analysis.prepare(table), [parse_policy("dressage:k=2")], batch_groups=2)
    scatter_ax = plot_policies(result).axes[0]
    assert says in [text.get_text() for text in scatter_ax.texts]


def test_report_compares_policies_in_a_section_of_their_own(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    args = ["report", SAMPLES[0], "-o", str(out), "-k", "2", "-m", "1"]
    for spec in SPECS[:3]:
        args += ["--policy", spec]
    done = runner.invoke(app, args)
    assert done.exit_code == 0, done.stderr
    page = out.read_text()
    section = page.split("<section id='policies'>", 1)[1].split("</section>", 1)[0]
    for spec in SPECS[:3]:
        assert parse_policy(spec).label() in section
    assert "data:image/png;base64," in section  # the figure, inline
    assert "tok. gap mean" in section
    # The command that writes the report again names the policies.
    assert " --policy prime-rl:max_off_policy_steps=1 " in page
    plain = tmp_path / "plain.html"
    runner.invoke(app, ["report", SAMPLES[0], "-o", str(plain), "-k", "2", "-m", "1"])
    assert "id='policies'" not in plain.read_text()


def test_a_policy_on_a_run_folder_is_the_same_loop_in_replay_and_sweep(
    run_folders: dict[str, Path],
) -> None:
    """replay --policy and sweep --policy --what-if replay replay a run folder alike (the
    simple loop, the run's own B), and the JSON's spec is what was applied; replay -k is
    the run's loop, and so is sweep --policy (docs/semantics.md §12.9)."""
    folder = str(run_folders["k3-m2-n8"])
    spec = "dressage:k=3,m=2"
    replayed = runner.invoke(app, ["replay", folder, "--policy", spec, "--json"])
    swept = runner.invoke(app, ["sweep", folder, "--policy", spec, "--json", "--what-if", "replay"])
    assert replayed.exit_code == 0 and swept.exit_code == 0, replayed.stderr + swept.stderr
    summary, row = json.loads(replayed.stdout), json.loads(swept.stdout)[0]
    assert row["groups_kept_pct"] == pytest.approx(100 * summary["groups"]["rates"]["kept"])
    on_loop = json.loads(runner.invoke(app, ["sweep", folder, "--policy", spec, "--json"]).stdout)
    assert summary["policy"]["spec"] == "dressage:keep_versions=3,max_preempts=2"
    assert summary["config"]["max_preempts"] == 2  # as the spec says: applied
    assert "--max-preempts" not in replayed.stderr and "is not applied" not in replayed.stderr
    assert "read as one log on the simple loop here, not on its own loop" in replayed.stderr
    verbose = runner.invoke(app, ["replay", folder, "--policy", spec, "--verbose"])
    assert "settings of K (replay, sweep, plot, report, compare, verify) are replayed as " in (
        verbose.stderr
    )
    own = json.loads(runner.invoke(app, ["replay", folder, "-k", "3", "--json"]).stdout)
    assert own["groups"]["kept"] != summary["groups"]["kept"]  # the run's loop: 58.8%, not 76.5%
    kept = 100 * own["groups"]["kept"] / own["groups"]["total"]
    assert on_loop[0]["groups_kept_pct"] == pytest.approx(kept)


def test_a_control_that_is_off_reads_the_same_in_the_title_the_label_and_the_spec() -> None:
    """K off is "off" and M off is "none" everywhere: the replay title, the policy's label
    and spec (as in the plots' legends); both parse back to the same policy."""
    title = runner.invoke(app, ["replay", SAMPLES[0], "-k", "off", "-m", "off"]).stdout
    assert title.splitlines()[0].startswith("Simple loop: keep_versions=off  max_preempts=none  ")
    policy = parse_policy("dressage:k=0,m=off")
    assert policy.label() == "dressage:k=off,m=none"
    assert policy.spec() == "dressage:keep_versions=off,max_preempts=none"
    assert parse_policy(policy.label()) == parse_policy(policy.spec()) == policy
    by_policy = runner.invoke(app, ["replay", SAMPLES[0], "--policy", "dressage:k=off"]).stdout
    assert by_policy.splitlines()[0] == title.splitlines()[0]


def test_a_policy_sweep_with_long_specs_reads_at_80_columns() -> None:
    """At 80 columns, long specs would leave one data column per table (14 tables, headers
    cut to "sampl…"): the table names each policy P1, P2, ... and lists the specs under it;
    at 120 columns the specs stay in the table."""
    import io

    from rich.console import Console

    from analysis.rules.policies import sweep_policies
    from cli.render import print_policy_sweep

    specs = [
        "dressage:k=3,m=2",
        "prime-rl:max_off_policy_steps=1,clock=steps",
        "nemo-windowed:max_staleness_versions=1,order=freshest",
    ]
    prepared = analysis.prepare(analysis.load_logs([Path(SAMPLES[0])]))
    rows = sweep_policies(prepared, [parse_policy(spec) for spec in specs]).rows
    narrow = io.StringIO()
    print_policy_sweep(rows, Console(file=narrow, width=80))
    text = narrow.getvalue()
    assert text.count("Sweep (shares in %)") <= 2 and "…" not in text
    assert "other systems' rules on clock=steps" in text  # one clock: said once
    assert all(len(line.rstrip()) <= 80 for line in text.splitlines())
    for n, spec in enumerate(specs, start=1):
        assert f"P{n}  {parse_policy(spec).label()}" in text
    wide = io.StringIO()
    print_policy_sweep(rows, Console(file=wide, width=120))
    assert "P1" not in wide.getvalue() and specs[2] in wide.getvalue()


def test_prime_rl_on_its_own_log_runs_on_the_step_the_log_records(tmp_path: Path) -> None:
    """docs/semantics.md §13.2 (issue 31): on prime-rl's own ``rollouts/step_N/``, the
    default clock is the step each group arrived at (N - 1 the version batch N trains),
    and the outputs say so. (start, end) = (0, 0) at step 1, (3, 3) and (0, 3) at step 5
    with M = 1: the last group is 4 versions behind; the old default (positions of
    observed versions) kept it at lag 1."""
    from tests.fixtures.peer_logs import _lines, prime_episode

    base = tmp_path / "rollouts"
    _lines(base / "step_1/train/all/traces.jsonl", [prime_episode("e1", "g1", 0, 0, step=1)])
    _lines(
        base / "step_5/train/all/traces.jsonl",
        [prime_episode("e2", "g2", 3, 3, step=5), prime_episode("e3", "g3", 0, 3, step=5)],
    )
    args = ["replay", str(base), "--policy", "prime-rl:max_off_policy_steps=1", "-b", "1"]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["policy"]["clock"] == "logged"
    assert summary["policy"]["lag_unit"] == "version numbers"
    assert summary["groups"]["kept"] == 2 and summary["groups"]["dropped_stale"] == 1
    terminal = runner.invoke(app, args)
    assert "clock=logged" in terminal.stdout
    assert "step N trains version N - 1" in " ".join(terminal.stdout.split())
    # clock=versions overrides it: the newest version is 3, still lag 3 in numbers.
    spec = "prime-rl:max_off_policy_steps=2,clock=versions"
    versions = runner.invoke(app, [*args[:2], "--policy", spec, "-b", "1", "--json"])
    assert json.loads(versions.stdout)["groups"]["dropped_stale"] == 1
    swept = runner.invoke(app, ["sweep", str(base), "--policy", "prime-rl", "-b", "1", "--json"])
    assert json.loads(swept.stdout)[0]["clock"] == "logged"
