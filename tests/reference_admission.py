"""A plain reference model of the admission-bound checks (docs/semantics.md, "Other
systems' logs"), written from each system's own rule, one group at a time with dicts
and loops: no polars, nothing shared with ``analysis.rules.admission``.

A log is a list of records ``{"group_id", "labels", "trainer_step"}`` in log order,
``labels`` being the version label of each run of the record's ``version_spans``.
"""

from __future__ import annotations

from typing import Any

NOT_REAL = {"", "-1", "none", "unknown"}


def _start_of(labels: list[Any] | None) -> int | None:
    """The first real label, as an integer (None when it is not one, or there is none)."""
    for label in labels or []:
        if label is None:
            continue
        text = str(label).strip()
        if text.lower() in NOT_REAL:
            continue
        try:
            return int(text)
        except ValueError:
            return None
    return None


def groups_of(log: list[dict[str, Any]], step_offset: int) -> list[dict[str, Any]]:
    """Groups in order of first appearance: start = min start of its records, step = max."""
    seen: dict[str, dict[str, Any]] = {}
    for record in log:
        group = seen.setdefault(
            record["group_id"], {"group_id": record["group_id"], "start": None, "step": None}
        )
        start = _start_of(record["labels"])
        if start is not None and (group["start"] is None or start < group["start"]):
            group["start"] = start
        step = record["trainer_step"]
        if step is not None and (group["step"] is None or step > group["step"]):
            group["step"] = step
    groups = list(seen.values())
    for group in groups:
        group["trained"] = None if group["step"] is None else group["step"] - step_offset
    return groups


def lag_rule(log: list[dict[str, Any]], bound: int, step_offset: int) -> dict[str, Any]:
    """AReaL eta, SkyRL S and NeMo-RL gated M, as a lag: trained - start <= bound.
    Returns {group: (violates, over)}, None for a group not checked."""
    result: dict[str, Any] = {}
    for group in groups_of(log, step_offset):
        if group["start"] is None or group["trained"] is None:
            result[group["group_id"]] = None
            continue
        lag = group["trained"] - group["start"]
        result[group["group_id"]] = (lag > bound, max(lag - bound, 0))
    return result


def areal_capacity(starts: list[int], batch: int, eta: int) -> list[tuple[bool, int]]:
    """AReaL's StalenessManager in its own words, for groups consumed FIFO in full batches
    of ``batch``: the n-th accepted group (0-based) may start only while
    accepted + running < (eta + v + 1) * batch, v being the version when it starts; its
    excess is how many versions too early it started."""
    out = []
    for n, version in enumerate(starts):
        allowed = n < (eta + version + 1) * batch
        needed = n // batch - eta  # the least version at which it could have started
        out.append((not allowed, max(needed - version, 0)))
    return out


def skyrl_capacity(starts: list[int], batch: int, bound: int) -> list[tuple[bool, int]]:
    """SkyRL: cap = (S + g) * B - (accepted + running), g the 1-indexed step being trained
    while the group is scheduled (generation runs on version g - 1)."""
    out = []
    for n, version in enumerate(starts):
        g = version + 1
        allowed = n < (bound + g) * batch
        out.append((not allowed, max(n // batch + 1 - g - bound, 0)))
    return out


def nemo_gated(starts: list[int], batch: int, window: int) -> list[tuple[bool, int]]:
    """NeMo-RL _GatedSampler.admit: dispatch batch d (one per trainer step) waits while
    d - 1 >= trainer_version + window."""
    out = []
    for n, version in enumerate(starts):
        d = n // batch
        allowed = not (d - 1 >= version + window)
        out.append((not allowed, max(d - version - window, 0)))
    return out


def verl_async(log: list[dict[str, Any]], max_required: int, step_offset: int) -> dict[str, Any]:
    """verl's rollouter, weight version by weight version: at each update to version s its
    counter is reset to the groups still running or queued (started before s, consumed at
    s or later); each group started at s adds one; a start with the counter already at
    max_required would have been paused."""
    groups = groups_of(log, step_offset)
    result: dict[str, Any] = {
        g["group_id"]: None for g in groups if g["start"] is None or g["trained"] is None
    }
    known = [g for g in groups if g["start"] is not None and g["trained"] is not None]
    for version in sorted({g["start"] for g in known}):
        counter = len([g for g in known if g["start"] < version <= g["trained"]])
        for group in known:
            if group["start"] != version:
                continue
            allowed = counter < max_required
            counter += 1
            result[group["group_id"]] = (not allowed, max(counter - max_required, 0))
    return result
