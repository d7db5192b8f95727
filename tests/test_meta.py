"""Project-level promises: every command documented, the library light and quiet."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.models import CommandInfo
from typer.testing import CliRunner

from cli.app import app

ROOT = Path(__file__).resolve().parents[1]
PAGES = ROOT / "docs" / "pages"


def _command_name(command: CommandInfo) -> str:
    if command.name:
        return command.name
    assert command.callback is not None
    return command.callback.__name__


COMMANDS = sorted(_command_name(command) for command in app.registered_commands)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help_and_is_in_the_reference(command: str) -> None:
    result = CliRunner().invoke(app, [command, "--help"])
    assert result.exit_code == 0
    assert len(result.stdout) > 200
    assert f"`{command} " in (PAGES / "reference" / "commands.md").read_text()


def test_readme_starts_with_the_two_setup_commands() -> None:
    head = "\n".join((ROOT / "README.md").read_text().splitlines()[:15])
    assert "make demo" in head and "make test" in head


def test_make_demo_ends_with_the_next_steps_the_readme_gives() -> None:
    """A new user ran the README's first example after `make demo` and got `command not
    found`: the demo now prints how to put the command on PATH and the first example, and
    that example is the README's first console command."""
    demo = subprocess.run(
        ["make", "-n", "demo"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    echoed = [
        line.removeprefix("echo ").strip().strip('"')
        for line in demo.splitlines()
        if line.startswith("echo ")
    ]
    readme = (ROOT / "README.md").read_text()
    assert "  source .venv/bin/activate" in echoed
    assert "`source .venv/bin/activate`" in readme.split("## ")[0]
    first_example = next(line for line in readme.splitlines() if line.startswith("$ "))
    assert f"  {first_example.removeprefix('$ ')}" in echoed


def test_import_analysis_leaves_cli_and_plotting_libraries_out() -> None:
    code = (
        "import sys, analysis; "
        "print(sorted(m for m in ('typer', 'rich', 'matplotlib') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_library_never_prints() -> None:
    offenders = [
        path.name
        for path in (ROOT / "analysis").rglob("*.py")
        if "print(" in path.read_text().replace("# print(", "")
    ]
    assert offenders == []


def test_the_documented_exit_code_table_is_the_code_table() -> None:
    """One table of exit codes in the code (analysis.ExitCode); the reference lists the same."""
    import re

    from analysis import ExitCode

    section = (PAGES / "reference" / "exit-codes.md").read_text()
    documented = {int(code) for code in re.findall(r"^\| (\d+) \|", section, re.M)}
    assert documented == {int(code) for code in ExitCode}


def test_the_documented_layout_names_every_module() -> None:
    """The layout map of the development page matches the folders: every module of
    analysis/ and every command module of cli/ is named there."""
    development = (PAGES / "development.md").read_text()
    layout = development.split("## Layout", 1)[1].split("\n## ", 1)[0]
    modules = [
        path
        for path in (ROOT / "analysis").rglob("*.py")
        if path.name != "__init__.py" and path.parent != ROOT / "analysis"
    ]
    missing = [
        str(path.relative_to(ROOT))
        for path in modules
        if f"`{path.stem}`" not in layout and f"`{path.stem.lstrip('_')}`" not in layout
    ]
    missing += [
        f"analysis/{path.name}"
        for path in (ROOT / "analysis").glob("*.py")
        if path.name != "__init__.py" and f"analysis/{path.name}" not in layout
    ]
    assert missing == []
