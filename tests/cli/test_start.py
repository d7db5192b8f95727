"""Fast start: what the command line imports before it does anything (issue 17, target 4).

Not timed (the bench times it): these check which modules are loaded, in a fresh process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import analysis
import analysis.engine

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("polars", "pyarrow", "numpy", "matplotlib")

LOADED = """
import json, sys
sys.argv = ["dressage-replay", *json.loads(sys.argv[1])]
import cli
try:
    cli.run()
except SystemExit:
    pass
print(json.dumps(sorted(name for name in sys.modules if name.split(".")[0] in {heavy!r})),
      file=sys.stderr)
"""


def heavy_modules_loaded(*arguments: str) -> list[str]:
    """The heavy modules a fresh ``dressage-replay ARGUMENTS`` has imported when it ends."""
    done = subprocess.run(
        [sys.executable, "-c", LOADED.format(heavy=set(HEAVY)), json.dumps(arguments)],
        capture_output=True, text=True, cwd=ROOT, check=False,
    )  # fmt: skip
    return list(json.loads(done.stderr.strip().splitlines()[-1]))


@pytest.mark.parametrize(
    "arguments", [("--version",), ("--help",), ("replay", "--help"), ("simulate", "--help")]
)
def test_version_and_help_import_no_heavy_module(arguments: tuple[str, ...]) -> None:
    assert heavy_modules_loaded(*arguments) == []


def test_a_replay_does_import_them() -> None:
    """The check above can fail: a command that reads a log loads polars."""
    loaded = heavy_modules_loaded("replay", str(ROOT / "sample_data" / "rollouts.jsonl"))
    assert "polars" in loaded


def test_importing_the_library_loads_nothing_heavy() -> None:
    code = f"import sys, analysis; print(sorted(m for m in sys.modules if m in {HEAVY!r}))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.stdout.strip() == "[]", done.stderr


@pytest.mark.parametrize("package", [analysis, analysis.engine], ids=lambda p: p.__name__)
def test_every_exported_name_is_its_home_modules(package: object) -> None:
    """Each name of ``__all__`` resolves on first use to the object its module defines."""
    import importlib

    exported = package.__all__  # type: ignore[attr-defined]
    homes = package._HOME  # type: ignore[attr-defined]
    assert set(homes) <= set(exported)
    for name in exported:
        value = getattr(package, name)
        if name in homes:
            assert value is getattr(importlib.import_module(homes[name]), name)
        assert name in dir(package)
    with pytest.raises(AttributeError, match="no_such_name"):
        package.no_such_name  # type: ignore[attr-defined]  # noqa: B018


def test_prepare_stays_the_function() -> None:
    """The module ``analysis.engine.prepare`` does not hide the function of its name."""
    import analysis.engine.prepare as module  # noqa: F401

    assert callable(analysis.prepare) and analysis.prepare.__name__ == "prepare"
    from analysis.engine import prepare

    assert callable(prepare)


def version_run(**streams: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli", "--version"], cwd=ROOT, text=True, stderr=subprocess.PIPE,
        timeout=60, **streams,
    )  # fmt: skip


def test_version_alone_prints_what_the_app_does() -> None:
    """``--version`` alone is answered before typer is imported, as the app answers it."""
    from typer.testing import CliRunner

    from cli.app import app

    done = version_run(stdout=subprocess.PIPE)
    assert (done.returncode, done.stdout) == (0, CliRunner().invoke(app, ["--version"]).stdout)
    code = "import sys; sys.argv = ['x', '--version']; import cli\n" + (
        "try:\n    cli.run()\nexcept SystemExit:\n    pass\nprint('typer' in sys.modules)"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert loaded.stdout.splitlines()[-1] == "False"


def test_version_alone_with_nowhere_to_print() -> None:
    import os

    closed = version_run(preexec_fn=lambda: os.close(1))
    assert (closed.returncode, closed.stderr) == (
        8,
        "Error: standard output is closed: nowhere to print the version\n",
    )
    read, write = os.pipe()
    os.close(read)  # the reader has gone
    try:
        gone = version_run(stdout=write)
    finally:
        os.close(write)
    assert (gone.returncode, gone.stderr) == (141, "")


@pytest.mark.parametrize("full", [False, True])
def test_the_script_exits_without_the_tear_down_once_its_output_is_flushed(full: bool) -> None:
    """The console script skips the interpreter's tear-down (0.1-0.15 s of freeing NumPy,
    polars and pyarrow): what it printed is all there and the exit code is the command's;
    DRESSAGE_REPLAY_FULL_EXIT (or a thread still running, or Ray) keeps the usual exit."""
    import os

    sample = str(Path(__file__).parents[2] / "sample_data" / "rollouts.jsonl")
    code = (
        "import atexit, sys\n"
        "atexit.register(lambda: sys.stderr.write('tear-down ran\\n'))\n"
        f"sys.argv = ['dressage-replay', 'replay', {sample!r}, '-k', '1', '-m', '2', '--json']\n"
        "from cli import console\n"
        "console()\n"
    )
    env = {**os.environ, "DRESSAGE_REPLAY_FULL_EXIT": "1" if full else ""}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["config"]["keep_versions"] == 1  # all of it, flushed
    assert ("tear-down ran" in done.stderr) == full
    bad = subprocess.run(
        [sys.executable, "-m", "cli", "replay", sample, "-k", "-1"], capture_output=True, text=True
    )
    assert bad.returncode == 7 and bad.stderr.startswith("Error:")
