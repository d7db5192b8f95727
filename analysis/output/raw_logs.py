"""Write raw logs in the formats Dressage and slime produce (for sample data and tests)."""

from __future__ import annotations

import datetime
import json
import math
import os
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

import orjson
import polars as pl

from analysis.errors import OutputError, setting
from analysis.formats.pickled.pickles import dump_pt
from analysis.output.tables import atomic_folder, atomic_path, write_canonical_chunks
from analysis.table.fieldmap import FieldMap

LogFormat = Literal["jsonl", "artifacts", "pt"]


def write_jsonl(records: Iterable[dict[str, Any]], path: Path) -> int:
    """Write one JSON object per line (gzip when the name ends in .gz, in any letter case,
    as the reader and ``log_format_for`` see it); return the count.

    Records are encoded here while a second thread writes (and compresses) the bytes, so
    producing records and the disk work overlap on two cores.
    """
    import gzip

    count = 0
    path = Path(path)
    with atomic_path(path) as temp, open(temp, "wb") as raw:
        # The gzip header names the final file, not the temporary one.
        compressed = path.name.lower().endswith(".gz")
        handle: Any = (
            gzip.GzipFile(filename=path.name[:-3], mode="wb", fileobj=raw, mtime=0)
            if compressed
            else raw
        )
        with _BackgroundWriter(handle) as out:
            lines: list[bytes] = []
            for record in records:
                lines.append(orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE))
                count += 1
                if len(lines) == 256:
                    out.write(b"".join(lines))
                    lines = []
            out.write(b"".join(lines))
        if handle is not raw:
            handle.close()
    return count


class _BackgroundWriter:
    """Writes byte blocks to a file in a thread; a bounded queue keeps memory small."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        self.blocks: queue.Queue[bytes | None] = queue.Queue(maxsize=16)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while (block := self.blocks.get()) is not None:
            if self.error is None:
                try:
                    self.handle.write(block)
                except BaseException as error:  # re-raised in the caller's thread
                    self.error = error

    def write(self, block: bytes) -> None:
        if self.error is not None:
            raise self.error
        self.blocks.put(block)

    def __enter__(self) -> _BackgroundWriter:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.blocks.put(None)
        self.thread.join()
        if self.error is not None and exc[0] is None:
            raise self.error


def write_artifacts(
    records: Iterable[dict[str, Any]],
    root: Path,
    *,
    error_root: Path | None = None,
    start_time: float = 1.7e9,
) -> int:
    """Write a Dressage artifact tree (``traj_payload/``'s shape) of records; return the count.

    Each completed trajectory is ``<root>/<instance_id>/<session_id>/session.json`` (its
    segments' token versions, loss masks and completion times) and
    ``.../samples/<segment_index>.json`` (one file per segment record), shaped as Dressage
    writes them: no group index, sample index or async group id, a null reward, the
    attempt key (``metadata.instance_id``, ``metadata.dressage_start_rollout_id``,
    ``metadata.dressage_retry_count`` when above 0), the completion time as text of Unix
    seconds (``metadata.proxy_extra_info.timestamp``). A failed trajectory (a record with
    status ``aborted``) is an ``error.json`` in Dressage's error shape instead, at
    ``<error_root>/<instance_id>/<session_id>/`` (Dressage's ``traj_err/``), or in
    ``root`` when no ``error_root`` is given (the reader takes it there too).
    A trajectory's records must be consecutive, as the simulator yields them. File
    modification times follow record order (one second apart), as arrival does; a record
    without its completion time gets that time too.
    """
    with atomic_folder(Path(root)) as temp:
        if error_root is None:
            return _ArtifactWriter(temp, temp, start_time=start_time).write_all(records)
        with atomic_folder(Path(error_root)) as errors:
            return _ArtifactWriter(temp, errors, start_time=start_time).write_all(records)


def write_run_folder(
    records: Iterable[dict[str, Any]], folder: Path, *, start_time: float = 1.7e9
) -> int:
    """Write records as a Dressage run folder: ``traj_payload/`` and ``traj_err/`` (as
    :func:`write_artifacts`) and a ``dressage_log.txt`` of the rollout calls.

    The log is what the run loop (docs/semantics.md §12) needs to place the calls among
    the completions: one ``starting Dressage partial async rollout: rollout_id=r
    target_groups=B ...`` line per trainer step (``metadata.dressage_return_rollout_id``),
    at the completion of the last group of the step before (when that batch was full;
    the first at the first completion less a second), a ``blackbox rollout failed`` line
    per failed trajectory and the ``final rollout N completed`` line. B is the most
    groups of one step, the samples per group the most trajectories of one group.
    """
    with atomic_folder(Path(folder)) as temp:
        writer = _ArtifactWriter(temp / PAYLOAD_TREE, temp / ERROR_TREE, start_time=start_time)
        (temp / PAYLOAD_TREE).mkdir()
        (temp / ERROR_TREE).mkdir()
        count = writer.write_all(records)
        with atomic_path(temp / "dressage_log.txt") as log:
            log.write_text(writer.log_text())
        return count


PAYLOAD_TREE, ERROR_TREE = "traj_payload", "traj_err"
"""The artifact trees of a Dressage run folder (as ``analysis.formats.dressage.artifacts.RUN_TREES``)."""

BACKEND_TIMEOUT = (
    "blackbox agent backend timeout (HTTP 504): LLM backend did not answer within 600s"
)
"""The failure a simulated aborted trajectory is written with (one Dressage classifies)."""


class _ArtifactWriter:
    """Writes records, one trajectory at a time, as Dressage's artifact files; keeps what
    the run's log needs (per trainer step: groups, last completion; failed sessions)."""

    def __init__(self, payload: Path, errors: Path, *, start_time: float) -> None:
        self.payload, self.errors, self.start_time = payload, errors, start_time
        self.count = 0
        self.trajectory: list[tuple[dict[str, Any], float]] = []
        self.step_groups: dict[int, set[Any]] = {}
        self.step_last: dict[int, float] = {}
        # Trajectories written per group: each is flushed once (its records are
        # consecutive), so a count does; a set of session ids would hold them all.
        self.group_sizes: dict[Any, int] = {}
        self.failures: list[tuple[float, str]] = []
        self.first_completion = math.inf

    def write_all(self, records: Iterable[dict[str, Any]]) -> int:
        key: tuple[str, str] | None = None
        for record in records:
            self.count += 1
            this = (self._instance(record), self._session(record, self.count))
            if key is not None and this != key:
                self._flush(*key)
            key = this
            self.trajectory.append((record, self.start_time + self.count))
        if key is not None:
            self._flush(*key)
        return self.count

    @staticmethod
    def _instance(record: dict[str, Any]) -> str:
        metadata = record.get("metadata") or {}
        return str(
            metadata.get("instance_id", record.get("instance_id", record.get("group_index")))
        )

    @staticmethod
    def _session(record: dict[str, Any], count: int) -> str:
        metadata = record.get("metadata") or {}
        for value in (metadata.get("session_id"), metadata.get("parent_traj_id")):
            if value is not None:
                return str(value)
        return f"record-{count}"

    def _flush(self, instance: str, session: str) -> None:
        """Write the trajectory whose records were collected: its session folder, or
        its error.json when one of them is aborted."""
        records, self.trajectory = self.trajectory, []
        first = records[0][0]
        stamps = [_completion_time(record, stamp) for record, stamp in records]
        self._note(first, max(stamps))
        if any(str(record.get("status", "")).lower() == "aborted" for record, _ in records):
            self.failures.append((max(stamps), session))
            path = self.errors / instance / session / "error.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(_error_document(first, instance, session, max(stamps))))
            file_time = records[-1][1]
            os.utime(path, (file_time, file_time))
            return
        folder = self.payload / instance / session
        (folder / "samples").mkdir(parents=True, exist_ok=True)
        count = len(records)
        entries = []
        for (record, file_time), stamp in zip(records, stamps, strict=True):
            segment, sample, entry = _segment_files(record, instance, session, count, stamp)
            path = folder / "samples" / f"{segment}.json"
            path.write_text(json.dumps(sample, indent=2))
            os.utime(path, (file_time, file_time))
            entries.append(entry)
        session_path = folder / "session.json"
        session_path.write_text(json.dumps(_session_document(entries)))
        os.utime(session_path, (records[-1][1], records[-1][1]))

    def _note(self, record: dict[str, Any], finished: float) -> None:
        """What the run's log needs: the step's groups and last completion, one more
        trajectory of the record's group."""
        metadata = record.get("metadata") or {}
        self.first_completion = min(self.first_completion, finished)
        step = metadata.get("dressage_return_rollout_id")
        group = record.get("group_index")
        if group is None:
            group = (self._instance(record), metadata.get("dressage_start_rollout_id"))
        self.group_sizes[group] = self.group_sizes.get(group, 0) + 1
        if type(step) is int:
            self.step_groups.setdefault(step, set()).add(group)
            self.step_last[step] = max(self.step_last.get(step, -math.inf), finished)

    def log_text(self) -> str:
        """``dressage_log.txt``: the rollout calls and failures (see write_run_folder)."""
        if not self.step_groups:
            return ""
        groups = max(len(members) for members in self.step_groups.values())
        samples = groups * max(self.group_sizes.values())
        lines: list[tuple[float, str]] = []
        logger = "dressage.rollout.partial_async_rollout"
        steps = sorted(self.step_groups)
        for step in steps:
            started = self.step_last.get(step - 1, self.first_completion - 1.0)
            lines.append((started, f"{logger} INFO starting Dressage partial async rollout: "
                          f"rollout_id={step} target_groups={groups} target_samples={samples} "
                          f"full_groups={groups} full_samples={samples}"))  # fmt: skip
        for finished, session in self.failures:
            lines.append((finished, "dressage.rollout.generate.blackbox_dispatch WARNING "
                          f"blackbox rollout failed for session_id={session}: {BACKEND_TIMEOUT}"))  # fmt: skip
        lines.append((self.step_last[steps[-1]], f"{logger} INFO final rollout {steps[-1]} "
                      "completed; stopping and draining partial async worker"))  # fmt: skip
        return "".join(f"{_log_time(at)} {text}\n" for at, text in sorted(lines))


def _log_time(at: float) -> str:
    """A log line's time as Python logging writes it (UTC here, as the artifacts' times)."""
    moment = datetime.datetime.fromtimestamp(at, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S") + f",{moment.microsecond // 1000:03d}"


def _completion_time(record: dict[str, Any], fallback: float) -> float:
    extra_info = (record.get("metadata") or {}).get("proxy_extra_info")
    stamp = extra_info.get("timestamp") if isinstance(extra_info, dict) else None
    return fallback if stamp is None else float(stamp)


_ATTEMPT_KEYS = ("instance_id", "session_id", "dressage_start_rollout_id")
_SEGMENT_KEYS = (
    "dressage_start_token_version",
    "dressage_end_token_version",
    # Not in Dressage's artifacts (its dumps carry it): kept so that a simulated tree
    # replays on the simple loop without --batch-groups, as its JSONL does.
    "dressage_return_rollout_id",
)


def _attempt_metadata(metadata: dict[str, Any], instance: str, session: str) -> dict[str, Any]:
    """The attempt key as Dressage's artifacts carry it (a retry count only above 0)."""
    found = {key: metadata[key] for key in _ATTEMPT_KEYS if key in metadata}
    found.update(instance_id=instance, session_id=session)
    retries = metadata.get("dressage_retry_count")
    if isinstance(retries, int) and retries > 0:
        found["dressage_retry_count"] = retries
    return found


def _segment_files(
    record: dict[str, Any], instance: str, session: str, count: int, stamp: float
) -> tuple[int, dict[str, Any], dict[str, Any]]:
    """A segment record as ``samples/<segment>.json`` and as its ``session.json`` entry."""
    metadata = record.get("metadata") or {}
    segment = int(metadata.get("segment_index") or 0)
    extra_info = {"timestamp": repr(stamp), "trajectory_num_segments": count}
    sample_metadata = {
        **_attempt_metadata(metadata, instance, session),
        **{key: metadata[key] for key in _SEGMENT_KEYS if key in metadata},
        # Token versions as run-length spans only, which loses nothing (session.json
        # has them token by token).
        **(
            {"version_spans": metadata["version_spans"]}
            if "version_spans" in metadata
            else {"full_versions": metadata.get("full_versions")}
        ),
        "segment_count": count,
        "selected_segment_index": segment,
        "proxy_extra_info": extra_info,
    }
    sample = {
        "session_id": session,
        "trajectory_id": session,
        "instance_id": instance,
        "segment_index": segment,
        "segment_count": count,
        **{key: record[key] for key in _SAMPLE_KEYS if key in record},
        "reward": None,  # rewards are not in Dressage's artifacts
        "status": "completed",
        "metadata": sample_metadata,
    }
    tokens = len(record.get("tokens") or [])
    response_length = int(record.get("response_length") or 0)
    loss_mask = list(record.get("loss_mask") or [])
    entry = {
        "trajectory_id": session,
        "instance_id": instance,
        "segment_index": segment,
        "segment_count": count,
        "full_versions": _token_versions(metadata),
        "full_loss_mask": [0] * max(0, tokens - response_length) + loss_mask,
        "aligned_response_length": response_length,
        "extra_info": extra_info,
    }
    return segment, sample, entry


_SAMPLE_KEYS = ("tokens", "response_length", "loss_mask", "rollout_log_probs")


def _token_versions(metadata: dict[str, Any]) -> list[str]:
    if metadata.get("full_versions") is not None:
        return list(metadata["full_versions"])
    labels: list[str] = []
    for span in metadata.get("version_spans") or []:
        labels += [span["version"]] * (span["end"] - span["start"])
    return labels


def _session_document(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """``session.json`` of a completed trajectory: its segments, in segment order."""
    entries.sort(key=lambda entry: entry["segment_index"])
    return {
        "success": True,
        "mode": "trajectory",
        "drained": True,
        "meta_info": {"num_trajectories": 0},
        "data": entries,
    }


def _error_document(
    record: dict[str, Any], instance: str, session: str, finished: float
) -> dict[str, Any]:
    """``error.json`` of a failed trajectory: a backend timeout, as Dressage writes it."""
    metadata = record.get("metadata") or {}
    sample_metadata = _attempt_metadata(metadata, instance, session)
    if record.get("group_index") is not None:
        sample_metadata["dressage_async_group_id"] = record["group_index"]
    sample: dict[str, Any] = {
        **{key: record[key] for key in ("group_index", "index") if key in record},
        "session_id": session,
        "response": "",
        "status": "aborted",
        "metadata": sample_metadata,
    }
    return {
        "success": False,
        "timestamp": finished,
        "session_id": session,
        "trajectory_id": session,
        "instance_id": instance,
        "error": {
            "type": "dressage.paddock.blackbox.failures.BlackboxAgentFailure",
            "message": BACKEND_TIMEOUT,
            "summary": BACKEND_TIMEOUT,
        },
        "http": None,
        "sample": sample,
    }


def write_pt_dumps(records: Iterable[dict[str, Any]], folder: Path) -> int:
    """Write slime rollout dumps, one ``rollout_<id>.pt`` per trainer step.

    The step is ``metadata.dressage_return_rollout_id``; the file-level ``rollout_id``
    carries it, as slime's own dumps do. Records of one step must be consecutive (as in
    completion order), so only one step is held in memory.
    """
    with atomic_folder(Path(folder)) as temp:
        return _write_pt_dumps(records, temp)


def _write_pt_dumps(records: Iterable[dict[str, Any]], folder: Path) -> int:
    written: set[int] = set()
    step: int | None = None
    samples: list[dict[str, Any]] = []

    def flush() -> None:
        if step is None:
            return
        with atomic_path(folder / f"rollout_{step}.pt") as temp:
            dump_pt({"rollout_id": step, "samples": samples}, temp, archive_name=f"rollout_{step}")
        written.add(step)

    count = 0
    for count, record in enumerate(records, start=1):
        record_step = record.get("metadata", {}).get("dressage_return_rollout_id")
        if record_step is None:
            raise OutputError(f"record {count} has no trainer step; .pt dumps are one per step")
        if record_step != step:
            flush()
            if record_step in written:
                raise OutputError(f"record {count}: trainer step {record_step} is not consecutive")
            step, samples = int(record_step), []
        samples.append(record)
    flush()
    return count


def write_canonical_parquet(
    records: Iterable[dict[str, Any]],
    path: Path,
    *,
    chunk_records: int = 20_000,
    fields: FieldMap | None = None,
) -> int:
    """Write records straight to the canonical Parquet layout, ``chunk_records`` rows a
    part (row group), as :func:`records_to_table` would build each part.

    Each record is mapped to its canonical row as it comes and then let go: memory holds
    one part's rows (a few small values each), never a part's raw records, whose token
    lists are most of their size.
    """
    from analysis.formats.fields import canonical_row
    from analysis.formats.frames import rows_to_frame

    fields = fields or FieldMap()
    source = str(path)

    def chunks() -> Iterator[pl.DataFrame]:
        rows: list[dict[str, Any]] = []
        for number, record in enumerate(records, start=1):
            row = canonical_row(record, fields=fields, where=f"{source}: record {number}")
            row["source"] = source
            row["record"] = number
            rows.append(row)
            if len(rows) == chunk_records:
                yield rows_to_frame(rows, (), where=source)
                rows = []
        if rows:
            yield rows_to_frame(rows, (), where=source)

    return write_canonical_chunks(chunks(), Path(path))


# Simulated records carry both token-version forms, identical by construction; reading
# the spans skips re-encoding every token.
SPANS_FIRST = FieldMap(token_versions=())


def log_format_for(path: Path, log_format: str | None) -> str:
    """The format to write: as given, else from the extension; a mismatch is refused.

    Examples
    --------
    >>> log_format_for(Path("run.parquet"), None), log_format_for(Path("dumps"), "pt")
    ('parquet', 'pt')
    """
    name = Path(path).name.lower()
    by_name = next((fmt for fmt, endings in _ENDINGS.items() if name.endswith(endings)), None)
    if log_format is None:
        if name.endswith((".pt", ".pkl", ".pickle")):
            raise OutputError(
                f"{path}: slime dumps are a folder of rollout_<step>.pt files; "
                "give a folder name and " + setting("log_format", "pt")
            )
        if by_name is None:
            raise OutputError(
                f"{path}: cannot tell the format from the name; end it in .jsonl, .jsonl.gz "
                "or .parquet, or pass " + setting("log_format", "artifacts|pt") + " for a folder"
            )
        return by_name
    if by_name is not None and by_name != log_format:
        raise OutputError(
            f"{path}: the name says {by_name} but "
            + setting("log_format")
            + f" says {log_format}; "
            "make them agree"
        )
    if log_format in ("jsonl", "parquet") and by_name is None:
        raise OutputError(f"{path}: a {log_format} file should end in {_ENDINGS[log_format][0]}")
    return log_format


_ENDINGS: dict[str, tuple[str, ...]] = {
    "jsonl": (".jsonl", ".jsonl.gz", ".ndjson"),
    "parquet": (".parquet",),
}


def write_log(records: Iterable[dict[str, Any]], path: Path, log_format: str) -> int:
    """Write records as ``jsonl`` (``.gz`` compresses), ``parquet``, ``artifacts`` or ``pt``.

    ``parquet`` reads token versions from ``version_spans`` (as the simulator writes both).
    ``artifacts`` and ``pt`` write a new folder; ``artifacts`` a Dressage run folder
    (:func:`write_run_folder`: ``traj_payload/``, ``traj_err/``, ``dressage_log.txt``).
    """
    writers: dict[str, Callable[[Iterable[dict[str, Any]], Path], int]] = {
        "jsonl": write_jsonl,
        "parquet": lambda rows, target: write_canonical_parquet(rows, target, fields=SPANS_FIRST),
        "artifacts": write_run_folder,
        "pt": write_pt_dumps,
    }
    if log_format not in writers:
        raise OutputError(f"unknown log format {log_format!r}; use one of {', '.join(writers)}")
    return writers[log_format](records, Path(path))
