"""Load rollout logs of every supported format into one canonical table (SPEC §1).

One row per record (one segment of one trajectory). Token versions are kept only as
run-length spans; an end version derived from them is flagged.
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import gzip
import json
import math
import os
import zlib
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson
import polars as pl
import pyarrow as pa

from analysis.errors import (
    InputNotFoundError,
    LogFormatError,
    MissingFieldError,
    ReplayError,
    UnknownFormatError,
    UnsafePickleError,
)
from analysis.labels import Span, derive_end_version, label_text, real_label, run_length_spans
from analysis.pickles import SKIPPED, ZIP_MAGIC, load_pickled

Format = Literal["jsonl", "artifacts", "pt", "parquet", "ipc"]
OnBadRecord = Literal["fail", "skip"]

SPAN_TYPE = pl.List(pl.Struct({"start": pl.Int64, "end": pl.Int64, "version": pl.String}))

CANONICAL_SCHEMA: dict[str, pl.DataType] = {
    "source": pl.String(),
    "record": pl.Int64(),
    "group_id": pl.String(),
    "trajectory_id": pl.String(),
    "segment_index": pl.Int64(),
    "sample_index": pl.Int64(),
    "end_version": pl.String(),
    "end_version_derived": pl.Boolean(),
    "version_spans": SPAN_TYPE,
    "token_count": pl.Int64(),
    "trainer_step": pl.Int64(),
    "response_length": pl.Int64(),
    "loss_mask_length": pl.Int64(),
    "reward": pl.Float64(),
    "status": pl.String(),
    "remove_sample": pl.Boolean(),
    "log_prob_drift": pl.Float64(),
    "log_prob_tokens": pl.Int64(),
}
"""Columns of the canonical table; ``convert`` writes exactly these (plus --order-by fields)."""

REQUIRED_COLUMNS = ("group_id", "trajectory_id", "segment_index", "end_version", "version_spans")


@dataclass(frozen=True)
class FieldMap:
    """Where each meaning is found in a raw record: dotted paths, first non-null wins."""

    group: tuple[str, ...] = (
        "group_index",
        "metadata.dressage_return_async_group_id",
        "dressage_return_async_group_id",
        "instance_id",
        "metadata.instance_id",
    )
    trajectory: tuple[str, ...] = (
        "metadata.parent_traj_id",
        "parent_traj_id",
        "trajectory_id",
        "session_id",
    )
    segment: tuple[str, ...] = ("metadata.segment_index", "segment_index")
    sample_id: tuple[str, ...] = ("index",)
    end_version: tuple[str, ...] = (
        "metadata.dressage_end_token_version",
        "dressage_end_token_version",
    )
    token_versions: tuple[str, ...] = ("metadata.full_versions", "full_versions")
    version_spans: tuple[str, ...] = ("metadata.version_spans", "version_spans")
    trainer_step: tuple[str, ...] = (
        "metadata.dressage_return_rollout_id",
        "dressage_return_rollout_id",
    )
    tokens: tuple[str, ...] = ("tokens",)
    response_length: tuple[str, ...] = ("response_length",)
    loss_mask: tuple[str, ...] = ("loss_mask",)
    reward: tuple[str, ...] = ("reward",)
    status: tuple[str, ...] = ("status",)
    remove_sample: tuple[str, ...] = ("remove_sample",)
    rollout_log_probs: tuple[str, ...] = ("rollout_log_probs", "metadata.rollout_log_probs")
    log_probs: tuple[str, ...] = ("log_probs", "metadata.log_probs")

    def override(self, **paths: str | None) -> FieldMap:
        """Return a copy where each given meaning is found only at the given path."""
        return dataclasses.replace(self, **{k: (v,) for k, v in paths.items() if v})

    @staticmethod
    def meanings() -> tuple[str, ...]:
        """The names accepted by :meth:`override` and by ``--field MEANING=PATH``."""
        return tuple(f.name for f in dataclasses.fields(FieldMap))


@dataclass(frozen=True)
class Source:
    """One input file and the format it is read as."""

    path: Path
    format: Format


_SKIP_REASONS = {
    "LogFormatError": "bad record",
    "MissingFieldError": "missing field",
    "InputNotFoundError": "unreadable file",
}


@dataclass
class LoadReport:
    """What loading saw besides the records: formats, skipped records, warnings."""

    sources: list[Source] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    skipped_where: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def formats(self) -> list[str]:
        return sorted({s.format for s in self.sources})

    def skip(self, error: ReplayError) -> None:
        reason = _SKIP_REASONS.get(type(error).__name__, "bad record")
        self.skipped[reason] += 1
        if len(self.skipped_where) < 5:
            self.skipped_where.append(str(error))


# --------------------------------------------------------------------------- discovery


def detect_sources(inputs: Sequence[str | Path]) -> tuple[list[Source], list[str]]:
    """Expand inputs (files, directories, globs) into sources in arrival order, plus warnings."""
    sources: list[Source] = []
    warnings: list[str] = []
    for raw in inputs:
        path = Path(raw)
        if not path.exists():
            pattern = str(raw)
            matches = (
                sorted(map(Path, glob.glob(pattern))) if any(c in pattern for c in "*?[") else []
            )
            if not matches:
                raise InputNotFoundError(f"{raw}: no such file or directory; check the path")
            for match in matches:
                found, more = detect_sources([match])
                sources += found
                warnings += more
            continue
        if path.is_dir():
            found, more = _directory_sources(path)
            sources += found
            warnings += more
        else:
            sources.append(Source(path, _file_format(path)))
    return sources, warnings


def _directory_sources(root: Path) -> tuple[list[Source], list[str]]:
    dumps = sorted(p for p in root.iterdir() if p.suffix in (".pt", ".pkl", ".pickle"))
    if dumps:
        # slime writes one dump per trainer step; order them by the step they carry.
        return [Source(p, "pt") for p in dumps], []
    artifacts = _artifact_files(root)
    if artifacts:
        return _artifact_sources(artifacts)
    logs = sorted(
        p
        for p in root.iterdir()
        if p.is_file() and any(p.name.endswith(s) for s in (".jsonl", ".jsonl.gz", ".ndjson"))
    )
    if logs:
        return [Source(p, "jsonl") for p in logs], []
    tables = sorted(p for p in root.iterdir() if p.suffix in (".parquet", ".arrow", ".ipc"))
    if tables:
        return [Source(p, _file_format(p)) for p in tables], []
    raise UnknownFormatError(
        f"{root}: a directory with no slime dumps (*.pt), no Dressage artifacts "
        "(<instance>/<session>/samples/<segment>.json), no *.jsonl and no *.parquet; "
        "point at the run's log folder or files"
    )


def _artifact_files(root: Path) -> list[tuple[int, str]]:
    """(modification time, path) of every ``<instance>/<session>/samples/<n>.json`` below root.

    os.scandir hands back types and stats without the per-path overhead of Path.glob,
    which matters for folders of tens of thousands of segment files.
    """
    found = []
    for instance in os.scandir(root):
        if not instance.is_dir():
            continue
        for session in os.scandir(instance.path):
            samples = os.path.join(session.path, "samples")
            if not session.is_dir() or not os.path.isdir(samples):
                continue
            for entry in os.scandir(samples):
                if entry.name.endswith(".json") and entry.is_file():
                    found.append((entry.stat().st_mtime_ns, entry.path))
    return found


def _artifact_sources(files: list[tuple[int, str]]) -> tuple[list[Source], list[str]]:
    stamped = sorted(files)
    warnings = []
    ties = Counter(stamp for stamp, _ in stamped)
    tied = sum(n for n in ties.values() if n > 1)
    if tied:
        warnings.append(
            f"{tied} of {len(files)} artifact files share a modification time with another, "
            "so their arrival order falls back to path order (as after a plain copy); "
            "pass --order-by with a completion-time field if the log has one"
        )
    return [Source(Path(p), "artifacts") for _, p in stamped], warnings


def _file_format(path: Path) -> Format:
    name = path.name.lower()
    if name.endswith(".json"):
        return "artifacts"  # one (pretty-printed) JSON document: an object or a list of them
    if name.endswith((".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz", ".json.gz")):
        return "jsonl"
    if name.endswith(".parquet"):
        return "parquet"
    if name.endswith((".arrow", ".ipc", ".feather")):
        return "ipc"
    if name.endswith((".pt", ".pkl", ".pickle")):
        return "pt"
    try:
        with path.open("rb") as handle:
            head = handle.read(8)
    except OSError as exc:
        raise InputNotFoundError(f"{path}: cannot read ({exc.strerror})") from exc
    if head.startswith(b"PAR1"):
        return "parquet"
    if head.startswith(b"ARROW1"):
        return "ipc"
    if head.startswith((ZIP_MAGIC, b"\x80")):
        return "pt"
    if head.startswith(b"\x1f\x8b") or head.lstrip()[:1] == b"{":
        return "jsonl"
    raise UnknownFormatError(
        f"{path}: unknown format (not JSONL, Parquet, Arrow IPC, or a slime .pt dump); "
        "give the file a .jsonl, .parquet, .arrow or .pt extension if it is one of those"
    )


# --------------------------------------------------------------------------- records


_MISSING = object()


def _lookup(record: dict[str, Any], path: str) -> Any:
    return _lookup_parts(record, _split(path))


@functools.lru_cache(maxsize=256)
def _split(path: str) -> tuple[str, ...]:
    return tuple(path.split("."))


def _lookup_parts(record: dict[str, Any], parts: tuple[str, ...]) -> Any:
    value: Any = record
    for part in parts:
        if type(value) is not dict:
            return _MISSING
        value = value.get(part, _MISSING)
        if value is _MISSING:
            return _MISSING
    return value


def _first(record: dict[str, Any], paths: tuple[str, ...]) -> Any:
    # The hot path of every loader: split paths are cached, lookups kept inline.
    for path in paths:
        value = _lookup_parts(record, _split(path))
        if value is not _MISSING and value is not None and value is not SKIPPED:
            return value
    return None


def _is_skipped(value: Any) -> bool:
    return value is SKIPPED


def _fields_present(record: dict[str, Any]) -> str:
    names = [k for k in record if k != "metadata"]
    metadata = record.get("metadata")
    if isinstance(metadata, dict):
        names += [f"metadata.{k}" for k in metadata]
    return ", ".join(names[:40]) + (" ..." if len(names) > 40 else "")


def _as_int(value: Any, what: str, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise LogFormatError(f"{where}: {what} must be an integer (found {_short(value)})")
    if not -(2**63) <= value < 2**63:
        raise LogFormatError(f"{where}: {what} is too large for a 64-bit integer ({_short(value)})")
    return value


def _short(value: Any) -> str:
    """A value for an error message, cut so that a huge one cannot flood the terminal."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _as_id(value: Any) -> str | None:
    text = label_text(value)
    return text


def _int_list(value: Any, what: str, where: str) -> list[Any] | None:
    if value is None or type(value) is list:
        return value
    if not isinstance(value, (list, tuple)):
        raise LogFormatError(f"{where}: {what} must be a list (found {type(value).__name__})")
    return list(value)


def _spans_from_field(value: Any, where: str) -> list[Span]:
    if not isinstance(value, (list, tuple)):
        raise LogFormatError(
            f"{where}: version_spans must be a list of {{start, end, version}} "
            f"(found {type(value).__name__})"
        )
    spans: list[Span] = []
    expected = 0
    for entry in value:
        if not isinstance(entry, dict) or not {"start", "end", "version"} <= entry.keys():
            raise LogFormatError(
                f"{where}: version_spans entry {_short(entry)} lacks start/end/version"
            )
        start = _as_int(entry["start"], "version_spans start", where)
        end = _as_int(entry["end"], "version_spans end", where)
        if start != expected or end is None or end <= start:
            raise LogFormatError(
                f"{where}: version_spans must be consecutive runs from 0 "
                f"(found start {start}, end {end} where start {expected} was due)"
            )
        label = label_text(entry["version"])
        spans.append((start, end, "" if label is None else label))
        expected = end
    return spans


def canonical_row(
    record: Any,
    *,
    fields: FieldMap,
    where: str,
    file_step: int | None = None,
    extra: Sequence[str] = (),
) -> dict[str, Any]:
    """Map one raw slime/Dressage record to a canonical row (without source columns)."""
    if not isinstance(record, dict):
        raise LogFormatError(
            f"{where}: a record must be a JSON object (found {type(record).__name__})"
        )
    if "metadata" in record and not isinstance(record["metadata"], (dict, type(None))):
        raise LogFormatError(
            f"{where}: metadata must be an object (found {type(record['metadata']).__name__})"
        )
    try:
        return _canonical_row(record, fields=fields, where=where, file_step=file_step, extra=extra)
    except ValueError as exc:  # a label of the wrong type, from analysis.labels
        raise LogFormatError(f"{where}: {exc}") from exc


def _canonical_row(
    record: dict[str, Any],
    *,
    fields: FieldMap,
    where: str,
    file_step: int | None,
    extra: Sequence[str],
) -> dict[str, Any]:
    group = _first(record, fields.group)
    if group is None:
        raise MissingFieldError(
            f"{where}: no group id (looked for {', '.join(fields.group)}); "
            f"fields present: {_fields_present(record)}; pass --field group=PATH"
        )
    if isinstance(group, (dict, list)):
        raise LogFormatError(f"{where}: group id must be a scalar (found {type(group).__name__})")
    trajectory = _first(record, fields.trajectory)
    if isinstance(trajectory, (dict, list)):
        raise LogFormatError(
            f"{where}: trajectory id must be a scalar (found {_short(trajectory)})"
        )
    segment = _as_int(_first(record, fields.segment), "segment_index", where) or 0

    tokens = _int_list(_first(record, fields.tokens), "tokens", where)
    loss_mask = _int_list(_first(record, fields.loss_mask), "loss_mask", where)
    response_length = _as_int(_first(record, fields.response_length), "response_length", where)
    if response_length is not None and response_length < 0:
        raise LogFormatError(f"{where}: response_length must be >= 0 (found {response_length})")

    full_versions = _int_list(_first(record, fields.token_versions), "full_versions", where)
    raw_spans = _first(record, fields.version_spans)
    spans: list[Span] | None
    if full_versions is not None:
        spans = run_length_spans(full_versions)
    elif raw_spans is not None:
        spans = _spans_from_field(raw_spans, where)
    else:
        spans = None

    end_raw = _first(record, fields.end_version)
    end_version = real_label(end_raw)
    derived = False
    if end_raw is None and spans:
        end_version = derive_end_version(
            spans, response_length=response_length, loss_mask=loss_mask
        )
        derived = end_version is not None

    step = file_step if file_step is not None else _first(record, fields.trainer_step)
    reward = _first(record, fields.reward)
    if isinstance(reward, bool) or not isinstance(reward, (int, float, type(None))):
        reward = None  # rewards can be structured (dicts of sub-rewards); not a scalar here
    status = _first(record, fields.status)
    remove = _first(record, fields.remove_sample)

    row = {
        "group_id": _as_id(group),
        "trajectory_id": _as_id(trajectory),
        "segment_index": segment,
        "sample_index": _as_int(_first(record, fields.sample_id), "index", where),
        "end_version": end_version,
        "end_version_derived": derived,
        "version_spans": spans,
        "token_count": None if tokens is None else len(tokens),
        "trainer_step": _as_int(step, "trainer step", where),
        "response_length": response_length,
        "loss_mask_length": None if loss_mask is None else len(loss_mask),
        "reward": _as_reward(reward, where),
        "status": None if status is None else str(status).strip().lower(),
        "remove_sample": None if remove is None else bool(remove),
        **_log_prob_drift(record, fields, loss_mask, where),
    }
    for path in extra:
        if path in CANONICAL_SCHEMA:
            continue  # a canonical column is already there
        value = _lookup(record, path)
        row[path] = None if value is _MISSING or _is_skipped(value) else value
    return row


def _as_reward(value: int | float | None, where: str) -> float | None:
    if value is None:
        return None
    try:
        reward = float(value)
    except OverflowError:
        raise LogFormatError(f"{where}: reward is too large ({_short(value)})") from None
    return None if math.isnan(reward) else reward


def _log_prob_drift(
    record: dict[str, Any], fields: FieldMap, loss_mask: list[Any] | None, where: str
) -> dict[str, Any]:
    """Mean |rollout - trainer| log-prob over trainable response tokens, and how many there were."""
    rollout = _int_list(_first(record, fields.rollout_log_probs), "rollout_log_probs", where)
    trainer = _int_list(_first(record, fields.log_probs), "log_probs", where)
    if rollout is None or trainer is None:
        return {"log_prob_drift": None, "log_prob_tokens": None}
    if len(rollout) != len(trainer):
        raise LogFormatError(
            f"{where}: rollout_log_probs has {len(rollout)} values but log_probs {len(trainer)}"
        )
    mask = loss_mask if loss_mask is not None and len(loss_mask) == len(rollout) else None
    try:
        diffs = [
            abs(float(a) - float(b))
            for i, (a, b) in enumerate(zip(rollout, trainer, strict=True))
            if mask is None or mask[i]
        ]
    except (TypeError, ValueError) as exc:
        raise LogFormatError(f"{where}: log-probs must be numbers ({exc})") from exc
    if not diffs:
        return {"log_prob_drift": None, "log_prob_tokens": 0}
    return {"log_prob_drift": sum(diffs) / len(diffs), "log_prob_tokens": len(diffs)}


# --------------------------------------------------------------------------- readers


def _jsonl_records(path: Path) -> Iterator[tuple[int, Any]]:
    """Yield (line number, parsed object or the LogFormatError of an unparsable line)."""
    try:
        with path.open("rb") as probe:
            compressed = probe.read(2) == b"\x1f\x8b"
        # Lines of token-level logs run to megabytes: a large buffer saves re-copying them.
        with gzip.open(path, "rb") if compressed else open(path, "rb", buffering=1 << 22) as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    yield number, _parse_json(line)
                except json.JSONDecodeError as exc:
                    # Yielded, not raised, so that --on-bad-record skip can go on reading.
                    yield (
                        number,
                        LogFormatError(
                            f"{path}:{number}: not valid JSON ({exc.msg}, column {exc.colno})"
                        ),
                    )
    except (OSError, EOFError, UnicodeDecodeError, zlib.error) as exc:
        if isinstance(exc, FileNotFoundError):
            raise InputNotFoundError(f"{path}: no such file") from exc
        raise LogFormatError(f"{path}: cannot be read as (gzipped) JSONL ({exc})") from exc


def _parse_json(data: bytes) -> Any:
    """orjson for speed; the standard parser for what it refuses but Python writes (NaN)."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(data)
    except UnicodeDecodeError as exc:
        raise json.JSONDecodeError(f"not UTF-8 ({exc.reason})", "", exc.start) from None
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply", "", 0) from None


def _artifact_record(path: Path) -> Any:
    try:
        with path.open("rb") as handle:
            return _parse_json(handle.read())
    except json.JSONDecodeError as exc:
        raise LogFormatError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from exc
    except OSError as exc:
        raise InputNotFoundError(f"{path}: cannot read ({exc.strerror})") from exc


def _dump_samples(path: Path, *, trust_pickle: bool) -> tuple[int | None, list[Any]]:
    obj = load_pickled(path, trust_pickle=trust_pickle)
    if isinstance(obj, dict) and "samples" in obj:
        rollout_id = obj.get("rollout_id")
        if rollout_id is not None and (
            isinstance(rollout_id, bool) or not isinstance(rollout_id, int)
        ):
            raise LogFormatError(
                f"{path}: rollout_id must be an integer (found {_short(rollout_id)})"
            )
        samples = obj["samples"]
    elif isinstance(obj, list):
        rollout_id, samples = None, obj
    else:
        raise LogFormatError(
            f"{path}: expected {{'rollout_id': int, 'samples': [dict, ...]}} or a list of "
            f"sample dicts (found {type(obj).__name__})"
        )
    if not isinstance(samples, list):
        raise LogFormatError(f"{path}: 'samples' must be a list (found {type(samples).__name__})")
    return rollout_id, [_plain(s) for s in samples]


def _plain(value: Any) -> Any:
    """Turn tensors (from a trusted torch.load) into lists so fields read the same."""
    if hasattr(value, "tolist") and not isinstance(value, (list, dict, str)):
        return value.tolist()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _read_canonical(source: Source, extra: Sequence[str]) -> pl.DataFrame:
    extra = [path for path in extra if path not in CANONICAL_SCHEMA]
    try:
        frame = (
            pl.read_parquet(source.path) if source.format == "parquet" else pl.read_ipc(source.path)
        )
    # A damaged file can make polars panic (a BaseException), not only raise.
    except (Exception, pl.exceptions.PanicException) as exc:
        raise LogFormatError(f"{source.path}: not a readable {source.format} file ({exc})") from exc
    missing = [c for c in (*REQUIRED_COLUMNS, *extra) if c not in frame.columns]
    if missing:
        raise MissingFieldError(
            f"{source.path}: not in the canonical layout: lacks {', '.join(missing)} "
            f"(columns: {', '.join(frame.columns)}); write it with `dressage-replay convert`"
            + (" --order-by FIELD to keep an ordering field" if extra else "")
        )
    for name, dtype in CANONICAL_SCHEMA.items():
        if name not in frame.columns:
            frame = frame.with_columns(pl.lit(None, dtype=dtype).alias(name))
    frame = frame.with_columns(pl.lit(str(source.path)).alias("source"))
    return frame.select(*CANONICAL_SCHEMA, *extra).cast(CANONICAL_SCHEMA)  # type: ignore[arg-type]


def _raw_records(
    source: Source, dumps: dict[Path, tuple[int | None, list[Any]]]
) -> Iterator[tuple[str, int, int | None, Any]]:
    """Yield (location, record number, file-level step, raw record) for one source."""
    if source.format == "jsonl":
        for number, record in _jsonl_records(source.path):
            yield f"{source.path}:{number}", number, None, record
    elif source.format == "artifacts":
        document = _artifact_record(source.path)
        if isinstance(document, list):
            for number, record in enumerate(document, start=1):
                yield f"{source.path}: record {number}", number, None, record
        else:
            yield source.path.as_posix(), 1, None, document
    elif source.format == "pt":
        rollout_id, samples = dumps[source.path]
        for number, record in enumerate(samples, start=1):
            yield f"{source.path}: sample {number}", number, rollout_id, record


def load_logs(
    inputs: Sequence[str | Path],
    *,
    fields: FieldMap | None = None,
    extra_fields: Sequence[str] = (),
    on_bad_record: OnBadRecord = "fail",
    trust_pickle: bool = False,
    report: LoadReport | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> pl.DataFrame:
    """Read every input, in the order given, into the canonical table.

    ``extra_fields`` are dotted paths kept as extra columns of the same name (for
    ``--order-by``). Pass a :class:`LoadReport` to learn formats, skips and warnings;
    ``progress(files_done, files_total)`` is called after each file.

    Examples
    --------
    >>> import analysis, tempfile, json, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "log.jsonl"
    >>> _ = path.write_text(json.dumps({"group_index": 0, "metadata": {
    ...     "parent_traj_id": "t0", "dressage_end_token_version": "v1"}}) + "\\n")
    >>> analysis.load_logs([path]).select("group_id", "trajectory_id", "end_version").row(0)
    ('0', 't0', 'v1')
    """
    report = report if report is not None else LoadReport()
    frames = list(
        iter_log_chunks(
            inputs, fields=fields, extra_fields=extra_fields, on_bad_record=on_bad_record,
            trust_pickle=trust_pickle, report=report, progress=progress,
        )
    )  # fmt: skip
    if not frames:
        return _rows_to_frame([], extra_fields, where="")
    try:
        table = pl.concat(frames, how="vertical_relaxed")
    except pl.exceptions.PolarsError as exc:
        raise LogFormatError(f"inputs disagree on column types ({exc})") from exc
    check_extra_fields(table, extra_fields, report)
    return table


def check_extra_fields(
    table: pl.DataFrame, extra_fields: Sequence[str], report: LoadReport
) -> None:
    """Refuse an ordering field no record has; warn about records that lack it."""
    missing = {path: table[path].null_count() for path in extra_fields}
    report_missing_extra_fields(missing, table.height, report)


def report_missing_extra_fields(missing: dict[str, int], total: int, report: LoadReport) -> None:
    """Given null counts of extra fields over ``total`` records, refuse or warn."""
    for path, count in missing.items():
        if total and count == total:
            raise MissingFieldError(
                f"no record has the field {path!r}; name a field the log has "
                "(see `dressage-replay inspect`) or drop --order-by"
            )
        if count:
            report.warnings.append(
                f"{count} of {total} records lack {path!r}; their groups arrive after all others"
            )


def iter_log_chunks(
    inputs: Sequence[str | Path],
    *,
    fields: FieldMap | None = None,
    extra_fields: Sequence[str] = (),
    on_bad_record: OnBadRecord = "fail",
    trust_pickle: bool = False,
    report: LoadReport | None = None,
    progress: Callable[[int, int], None] | None = None,
    chunk_records: int = 50_000,
) -> Iterator[pl.DataFrame]:
    """Yield the canonical table in chunks of at most ``chunk_records`` raw records.

    Memory stays bounded by a chunk (``convert`` writes each as it comes); many small
    files (an artifact folder) are gathered into one chunk rather than a frame each.
    """
    fields = fields or FieldMap()
    report = report if report is not None else LoadReport()
    sources, warnings = detect_sources(inputs)
    report.sources += sources
    report.warnings += warnings

    def skip_or_raise(error: ReplayError) -> None:
        if on_bad_record == "fail":
            if isinstance(error, LogFormatError) and not isinstance(error, UnsafePickleError):
                raise LogFormatError(
                    f"{error}; fix the record or pass --on-bad-record skip"
                ) from error
            raise error
        report.skip(error)

    dumps: dict[Path, tuple[int | None, list[Any]]] = {}
    for source in [s for s in sources if s.format == "pt"]:
        try:
            dumps[source.path] = _dump_samples(source.path, trust_pickle=trust_pickle)
        except UnsafePickleError:
            raise  # never skipped: the user must decide whether to trust the file
        except LogFormatError as error:
            skip_or_raise(error)
    sources = _order_dumps([s for s in sources if s.format != "pt" or s.path in dumps], dumps)

    rows: list[dict[str, Any]] = []
    for done, source in enumerate(sources, start=1):
        if progress is not None:
            progress(done - 1, len(sources))
        if source.format in ("parquet", "ipc"):
            if rows:
                yield _rows_to_frame(rows, extra_fields, where=str(source.path))
                rows = []
            try:
                table = _read_canonical(source, extra_fields)
            except LogFormatError as error:
                skip_or_raise(error)
                continue
            yield table
            continue
        path_text = str(source.path)
        records = _raw_records(source, dumps)
        while True:
            # A file that breaks midway (a truncated .gz) keeps the records read before.
            try:
                where, number, file_step, record = next(records)
            except StopIteration:
                break
            except LogFormatError as error:
                skip_or_raise(error)
                break
            try:
                if isinstance(record, ReplayError):
                    raise record
                row = canonical_row(
                    record, fields=fields, where=where, file_step=file_step, extra=extra_fields
                )
            except (LogFormatError, MissingFieldError) as error:
                skip_or_raise(error)
                continue
            row["source"] = path_text
            row["record"] = number
            rows.append(row)
            if len(rows) >= chunk_records:
                yield _rows_to_frame(rows, extra_fields, where=str(source.path))
                rows = []
    if progress is not None:
        progress(len(sources), len(sources))
    if rows:
        yield _rows_to_frame(rows, extra_fields, where="inputs")


def _rows_to_frame(rows: list[dict[str, Any]], extra: Sequence[str], *, where: str) -> pl.DataFrame:
    columns: dict[str, pl.Series] = {
        name: pl.Series(name, [row[name] for row in rows], dtype=dtype)
        for name, dtype in CANONICAL_SCHEMA.items()
        if name != "version_spans"
    }
    columns["version_spans"] = _spans_column([row["version_spans"] for row in rows])
    columns = {name: columns[name] for name in CANONICAL_SCHEMA}
    for path in extra:
        if path in CANONICAL_SCHEMA:
            continue
        try:
            columns[path] = pl.Series(path, [row[path] for row in rows], strict=False)
        except (TypeError, pl.exceptions.PolarsError) as exc:
            raise LogFormatError(
                f"{where}: field {path} has values of mixed types ({exc})"
            ) from exc
    return pl.DataFrame(columns)


def _spans_column(per_record: list[list[Span] | None]) -> pl.Series:
    """Build the spans column from flat Arrow arrays (a list of dicts per row is much slower)."""
    offsets = [0]
    starts: list[int] = []
    ends: list[int] = []
    labels: list[str] = []
    missing = []
    for spans in per_record:
        missing.append(spans is None)
        if spans:
            for start, end, label in spans:
                starts.append(start)
                ends.append(end)
                labels.append(label)
        offsets.append(len(starts))
    values = pa.StructArray.from_arrays(
        [pa.array(starts, pa.int64()), pa.array(ends, pa.int64()), pa.array(labels, pa.string())],
        names=["start", "end", "version"],
    )
    array = pa.ListArray.from_arrays(
        pa.array(offsets, pa.int32()), values, mask=pa.array(missing, pa.bool_())
    )
    return pl.Series("version_spans", pl.from_arrow(array)).cast(SPAN_TYPE)


def _order_dumps(
    sources: list[Source], dumps: dict[Path, tuple[int | None, list[Any]]]
) -> list[Source]:
    """Put each run of consecutive slime dumps in rollout_id order; other files stay as given."""
    ordered: list[Source] = []
    run: list[Source] = []
    for source in [*sources, None]:
        if source is not None and source.format == "pt":
            run.append(source)
            continue
        run.sort(key=lambda s: (dumps[s.path][0] is None, dumps[s.path][0] or 0, str(s.path)))
        ordered += run
        run = []
        if source is not None:
            ordered.append(source)
    return ordered


def records_to_table(
    records: Sequence[dict[str, Any]],
    *,
    fields: FieldMap | None = None,
    extra_fields: Sequence[str] = (),
    source: str = "<records>",
    first_record: int = 1,
) -> pl.DataFrame:
    """Build the canonical table from raw record dicts already in memory (a notebook's list)."""
    fields = fields or FieldMap()
    rows = []
    for number, record in enumerate(records, start=first_record):
        row = canonical_row(
            record, fields=fields, where=f"{source}: record {number}", extra=extra_fields
        )
        row["source"] = source
        row["record"] = number
        rows.append(row)
    return _rows_to_frame(rows, extra_fields, where=source)
