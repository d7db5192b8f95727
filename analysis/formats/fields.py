"""One raw slime/Dressage record to one canonical row (docs/semantics.md §1), without polars.

Kept apart from :mod:`analysis.formats.load` so that a helper process reading an artifact
folder (:mod:`analysis.formats.dressage.artifacts`) starts in milliseconds: it imports that module, this
one, :mod:`analysis.table.labels`, :mod:`analysis.errors`, :mod:`analysis.formats.pickled.pickles`, :mod:`analysis.table.schema`,
:mod:`analysis.formats.text.lean` and orjson,
never polars, pyarrow or NumPy.
"""

from __future__ import annotations

import math
import operator
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from analysis.errors import (
    LogFormatError,
    MissingFieldError,
    setting,
    short_repr,
)
from analysis.formats.dressage.records import as_time, attempt_group, error_document
from analysis.formats.text.lean import LeanList, lean_drift
from analysis.table.fieldmap import MISSING, SKIPPED, FieldMap, Found, lookup
from analysis.table.labels import (
    Span,
    SpanRuns,
    TooManySpans,
    derive_end_version,
    label_text,
    real_label,
    run_length_spans,
)
from analysis.table.limits import DEFAULT_LIMITS, Limits, over_limit
from analysis.table.schema import CANONICAL_COLUMNS, MAX_TOKENS, SPAN_RULE


def _fields_present(record: dict[str, Any]) -> str:
    # str(): a pickled sample's keys may be numbers, or anything hashable
    names = [str(k) for k in record if k != "metadata"]
    metadata = record.get("metadata")
    if isinstance(metadata, dict):
        names += [f"metadata.{k}" for k in metadata]
    return ", ".join(short_repr(n)[1:-1] if len(n) > 60 else n for n in names[:40]) + (
        " ..." if len(names) > 40 else ""
    )


def _as_int(value: Any, what: str, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer() and abs(value) >= 2**63:
        # (the JSON parser reads an integer beyond 64 bits as a float)
        raise LogFormatError(
            f"{where}: {what} is too large for a 64-bit integer (found {short_repr(value)})"
        )
    if isinstance(value, bool) or not isinstance(value, int):
        raise LogFormatError(f"{where}: {what} must be an integer (found {short_repr(value)})")
    if not -(2**63) <= value < 2**63:
        raise LogFormatError(
            f"{where}: {what} is too large for a 64-bit integer ({short_repr(value)})"
        )
    return value


def _as_id(value: Any) -> str | None:
    text = label_text(value)
    return text


def _int_list(value: Any, what: str, where: str) -> Sequence[Any] | None:
    if value is None or type(value) is list or type(value) is LeanList:
        return value  # (a LeanList: a large line's token list, folded as it was read)
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
        try:
            start, end, version = entry["start"], entry["end"], entry["version"]
        except (TypeError, KeyError):  # not an object, or a key missing
            raise LogFormatError(
                f"{where}: version_spans entry {short_repr(entry)} lacks start/end/version"
            ) from None
        if type(start) is not int or type(end) is not int or end >= 2**63:
            start = _as_int(start, "version_spans start", where)
            end = _as_int(end, "version_spans end", where)
        if start != expected or end is None or end <= start or end > MAX_TOKENS:
            raise LogFormatError(
                f"{where}: {SPAN_RULE} (found start {start}, end {end} where start "
                f"{expected} was due)"
            )
        label = version if type(version) is str else label_text(version)
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
    limits: Limits = DEFAULT_LIMITS,
) -> dict[str, Any]:
    """Map one raw slime/Dressage record to a canonical row (without source columns);
    a record of more than ``max_spans`` spans is refused (:class:`LimitError`)."""
    if not isinstance(record, dict):
        raise LogFormatError(
            f"{where}: a record must be a JSON object (found {type(record).__name__})"
        )
    if "metadata" in record and not isinstance(record["metadata"], (dict, type(None))):
        raise LogFormatError(
            f"{where}: metadata must be an object (found {type(record['metadata']).__name__})"
        )
    try:
        row = _canonical_row(
            record, fields=fields, where=where, file_step=file_step, extra=extra,
            max_spans=limits.max_spans,
        )  # fmt: skip
    except TooManySpans as exc:  # a lean list stopped at the limit
        raise over_limit(where, f"{exc} in one record", "max_spans", exc.most) from None
    except ValueError as exc:  # a label of the wrong type, from analysis.table.labels
        raise LogFormatError(f"{where}: {exc}") from exc
    except RecursionError as exc:  # JSON nests up to 1,024 deep; a value this deep is not a log's
        raise LogFormatError(f"{where}: a value nested too deeply to read") from exc
    spans = row["version_spans"]
    if spans is not None and len(spans) > limits.max_spans:
        what = f"{len(spans):,} runs of token versions (spans) in one record"
        raise over_limit(where, what, "max_spans", limits.max_spans)
    return row


def _canonical_row(
    record: dict[str, Any],
    *,
    fields: FieldMap,
    where: str,
    file_step: int | None,
    extra: Sequence[str],
    max_spans: int,
) -> dict[str, Any]:
    error = error_document(record)
    if error is not None:  # a Dressage error.json: the failed trajectory's sample, aborted
        record = error
    found = fields.find(record)
    group = _group_of(record, found, fields, where, error=error is not None)
    trajectory = found.trajectory
    if isinstance(trajectory, (dict, list)):
        raise LogFormatError(
            f"{where}: trajectory id must be a scalar (found {short_repr(trajectory)})"
        )
    segment = _as_int(found.segment, "segment_index", where) or 0

    tokens = _int_list(found.tokens, "tokens", where)
    loss_mask = _int_list(found.loss_mask, "loss_mask", where)
    response_length = _as_int(found.response_length, "response_length", where)
    if response_length is not None and not 0 <= response_length <= MAX_TOKENS:
        raise LogFormatError(
            f"{where}: response_length must be between 0 and {MAX_TOKENS:,} "
            f"(found {response_length:,})"
        )

    full_versions = _int_list(found.token_versions, "full_versions", where)
    raw_spans = found.version_spans
    spans: Sequence[Span] | None
    if isinstance(full_versions, LeanList):
        spans = full_versions.spans()
    elif full_versions is not None:
        spans = run_length_spans(full_versions, max_spans)
    elif raw_spans is not None:
        spans = _spans_from_field(raw_spans, where)
    else:
        spans = None

    end_raw = found.end_version
    end_version = real_label(end_raw)
    derived = False
    if end_raw is None and spans is None and found.weight_versions is not None:
        # Plain slime: spans over generate calls, not tokens (docs/semantics.md §1.1).
        spans, end_version = _call_versions(found.weight_versions, where, max_spans)
        derived = end_version is not None
    elif end_raw is None and spans:
        end_version = derive_end_version(
            spans, response_length=response_length, loss_mask=loss_mask
        )
        derived = end_version is not None

    step = file_step if file_step is not None else found.trainer_step
    reward = found.reward
    if isinstance(reward, bool) or not isinstance(reward, (int, float, type(None))):
        reward = None  # rewards can be structured (dicts of sub-rewards); not a scalar here
    status = "aborted" if error is not None else found.status
    remove = found.remove_sample

    drift, drift_tokens = _log_prob_drift(found, loss_mask, where)
    row = {
        "group_id": _as_id(group),
        "trajectory_id": _as_id(trajectory),
        "segment_index": segment,
        "sample_index": _as_int(found.sample_id, "index", where),
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
        "log_prob_drift": drift,
        "log_prob_tokens": drift_tokens,
        "completed_at": as_time(found.completed_at, where),
        "returned": None if found.returned is None else bool(found.returned),
    }
    for path in extra:
        if path in CANONICAL_COLUMNS:
            continue  # a canonical column is already there
        value = lookup(record, path)
        row[path] = None if value is MISSING or value is SKIPPED else value
    return row


_DEFAULT_GROUP = FieldMap().group


def _group_of(
    record: dict[str, Any], found: Found, fields: FieldMap, where: str, *, error: bool
) -> Any:
    """A record's group id: the first of the group paths (§1.1), or its attempt (§1.3)."""
    group = found.group
    if group is None:
        raise MissingFieldError(
            f"{where}: no group id (looked for {', '.join(fields.group)}); "
            f"fields present: {_fields_present(record)}; pass " + setting("fields", "group=PATH")
        )
    if isinstance(group, (dict, list)):
        raise LogFormatError(f"{where}: group id must be a scalar (found {type(group).__name__})")
    if fields.group == _DEFAULT_GROUP:  # a --field group=... override turns it off (§1.3)
        group = attempt_group(record, group, error)
    return group


def _call_versions(
    value: Any, where: str, max_spans: int
) -> tuple[Sequence[Span] | None, str | None]:
    """slime's ``weight_versions`` (one label per generate call) as spans indexed by call,
    and the last real label as the end version. An empty list, or text (a log written with
    ``default=str``), versions nothing."""
    if isinstance(value, str):
        return None, None
    labels = _int_list(value, "weight_versions", where) or []
    if not labels:
        return None, None
    spans = run_length_spans(labels, max_spans)
    real_of = {label: real_label(label) for label in set(spans.labels)}
    return spans, next(filter(None, map(real_of.__getitem__, reversed(spans.labels))), None)


def _as_reward(value: int | float | None, where: str) -> float | None:
    if value is None:
        return None
    try:
        reward = float(value)
    except OverflowError:
        raise LogFormatError(f"{where}: reward is too large ({short_repr(value)})") from None
    return None if math.isnan(reward) else reward


def _log_prob_drift(
    found: Found, loss_mask: Sequence[Any] | None, where: str
) -> tuple[float | None, int | None]:
    """Mean |rollout - trainer| log-prob over trainable response tokens, and how many there were."""
    rollout_raw = found.rollout_log_probs
    trainer_raw = found.log_probs
    if rollout_raw is None and trainer_raw is None:
        return None, None  # the common case, answered without building anything
    rollout = _int_list(rollout_raw, "rollout_log_probs", where)
    trainer = _int_list(trainer_raw, "log_probs", where)
    return log_prob_drift(rollout, trainer, loss_mask, where=where)


def log_prob_drift(
    rollout: Sequence[Any] | None,
    trainer: Sequence[Any] | None,
    loss_mask: Sequence[Any] | None,
    *,
    where: str,
) -> tuple[float | None, int | None]:
    """Mean |rollout - trainer| log-prob over trainable tokens and their number
    (docs/semantics.md §10.5): the mask applies when its length is theirs."""
    if rollout is None or trainer is None:
        return None, None
    if len(rollout) != len(trainer):
        raise LogFormatError(
            f"{where}: rollout_log_probs has {len(rollout)} values but log_probs {len(trainer)}"
        )
    mask = loss_mask if loss_mask is not None and len(loss_mask) == len(rollout) else None
    if type(rollout) is LeanList or type(trainer) is LeanList or type(mask) is LeanList:
        try:
            return lean_drift(rollout, trainer, mask)
        except (TypeError, ValueError, OverflowError) as exc:
            raise LogFormatError(f"{where}: log-probs must be numbers ({exc})") from exc
    try:
        diffs = [
            abs(float(a) - float(b))
            for i, (a, b) in enumerate(zip(rollout, trainer, strict=True))
            if mask is None or mask[i]
        ]
    except (TypeError, ValueError, OverflowError) as exc:
        raise LogFormatError(f"{where}: log-probs must be numbers ({exc})") from exc
    return (sum(diffs) / len(diffs) if diffs else None), len(diffs)


@dataclass
class RowColumns:
    """Canonical rows as columns of plain values (no polars), ready for a table.

    The spans are flattened: record ``i`` has the spans ``span_offsets[i]`` to
    ``span_offsets[i + 1]``, or none when ``spans_missing[i]``. Plain values, so a
    helper process can hand them over with :mod:`marshal`; span positions are 64-bit
    arrays (a token list of alternating versions has a span a token), handed over as
    their bytes.
    """

    columns: dict[str, Sequence[Any]]
    span_offsets: list[int]
    span_starts: array[int]
    span_ends: array[int]
    span_labels: list[str]
    spans_missing: list[bool]

    def __post_init__(self) -> None:
        for name in ("span_starts", "span_ends"):
            value = getattr(self, name)
            if not isinstance(value, array):  # bytes, from as_tuple, or a list
                positions = array("q")
                if isinstance(value, bytes):
                    positions.frombytes(value)
                else:
                    positions.extend(value)
                setattr(self, name, positions)

    def as_tuple(self) -> tuple[Any, ...]:
        """The fields as a tuple, for :mod:`marshal` (``RowColumns(*t)`` rebuilds it)."""
        return (
            self.columns, self.span_offsets, self.span_starts.tobytes(),
            self.span_ends.tobytes(), self.span_labels, self.spans_missing,
        )  # fmt: skip


_ROW_COLUMNS = tuple(name for name in CANONICAL_COLUMNS if name != "version_spans")


def row_columns(rows: Sequence[dict[str, Any]], extra: Sequence[str]) -> RowColumns:
    """Turn canonical rows (and their ``extra`` fields) into :class:`RowColumns`.

    The rows are used up: the first :class:`~analysis.table.labels.SpanRuns` is taken over
    whole, not copied (one record's spans can be most of the chunk), and grows with the
    spans of the rows after it.
    """
    # One pass over the rows makes the columns (a comprehension per column is slower).
    picked = zip(*map(operator.itemgetter(*_ROW_COLUMNS), rows), strict=True) if rows else ()
    columns: dict[str, Sequence[Any]] = dict.fromkeys(_ROW_COLUMNS, ())
    columns.update(zip(_ROW_COLUMNS, picked, strict=False))
    for path in extra:
        if path not in CANONICAL_COLUMNS:
            columns[path] = [row[path] for row in rows]
    offsets = [0]
    starts, ends = array("q"), array("q")
    labels: list[str] = []
    missing = []
    for row in rows:
        spans = row["version_spans"]
        missing.append(spans is None)
        if isinstance(spans, SpanRuns) and not labels:  # taken over, not copied
            starts, ends, labels = spans.starts, spans.ends, spans.labels
        elif isinstance(spans, SpanRuns):  # (extended in C: a span per token is no rarity)
            starts.extend(spans.starts)
            ends.extend(spans.ends)
            labels.extend(spans.labels)
        elif spans:
            for start, end, label in spans:
                starts.append(start)
                ends.append(end)
                labels.append(label)
        offsets.append(len(labels))
    return RowColumns(columns, offsets, starts, ends, labels, missing)
