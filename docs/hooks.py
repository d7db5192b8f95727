"""MkDocs hooks of the documentation site (docs/mkdocs.yml).

- ``semantics.md``: the normative docs/semantics.md, served as a page as it is (one file,
  not a copy that could drift);
- ``figures/*.png``: the README's figures (``make figures`` draws them into
  sample_data/figures/), served from where they are;
- ``reference/python-api.md`` ends with every name ``analysis`` exports, by module, from
  the docstrings (mkdocstrings);
- ``reference/commands.md`` ends with every command's ``--help``, generated from the CLI
  itself at build time, so the reference is what the installed tool prints.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
WIDTH = "100"


def _help(*args: str) -> str:
    env = {**os.environ, "COLUMNS": WIDTH, "NO_COLOR": "1", "TERM": "dumb"}
    done = subprocess.run(
        [sys.executable, "-m", "cli", *args, "--help"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.rstrip()


def _commands() -> list[str]:
    import typer

    from cli.app import app

    group = typer.main.get_command(app)
    return list(getattr(group, "commands", {}))


def commands_help() -> str:
    lines = [
        "## Every command's help",
        "",
        "Generated from the command line itself when this site was built: each section is",
        "what `dressage-replay COMMAND --help` prints.",
        "",
        "```text",
        "$ dressage-replay --help",
        _help(),
        "```",
    ]
    for name in _commands():
        lines += ["", f"### {name}", "", "```text", f"$ dressage-replay {name} --help"]
        lines += [_help(name), "```"]
    return "\n".join(lines) + "\n"


LAYERS = ("errors", "table", "formats", "engine", "rules", "simulation", "output", "views")


def _layer_rank(module: str) -> tuple[int, str]:
    parts = module.split(".")
    layer = parts[1] if len(parts) > 1 else ""
    rank = LAYERS.index(layer) if layer in LAYERS else len(LAYERS)
    return rank, module


def api_reference() -> str:
    import analysis

    homes: dict[str, list[str]] = {}
    for name, module in analysis._HOME.items():
        homes.setdefault(module, []).append(name)
    lines: list[str] = []
    for module in sorted(homes, key=_layer_rank):
        lines += ["", f"### `{module}`", ""]
        for name in sorted(homes[module], key=str.lower):
            lines += [f"::: {module}.{name}", "    options:", "      heading_level: 4", ""]
    return "\n".join(lines) + "\n"


def on_files(files: Files, config: Any) -> Files:
    sys.path.insert(0, str(ROOT))
    files.append(File.generated(config, "semantics.md", abs_src_path=str(DOCS / "semantics.md")))
    for figure in sorted((ROOT / "sample_data" / "figures").glob("*.png")):
        files.append(File.generated(config, f"figures/{figure.name}", abs_src_path=str(figure)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    if page.file.src_uri == "reference/commands.md":
        return markdown.rstrip("\n") + "\n\n" + commands_help()
    if page.file.src_uri == "reference/python-api.md":
        return markdown.rstrip("\n") + "\n" + api_reference()
    return markdown
