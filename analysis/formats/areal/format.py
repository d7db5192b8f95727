"""AReaL's rollout dumps as a format: ``rollout/{tail_version}/{task_id}.jsonl``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import polars as pl

from analysis.formats.areal import reader
from analysis.formats.peer_records import numbered_files
from analysis.formats.peers import PeerFormat


def tree(
    root: Path, told: str | None, probe: Callable[[Path], str | None]
) -> tuple[list[Path], str] | None:
    """A ``rollout/`` folder (or its parent), or any folder when told it is AReaL's."""
    for base in (root, root / "rollout"):
        if base.name != "rollout" and told != reader.NAME:
            continue
        found = [
            path for path in sorted(base.glob("*/*.jsonl")) if reader.file_order(path) is not None
        ]
        if found and probe(found[0]) == reader.NAME:
            return numbered_files(found, reader.file_order), (
                f"{base}: AReaL rollout dumps: read {{tail_version}}/{{task_id}}.jsonl by "
                "tail version, then task id"
            )
    return None


def start_versions(table: pl.DataFrame) -> tuple[str, ...]:
    """How many groups have no start version (head_version -1: prompt tokens counted)."""
    groups = table.group_by("group_id").agg(pl.col("version_spans").is_not_null().any())
    unknown = groups.filter(~pl.col("version_spans")).height
    return (f"start version unknown for {unknown:,} of {groups.height:,} groups in this log",)


FORMAT = PeerFormat.of(
    reader,
    described="an AReaL log",
    users_name="AReaL",
    file_order=reader.file_order,
    tree=tree,
    notes=start_versions,
)

FORMATS = (FORMAT,)
