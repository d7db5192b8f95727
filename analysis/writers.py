"""Write raw logs in the formats Dressage and slime produce (for sample data and tests)."""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from analysis.errors import OutputError
from analysis.output import atomic_path
from analysis.pickles import dump_pt

LogFormat = Literal["jsonl", "artifacts", "pt"]


def write_jsonl(records: Iterable[dict[str, Any]], path: Path) -> int:
    """Write one JSON object per line (gzip when the name ends in .gz); return the count."""
    import gzip

    count = 0
    with atomic_path(Path(path)) as temp:
        opener = gzip.open if str(path).endswith(".gz") else open
        with opener(temp, "wt", encoding="utf-8") as handle:
            for record in records:
                handle.write(json.dumps(record, separators=(",", ":")) + "\n")
                count += 1
    return count


def write_artifacts(
    records: Iterable[dict[str, Any]], root: Path, *, start_time: float = 1.7e9
) -> int:
    """Write a Dressage segment-artifact tree, one pretty-printed JSON file per record.

    Layout: ``<root>/<instance_id>/<session_id>/samples/<segment_index>.json``. File
    modification times follow record order (one second apart), as arrival does.
    """
    root = Path(root)
    if root.exists() and any(root.iterdir()):
        raise OutputError(f"{root}: exists and is not empty; choose a new folder")
    count = 0
    for count, record in enumerate(records, start=1):
        metadata = record.get("metadata", {})
        # Artifacts carry token versions as run-length spans only, which loses nothing.
        if "version_spans" in metadata:
            metadata = {k: v for k, v in metadata.items() if k != "full_versions"}
        instance = str(metadata.get("instance_id", record.get("group_index")))
        session = str(metadata.get("parent_traj_id", f"record-{count}"))
        segment = int(metadata.get("segment_index") or 0)
        artifact = {
            "session_id": session,
            "trajectory_id": session,
            "instance_id": instance,
            "segment_index": segment,
            **{k: v for k, v in record.items() if k != "metadata"},
            "metadata": metadata,
        }
        path = root / instance / session / "samples" / f"{segment}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(artifact, indent=2))
        stamp = start_time + count
        os.utime(path, (stamp, stamp))
    return count


def write_pt_dumps(records: Iterable[dict[str, Any]], folder: Path) -> int:
    """Write slime rollout dumps, one ``rollout_<id>.pt`` per trainer step.

    The step is ``metadata.dressage_return_rollout_id``; the file-level ``rollout_id``
    carries it, as slime's own dumps do.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    by_step: dict[int, list[dict[str, Any]]] = defaultdict(list)
    count = 0
    for count, record in enumerate(records, start=1):
        step = record.get("metadata", {}).get("dressage_return_rollout_id")
        if step is None:
            raise OutputError(f"record {count} has no trainer step; .pt dumps are one per step")
        by_step[int(step)].append(record)
    for step, samples in sorted(by_step.items()):
        target = folder / f"rollout_{step}.pt"
        with atomic_path(target) as temp:
            dump_pt({"rollout_id": step, "samples": samples}, temp)
    return count
