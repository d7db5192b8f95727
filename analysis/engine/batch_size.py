"""The batch size (B, groups per trainer batch) of a replay on the simple loop when none
is given: the log's own, where it can be known (docs/semantics.md §5.3)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from analysis.engine import PreparedLog
from analysis.errors import ConfigError, setting
from analysis.formats.dressage.run import is_run_folder, run_target_groups
from analysis.formats.load_report import LoadReport
from analysis.formats.registry import BY_NAME
from analysis.table.limits import DEFAULT_LIMITS, Limits


@dataclass(frozen=True)
class BatchSize:
    """B for the simple loop: ``None`` when the engine infers it from the log's trainer
    steps; ``note`` says where a value came from when it is not the given one."""

    batch_groups: int | None
    note: str | None = None


def batch_groups_for(
    inputs: Sequence[str | Path],
    given: int | None,
    prepared: PreparedLog,
    report: LoadReport,
    *,
    limits: Limits = DEFAULT_LIMITS,
) -> BatchSize:
    """B for the simple loop: ``given`` when given; else ``None`` when the log's trainer
    steps tell it (the engine infers it); else a Dressage run folder's own batch size
    (its dressage_log.txt target_groups, or its dumps, read within ``limits``). A log with
    neither is refused with a :class:`ConfigError` that names the input and speaks of its
    own kind."""
    if given is not None or prepared.inferred_batch_groups is not None or not prepared.n_groups:
        return BatchSize(given)
    other = ""
    named = str(inputs[0]) if len(inputs) == 1 else f"{inputs[0]} (and {len(inputs) - 1} more)"
    if len(inputs) == 1 and is_run_folder(inputs[0]):
        target = run_target_groups(inputs[0], limits)
        if target is not None:
            return BatchSize(target, f"batch_groups={target}, the run's own batch size")
        kind = (
            "a Dressage run folder whose dressage_log.txt and rollout_data/ dumps give no "
            "batch size (dressage/partial_rollout_target_groups)"
        )
    elif peers := [BY_NAME[name].display for name in report.formats if BY_NAME[name].peer]:
        kind = f"{' and '.join(peers)} logs record no trainer step per group"
    else:
        kind = (
            "its records carry no trainer step (a slime dump file's rollout_id, or "
            "metadata.dressage_return_rollout_id; a sample's own rollout_id is not one)"
        )
        other = (
            " (or "
            + setting("fields", "trainer_step=PATH")
            + " if the steps are under another name)"
        )
    raise ConfigError(
        f"{named}: batch_groups cannot be inferred: {kind}; pass "
        + setting("batch_groups", "B")
        + ", the groups per trainer batch"
        + other
    )
