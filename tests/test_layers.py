"""The packages are layers in pipeline order (docs/pages/development.md: Layout): a module imports only from its
own layer or earlier ones, imports form no circle, no module takes another package's private
names, and folders and modules stay small enough to find one's way in.

Imports are read from the source (every ``import``, at the top, inside a function or under
``TYPE_CHECKING``), so a circle hidden in a function still counts."""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LAYERS = (
    "analysis.errors",
    "analysis.table",
    "analysis.formats",
    "analysis.engine",
    "analysis.rules",
    "analysis.simulation",
    "analysis.output",
    "analysis.views",
    "analysis",  # the public API: analysis/__init__.py and its top-level modules
    "cli",
)
"""Earliest first: a module may import from its own layer and those before it."""

MOST_MODULES = 12
"""Modules (besides ``__init__.py``) one folder may hold."""
MOST_LINES = 500
LONG_MODULES: dict[str, int] = {}
"""Modules longer than :data:`MOST_LINES` when the layout was set, at most as long as then:
each is to be split, and comes off this list when it is."""

STILL_TO_MEND: set[str] = set()
"""What broke these rules when the layout was set and is being mended: each comes off when
it is (a test fails while one here no longer happens, so the list stays true)."""


@dataclass(frozen=True)
class Edge:
    importer: str
    imported: str
    line: int
    names: tuple[str, ...]


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted([*ROOT.glob("analysis/**/*.py"), *ROOT.glob("cli/**/*.py")]):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


MODULES = _modules()


def _edges() -> Iterator[Edge]:
    for name, path in MODULES.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parts, *([base] if base else [])])
                names = tuple(alias.name for alias in node.names)
                targets = [base, *(f"{base}.{n}" for n in names if f"{base}.{n}" in MODULES)]
            elif isinstance(node, ast.Import):
                names, targets = (), [alias.name for alias in node.names]
            else:
                continue
            for target in targets:
                if target in MODULES and target != name:
                    yield Edge(name, target, node.lineno, names)


def _registry_edges() -> Iterator[Edge]:
    """The registry imports each format folder's ``format`` by name (importlib), which the
    source's import statements do not show."""
    from analysis.formats import FOLDERS

    for folder in FOLDERS:
        yield Edge("analysis.formats.registry", f"analysis.formats.{folder}.format", 0, ())


EDGES = [*_edges(), *_registry_edges()]


def layer(module: str) -> int:
    """The index of the layer a module is in: the longest layer name it starts with."""
    matches = [
        i for i, name in enumerate(LAYERS) if module == name or module.startswith(name + ".")
    ]
    return max(matches, key=lambda i: len(LAYERS[i]))


def test_every_module_is_in_a_layer() -> None:
    assert all(layer(name) >= 0 for name in MODULES)
    assert layer("analysis.formats.jsonl.format") == LAYERS.index("analysis.formats")
    assert layer("analysis.views.report") > layer("analysis.engine.grid")


def _against_layers() -> set[str]:
    return {
        f"{e.importer} imports {e.imported}" for e in EDGES if layer(e.imported) > layer(e.importer)
    }


def _private_names() -> set[str]:
    def package(module: str) -> str:
        return ".".join(module.split(".")[:2])

    return {
        f"{e.importer} takes {name} from {e.imported}"
        for e in EDGES
        if package(e.importer) != package(e.imported)
        for name in e.names
        if name.startswith("_") and not name.startswith("__")
    }


def _circles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for edge in EDGES:
        graph[edge.importer].add(edge.imported)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for child in sorted(graph[node]):
            if child not in index:
                visit(child)
                low[node] = min(low[node], low[child])
            elif child in stack:
                low[node] = min(low[node], index[child])
        if low[node] == index[node]:
            members = stack[stack.index(node) :]
            del stack[stack.index(node) :]
            if len(members) > 1:
                circles.append(sorted(members))

    for module in sorted({*MODULES, *graph}):
        if module not in index:
            visit(module)
    return circles


def test_the_circle_finder_finds_a_circle() -> None:
    """(The check below could pass by finding nothing.)"""
    global EDGES
    kept = EDGES
    try:
        EDGES = [*kept, Edge("analysis.table.schema", "analysis.errors", 0, ()),
                 Edge("analysis.errors", "analysis.table.schema", 0, ())]  # fmt: skip
        assert ["analysis.errors", "analysis.table.schema"] in _circles()
    finally:
        EDGES = kept


def test_no_import_goes_against_the_layers_in_a_circle_or_for_a_private_name() -> None:
    found = {*_against_layers(), *_private_names()}
    found |= {f"circle: {', '.join(members)}" for members in _circles()}
    assert sorted(found - STILL_TO_MEND) == [], f"layers: {' -> '.join(LAYERS)}"
    assert sorted(STILL_TO_MEND - found) == [], "mended: take it off STILL_TO_MEND"


def test_folders_hold_few_modules_and_modules_are_short() -> None:
    crowded = {}
    for folder in {path.parent for path in MODULES.values()}:
        count = sum(1 for path in folder.glob("*.py") if path.name != "__init__.py")
        if count > MOST_MODULES:
            crowded[str(folder.relative_to(ROOT))] = count
    assert crowded == {}
    lengths = {
        str(path.relative_to(ROOT)): len(path.read_text().splitlines()) for path in MODULES.values()
    }
    long = {path: n for path, n in lengths.items() if n > MOST_LINES}
    assert {path: n for path, n in long.items() if n > LONG_MODULES.get(path, MOST_LINES)} == {}
    assert sorted(set(LONG_MODULES) - set(long)) == [], "split: take it off LONG_MODULES"
