"""Records in Dressage's own shapes, as the readers of :mod:`analysis.formats.fields` meet them:
artifacts without a group id (grouped by attempt), ``error.json`` files of failed
trajectories, and completion times (docs/semantics.md §1.3, §12.1). Without polars: the
artifact helper process imports it."""

from __future__ import annotations

import datetime
import math
import re
from typing import Any

from analysis.errors import LogFormatError, short_repr


def attempt_label(
    instance_id: str, start_rollout_id: int | None, retry_count: int, draw: int | None = None
) -> str:
    """A Dressage group attempt's id: ``<instance>/s<start rollout>/r<retry count>``, or
    ``<instance>/e<draw>/r<retry count>`` for an attempt without a start rollout told apart
    by its prompt's draw ordinal (docs/semantics.md §12.1)."""
    if start_rollout_id is None and draw is not None:
        return f"{instance_id}/e{draw}/r{retry_count}"
    start = "?" if start_rollout_id is None else start_rollout_id
    return f"{instance_id}/s{start}/r{retry_count}"


def attempt_group(record: dict[str, Any], group: Any, always: bool) -> Any:
    """The group of a Dressage artifact: its attempt, when it carries no group id of its
    own (Dressage removes the async group id before writing artifacts, and the instance id
    it falls back to is shared by every epoch and retry of a prompt; §1.3, §12.1)."""
    metadata = record.get("metadata")
    if not isinstance(metadata, dict):
        return group
    start = as_count(metadata.get("dressage_start_rollout_id"))
    if start is None:
        return group
    if not always and (
        record.get("group_index") is not None
        or metadata.get("dressage_return_async_group_id") is not None
        or record.get("dressage_return_async_group_id") is not None
    ):
        return group
    instance = metadata.get("instance_id", record.get("instance_id"))
    if instance is None or isinstance(instance, (dict, list)):
        return group
    retry = as_count(metadata.get("dressage_retry_count"))
    return attempt_label(str(instance), start, retry or 0)


def as_count(value: Any) -> int | None:
    """A rollout id or retry count, read the same way by every reader: a whole number
    >= 0 (an integer, a float without a fraction, ASCII digits); None for anything else
    (then the record is not grouped by attempt)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, float):
        return int(value) if value.is_integer() and 0 <= value < 2**63 else None
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        number = int(value.strip())
        return number if number < 2**63 else None
    return None


def error_document(record: dict[str, Any]) -> dict[str, Any] | None:
    """A Dressage ``error.json`` (a failed trajectory: ``success`` false, the sample it was,
    the error) as a record of that sample: its session, its completion time, the versions
    the proxy's span check named (a span rejection's body lists them), status aborted."""
    sample = record.get("sample")
    if record.get("success") is not False or not isinstance(sample, dict):
        return None
    document = dict(sample)
    given = sample.get("metadata")
    if given is not None and not isinstance(given, dict):
        raise ValueError(
            f"the error's sample metadata must be an object (found {short_repr(given)})"
        )
    metadata = dict(given or {})
    if metadata.get("session_id") is None and record.get("session_id") is not None:
        metadata["session_id"] = record["session_id"]
    metadata.setdefault("instance_id", record.get("instance_id"))
    document["metadata"] = metadata
    document.setdefault("session_id", record.get("session_id"))
    # The failure time, where a completed segment keeps the proxy's read time.
    extra = metadata.get("proxy_extra_info")
    metadata["proxy_extra_info"] = {
        **(extra if isinstance(extra, dict) else {}),
        "timestamp": record.get("timestamp"),
    }
    versions = _rejected_versions(record)
    if versions:
        metadata["full_versions"] = versions
    # The trajectory never ended: it has no end version to observe (not one derived from
    # the versions the proxy named), and the proxy keeps none of its tokens.
    metadata["dressage_end_token_version"] = "-1"
    document.setdefault("response_length", 0)
    return document


def _rejected_versions(record: dict[str, Any]) -> list[str] | None:
    """The versions a span rejection's HTTP body names (``"versions": ["9", "10"]``)."""
    http = record.get("http")
    response = http.get("response") if isinstance(http, dict) else None
    body = response.get("body") if isinstance(response, dict) else None
    if not isinstance(body, str) or "partial_rollout_staleness_exceeded" not in body:
        return None
    found = _VERSIONS.search(body.replace('\\"', '"').replace("\\", ""))
    if found is None:
        return None
    return [label.strip().strip('"') for label in found.group(1).split(",") if label.strip()]


_VERSIONS = re.compile(r'"versions":\s*\[([^\]]*)\]')


def as_time(value: Any, where: str) -> float | None:
    """A completion time as Unix seconds: a number, or text of one (Dressage writes the
    proxy's read time as a string), or an ISO 8601 date (UTC when it names no zone, so a
    record reads the same on every machine). None when absent; an error for anything
    else, NaN and infinities included (a time that orders nothing)."""
    if value is None:
        return None
    seconds: float | None = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            seconds = float(value)
        except OverflowError:
            seconds = None
    elif isinstance(value, str):
        seconds = _text_time(value.strip())
    if seconds is None or not math.isfinite(seconds):
        raise LogFormatError(
            f"{where}: completion time {short_repr(value)} is not a number of seconds or a date"
        )
    return seconds


def _text_time(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.timestamp()


def optional_int(value: Any) -> int | None:
    """An id or index that may be absent or unreadable (then None): an integer that fits
    in 64 bits, an integral float, or text of one."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, float) and not value.is_integer():
        return None
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if -(2**63) <= number < 2**63 else None
