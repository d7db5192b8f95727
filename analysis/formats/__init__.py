"""Reading: one folder per log format, listed once in :data:`FOLDERS`, and the loader that
reads any of them into the canonical table.

Adding a format is a folder ``analysis/formats/<folder>/`` (its ``__init__.py`` names it in
``NAMES``, its ``format.py`` defines it in ``FORMATS``) and one entry in :data:`FOLDERS`;
:mod:`analysis.formats.registry` makes the format objects from it. This module imports
nothing heavy, so the command line knows the names without loading a reader."""

from __future__ import annotations

import importlib

FOLDERS = (
    "jsonl",
    "dressage",
    "slime_dumps",
    "canonical",
    "prime_rl",
    "areal",
    "verl",
    "nemo_rl",
)
"""The format folders, in the order ``--format`` lists their formats, a file of no known
ending is sniffed (JSONL's ``{`` first) and a record's shape is tried against other
systems' (theirs last)."""


def format_names() -> tuple[str, ...]:
    """Every format's ``--format`` name, in order, read from the folders' ``NAMES``."""
    names: list[str] = []
    for folder in FOLDERS:
        names += importlib.import_module(f"analysis.formats.{folder}").NAMES
    return tuple(names)
