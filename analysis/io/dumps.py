"""Read slime rollout dumps (``torch.save(dict(rollout_id=..., samples=[...]))``) and put them in trainer-step order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from analysis.errors import (
    DamagedFileError,
    LogFormatError,
    UnknownFormatError,
    setting,
    short_repr,
)
from analysis.io import arrays
from analysis.io.discover import Source, is_eval_dump
from analysis.io.limits import DEFAULT_LIMITS, Limits
from analysis.io.pickles import load_pickled
from analysis.io.train_dumps import train_dump_layout

EVAL_GROUP_PREFIX = "eval:"
"""Group ids of evaluation samples start with this (``eval:<rollout_id>:<key>``), so that
they never merge with training groups and ``inspect`` can count them apart."""


def dump_samples(
    path: Path, *, trust_pickle: bool, limits: Limits = DEFAULT_LIMITS
) -> tuple[int | None, list[Any]]:
    """A dump's ``rollout_id`` and its samples as plain dicts; an evaluation dump's
    samples get group ids of their own (:func:`eval_group_ids`)."""
    obj = load_pickled(path, trust_pickle=trust_pickle, limits=limits)
    layout = train_dump_layout(obj)
    if layout is not None:
        raise UnknownFormatError(
            f"{path}: a slime train-side dump ({layout} layout), not a rollout log; give its "
            f"folder to `compare` as {setting('train_dumps', 'PATH')}, beside the rollout log "
            "(rollout_data/) it was trained on"
        )
    if isinstance(obj, dict) and "samples" in obj:
        rollout_id = obj.get("rollout_id")
        if rollout_id is not None and (
            isinstance(rollout_id, bool) or not isinstance(rollout_id, int)
        ):
            raise LogFormatError(
                f"{path}: rollout_id must be an integer (found {short_repr(rollout_id)})"
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
    try:
        seen: dict[int, Any] = {}
        plain = [_plain(s, seen) for s in samples]  # arrays are decoded here, within their budget
    except (arrays.ArrayError, RecursionError) as exc:
        problem = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise DamagedFileError(f"{path}: an array that cannot be read ({problem})") from exc
    if is_eval_dump(path):
        plain = eval_group_ids(plain, rollout_id)
    return rollout_id, plain


def eval_group_ids(samples: list[Any], rollout_id: int | None) -> list[Any]:
    """Evaluation samples with the group id ``eval:<rollout_id>:<key>``, the key being
    ``metadata.instance_id`` (samples of one prompt form a group), else the sample's
    ``index``, else its position: they carry no group id of their own (``group_index``
    is None), and the instance id they would fall back to could be a training prompt's."""
    marked = []
    for position, sample in enumerate(samples):
        if not isinstance(sample, dict):
            marked.append(sample)  # a bad record, said so where it is read
            continue
        metadata = sample.get("metadata")
        key = metadata.get("instance_id") if isinstance(metadata, dict) else None
        if key is None or isinstance(key, (dict, list)):
            index = sample.get("index")
            key = index if type(index) is int else position
        step = "" if rollout_id is None else rollout_id
        marked.append({**sample, "group_index": f"{EVAL_GROUP_PREFIX}{step}:{key}"})
    return marked


def _plain(value: Any, seen: dict[int, Any]) -> Any:
    """Turn arrays and tensors (rebuilt by the safe reader, or from a trusted torch.load)
    into lists, so fields read the same whichever way the file was read. A dict or list
    referenced many times is turned once (``seen``): copied at each reference, a pickle
    that reuses one dict through its memo would grow without bound here."""
    if hasattr(value, "tolist") and not isinstance(value, (list, dict, str)):
        return value.tolist()
    if not isinstance(value, (dict, list)):
        return value
    key = id(value)
    if key in seen:
        return seen[key]
    if isinstance(value, dict):
        plain: dict[Any, Any] = {}
        seen[key] = plain
        plain.update((k, _plain(v, seen)) for k, v in value.items())
        return plain
    # A list of arrays (a column of per-sample tensors); a list of numbers is left as it is.
    if value and hasattr(value[0], "tolist"):
        plain_list: list[Any] = []
        seen[key] = plain_list
        plain_list.extend(_plain(v, seen) for v in value)
        return plain_list
    return value


def order_dumps(
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
