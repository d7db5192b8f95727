"""The one entry point (``analysis.replay`` over paths): it picks the engine the command line
picks, and gives what ``dressage-replay replay`` prints and writes; the public API is
listed once."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal
from typer.testing import CliRunner

import analysis
from cli.app import app
from cli.flags import flagged_dict
from tests.real_runs import RUNS

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_data"
runner = CliRunner()


def test_the_public_api_is_listed_once() -> None:
    """``__all__`` is ``_HOME``'s names; the TYPE_CHECKING imports (mypy's view of the
    lazy names) import exactly those names, each from its ``_HOME`` module, ``as`` itself."""
    tree = ast.parse((ROOT / "analysis" / "__init__.py").read_text())
    block = next(
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
    )
    typed: dict[str, str] = {}
    for statement in block.body:
        assert isinstance(statement, ast.ImportFrom) and statement.module is not None
        for alias in statement.names:
            assert alias.asname == alias.name, f"{alias.name}: import it `as` itself"
            typed[alias.name] = statement.module
    assert typed == analysis._HOME
    assert analysis.__all__ == sorted(analysis._HOME)
    for name in analysis.__all__:
        assert getattr(analysis, name) is not None


def _cli(args: list[str]) -> Any:
    result = runner.invoke(app, ["replay", *args])
    assert result.exit_code == 0, result.stderr
    return result


def _agree(replayed: analysis.Replayed, args: list[str], tmp_path: Path) -> None:
    """The command's --json is the result's to_dict() (notes and warnings said as
    flags); its --decisions and --trajectories are the tables the result writes."""
    printed = json.loads(_cli([*args, "--json"]).stdout)
    assert printed == json.loads(json.dumps(flagged_dict(replayed.to_dict())))
    for table in ("decisions", "trajectories"):
        by_cli, by_library = tmp_path / f"cli-{table}.parquet", tmp_path / f"lib-{table}.parquet"
        _cli([*args, f"--{table}", str(by_cli)])
        assert list(replayed.write(**{table: by_library})) == [by_library]
        assert_frame_equal(pl.read_parquet(by_cli), pl.read_parquet(by_library))


@pytest.mark.parametrize("name", RUNS)
def test_a_run_folder_is_replayed_as_the_command_replays_it(
    name: str,
    run_folders: dict[str, Path],
    run_settings: dict[str, dict[str, Any]],
    tmp_path: Path,
) -> None:
    folder, keep = run_folders[name], run_settings[name]["keep_versions"]
    replayed = analysis.replay(folder, analysis.ReplayConfig(keep_versions=keep))
    assert replayed.engine is analysis.Engine.RUN_LOOP
    assert isinstance(replayed.result, analysis.LoopReplay)
    _agree(replayed, [str(folder), "-k", str(keep)], tmp_path)


def test_a_run_folder_read_as_artifacts_or_with_a_policy_is_on_the_simple_loop(
    run_folders: dict[str, Path],
) -> None:
    folder = run_folders["k2-m1"]
    as_log = analysis.replay(
        folder,
        analysis.ReplayConfig(keep_versions=2),
        options=analysis.ReadOptions(log_format="artifacts"),
    )
    assert as_log.engine is analysis.Engine.SIMPLE_LOOP
    assert as_log.notes and "the run's own batch size" in as_log.notes[0]
    with_policy = analysis.replay(folder, policy="dressage:k=2,m=1")
    assert with_policy.engine is analysis.Engine.POLICY


def test_options_a_run_folder_cannot_use_are_refused_by_the_library(
    run_folders: dict[str, Path],
) -> None:
    with pytest.raises(analysis.NotUsedError, match="batch_groups: the batch size") as refused:
        analysis.replay(run_folders["k2-m1"], analysis.ReplayConfig(batch_groups=4), bias=True)
    assert refused.value.unused == ("batch_groups", "bias")


@pytest.mark.parametrize(
    ("inputs", "args", "policy", "engine"),
    [
        ("rollouts.jsonl", ["-k", "1", "-m", "2"], None, analysis.Engine.SIMPLE_LOOP),
        ("dumps", ["-k", "2"], None, analysis.Engine.SIMPLE_LOOP),
        (
            "rollouts.jsonl",
            ["--policy", "verl-drop:max_off_policy_threshold=2"],
            "verl-drop:max_off_policy_threshold=2",
            analysis.Engine.POLICY,
        ),
        (
            "rollouts.jsonl",
            ["--policy", "dressage:k=2,m=1"],
            "dressage:k=2,m=1",
            analysis.Engine.POLICY,
        ),
    ],
)
def test_sample_logs_are_replayed_as_the_command_replays_them(
    inputs: str, args: list[str], policy: str | None, engine: analysis.Engine, tmp_path: Path
) -> None:
    config = None
    if policy is None:
        k = int(args[1])
        config = analysis.ReplayConfig(
            keep_versions=k, max_preempts=int(args[3]) if len(args) > 2 else None
        )
    replayed = analysis.replay(SAMPLES / inputs, config, policy=policy)
    assert replayed.engine is engine
    _agree(replayed, [str(SAMPLES / inputs), *args], tmp_path)


def test_a_table_gives_the_engine_result_as_before() -> None:
    table = analysis.load_logs([SAMPLES / "rollouts.jsonl"])
    config = analysis.ReplayConfig(keep_versions=1, max_preempts=2)
    result = analysis.replay(table, config)
    assert isinstance(result, analysis.ReplayResult)
    on_paths = analysis.replay(SAMPLES / "rollouts.jsonl", config)
    assert isinstance(on_paths.result, analysis.ReplayResult)
    assert on_paths.result.summary.to_dict() == result.summary.to_dict()


@pytest.mark.parametrize(
    ("args", "policies", "engine"),
    [
        (["-k", "0,2", "-m", "none,1"], (), analysis.Engine.SIMPLE_LOOP),
        (
            ["--policy", "prime-rl:max_off_policy_steps=1", "--policy", "dressage:k=2,m=1"],
            ("prime-rl:max_off_policy_steps=1", "dressage:k=2,m=1"),
            analysis.Engine.POLICY,
        ),
    ],
)
def test_a_sweep_picks_its_engine_as_the_command_does(
    args: list[str], policies: tuple[str, ...], engine: analysis.Engine
) -> None:
    grid: dict[str, Any] = {} if policies else {"keep_versions": [0, 2], "max_preempts": [None, 1]}
    swept = analysis.sweep_log(SAMPLES / "rollouts.jsonl", policies=policies, **grid)
    assert swept.engine is engine
    result = runner.invoke(app, ["sweep", str(SAMPLES / "rollouts.jsonl"), *args, "--json"])
    assert result.exit_code == 0, result.stderr
    printed = json.loads(result.stdout)
    assert [{k: v for k, v in row.items() if k != "knobs"} for row in printed] == json.loads(
        json.dumps(swept.result.rows.to_dicts())
    )


@pytest.mark.parametrize("name", RUNS)
def test_verify_is_the_library_call(name: str, run_folders: dict[str, Path]) -> None:
    """The K the run was made with is found by the library, as verify finds it."""
    verified = analysis.verify_run(run_folders[name])
    result = runner.invoke(app, ["verify", str(run_folders[name]), "--json"])
    assert result.exit_code == (0 if verified.consistent else 9), result.stderr
    assert json.loads(result.stdout) == json.loads(json.dumps(verified.to_dict()))
    assert not verified.given and verified.result.keep_versions == verified.found[0]
