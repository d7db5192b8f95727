"""Formats as objects: the registry is the one list every part of reading uses, and a format
added there (its object and one registry entry) is found by name, by file ending and by
``--format``, and read through the same load as every other."""

from __future__ import annotations

import csv
import importlib
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pytest

import analysis
from analysis.errors import ConfigError
from analysis.formats import FOLDERS, registry
from analysis.formats.discover import detect_sources
from analysis.formats.reading import Format, RawRecords, Reading
from analysis.formats.source import Source


def test_every_format_is_listed_once_by_its_own_name() -> None:
    names = [fmt.name for fmt in registry.FORMATS]
    assert len(names) == len(set(names)) == len(registry.BY_NAME)
    assert registry.PEER_FORMATS == ("prime-rl", "areal", "verl", "nemo-rl")
    endings = [ending for fmt in registry.FORMATS for ending in fmt.endings]
    assert len(endings) == len(set(endings)), "one file ending, one format"


def test_the_folders_names_are_their_formats_names() -> None:
    """The names the command line offers (read without loading a reader) are the formats'."""
    assert analysis.format_names() == registry.NAMES
    for folder in FOLDERS:
        package = importlib.import_module(f"analysis.formats.{folder}")
        module = importlib.import_module(f"analysis.formats.{folder}.format")
        assert package.NAMES == tuple(fmt.name for fmt in module.FORMATS), folder


def test_the_format_names_are_known_without_polars() -> None:
    code = "import sys, analysis; analysis.format_names(); print('polars' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_an_unknown_format_name_lists_the_registrys(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    log.write_text("{}\n")
    with pytest.raises(ConfigError, match=", ".join(registry.NAMES)):
        analysis.load_logs([log], log_format="csv-ish")


@dataclass(frozen=True)
class _TsvFormat(Format):
    """A toy format: one record a line, tab-separated group, trajectory and end version."""

    def read(
        self, source: Source, reading: Reading, before: int, total: int
    ) -> Iterator[pl.DataFrame]:
        yield from reading.records(source, self._records(source))

    @staticmethod
    def _records(source: Source) -> RawRecords:
        with source.path.open(newline="") as handle:
            for number, (group, trajectory, version) in enumerate(
                csv.reader(handle, delimiter="\t"), start=1
            ):
                record = {
                    "group_index": group,
                    "metadata": {
                        "parent_traj_id": trajectory,
                        "dressage_end_token_version": version,
                    },
                }
                yield f"{source.path}:{number}", number, None, record
        return 0


def test_a_format_added_to_the_registry_is_found_and_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Adding a format is its object and one registry entry: discovery finds its files by
    ending, alone or in a folder, ``log_format`` accepts its name, and the load reads them
    like any other. (``FOLDERS`` makes the entry from a folder on disk; here it is made by
    hand, as the test writes no module into the package.)"""
    tsv = _TsvFormat(name="tsv", described="a TSV log", endings=(".tsv",), folder_kind="TSV")
    monkeypatch.setitem(registry.BY_NAME, "tsv", tsv)
    monkeypatch.setattr(registry, "NAMES", (*registry.NAMES, "tsv"))
    log = tmp_path / "run.tsv"
    log.write_text("g0\tt0\tv1\ng0\tt1\tv2\ng1\tt2\tv2\n")
    assert detect_sources([log])[0] == [Source(log, "tsv")]
    table = analysis.load_logs([log])
    assert table.select("group_id", "trajectory_id", "end_version").rows() == [
        ("g0", "t0", "v1"),
        ("g0", "t1", "v2"),
        ("g1", "t2", "v2"),
    ]
    assert analysis.load_logs([tmp_path]).height == 3  # a folder of its files
    renamed = tmp_path / "run.txt"
    log.rename(renamed)
    assert analysis.load_logs([renamed], log_format="tsv").height == 3
