"""Read slime rollout dumps (``torch.save(dict(rollout_id=..., samples=[...]))``) and put them in trainer-step order."""

from __future__ import annotations

import io
import pickletools
import zipfile
from pathlib import Path
from typing import Any

from analysis.errors import (
    DamagedFileError,
    LogFormatError,
    UnknownFormatError,
    setting,
    short_repr,
)
from analysis.formats.pickled import arrays
from analysis.formats.pickled.pickles import (
    MAX_DIRECTORY_BYTES,
    ZIP_MAGIC,
    directory_bytes,
    load_pickled,
    unread_method,
)
from analysis.formats.slime_dumps.train_dumps import train_dump_layout
from analysis.formats.source import Source
from analysis.table.limits import DEFAULT_LIMITS, Limits


def is_eval_dump(path: Path) -> bool:
    """Whether a file is a slime evaluation dump, ``eval_<N>.pt`` beside the training
    dumps: nothing inside says so, only the name (slime's own ``save_debug_rollout_data``
    names them this way)."""
    name = path.name.lower()
    return name.startswith("eval_") and name.endswith((".pt", ".pkl", ".pickle"))


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
            "folder to `compare` as " + setting("train_dumps", "PATH") + ", beside the rollout log "
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


def dump_rollout_id(
    path: Path, *, trust_pickle: bool, limits: Limits = DEFAULT_LIMITS
) -> int | None:
    """A dump's ``rollout_id``, read from the first bytes of its pickle when it is the
    first key of the dump's dict (as slime saves it: ``dict(rollout_id=..., samples=...)``)
    or when the dump is a list (None); else from the whole dump, read and let go. So
    ordering a folder's dumps holds one dump's samples at most, never the folder's."""
    peeked = _peek_rollout_id(path)
    if peeked is not _UNKNOWN:
        return peeked  # type: ignore[return-value]
    return dump_samples(path, trust_pickle=trust_pickle, limits=limits)[0]


_UNKNOWN = object()
_PEEK_BYTES = 512
_INTS = {"BININT", "BININT1", "BININT2", "LONG1", "INT", "LONG"}
_TEXTS = {"SHORT_BINUNICODE", "BINUNICODE", "UNICODE", "BINUNICODE8"}
_NOTES = {"BINPUT", "LONG_BINPUT", "PUT", "MEMOIZE", "FRAME", "PROTO", "MARK"}


def _peek_rollout_id(path: Path) -> object:
    """``rollout_id`` from the first opcodes of the dump's pickle (nothing is built or
    run: the opcodes are only parsed), None for a list, ``_UNKNOWN`` for anything else
    (another key first, a bool or a damaged file: the whole read decides)."""
    try:
        with path.open("rb") as handle:
            head = handle.read(_PEEK_BYTES)
            if head.startswith(ZIP_MAGIC):
                handle.seek(max(0, path.stat().st_size - (1 << 16) - 22))
                listed = directory_bytes(handle.read())
                if listed is None or listed > MAX_DIRECTORY_BYTES:
                    return _UNKNOWN  # the whole read says why
                with zipfile.ZipFile(handle) as archive:
                    infos = [i for i in archive.infolist() if i.filename.endswith("data.pkl")]
                    if not infos or any(unread_method(info) for info in infos):
                        return _UNKNOWN  # the whole read refuses it unread
                    with archive.open(min(infos, key=lambda i: len(i.filename))) as member:
                        head = member.read(_PEEK_BYTES)
        opcodes = [(op.name, arg) for op, arg, _ in _opcodes(head) if op.name not in _NOTES]
    except Exception:  # anything unexpected: the whole read reports it in its words
        return _UNKNOWN
    if opcodes[:1] == [("EMPTY_LIST", None)]:
        return None
    if len(opcodes) < 3 or opcodes[0][0] != "EMPTY_DICT":
        return _UNKNOWN
    (key_op, key), (value_op, value) = opcodes[1], opcodes[2]
    if key_op not in _TEXTS or key != "rollout_id":
        return _UNKNOWN
    if value_op == "NONE":
        return None
    return value if value_op in _INTS and type(value) is int else _UNKNOWN


def _opcodes(head: bytes) -> list[Any]:
    """The first few opcodes of a pickle's first bytes (the cut may end mid-opcode)."""
    found: list[Any] = []
    try:
        for opcode in pickletools.genops(io.BytesIO(head)):
            found.append(opcode)
            if len(found) >= 12:
                break
    except ValueError:  # cut mid-opcode, or the end of the bytes
        pass
    return found


def order_dumps(sources: list[Source], dump_ids: dict[Path, int | None]) -> list[Source]:
    """Put each run of consecutive slime dumps in rollout_id order; other files stay as given."""
    ordered: list[Source] = []
    run: list[Source] = []
    for source in [*sources, None]:
        if source is not None and source.format == "pt":
            run.append(source)
            continue
        run.sort(key=lambda s: (dump_ids[s.path] is None, dump_ids[s.path] or 0, str(s.path)))
        ordered += run
        run = []
        if source is not None:
            ordered.append(source)
    return ordered
