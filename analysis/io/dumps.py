"""Read slime rollout dumps (``torch.save(dict(rollout_id=..., samples=[...]))``) and put them in trainer-step order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from analysis.errors import (
    LogFormatError,
)
from analysis.io.discover import Source
from analysis.io.fields import (
    short_repr,
)
from analysis.io.pickles import load_pickled


def dump_samples(path: Path, *, trust_pickle: bool) -> tuple[int | None, list[Any]]:
    obj = load_pickled(path, trust_pickle=trust_pickle)
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
    return rollout_id, [_plain(s) for s in samples]


def _plain(value: Any) -> Any:
    """Turn arrays and tensors (rebuilt by the safe reader, or from a trusted torch.load)
    into lists, so fields read the same whichever way the file was read."""
    if hasattr(value, "tolist") and not isinstance(value, (list, dict, str)):
        return value.tolist()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    # A list of arrays (a column of per-sample tensors); a list of numbers is left as it is.
    if isinstance(value, list) and value and hasattr(value[0], "tolist"):
        return [_plain(v) for v in value]
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
