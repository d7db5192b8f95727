"""Read a Dressage run folder (``traj_payload/``, ``traj_err/``, ``rollout_data/``, the log,
the metrics and the prompts) into tables that a replay of Dressage's collector loop needs.

One row per trajectory (session folder), trajectories grouped into *attempts* by
(instance id, start rollout id, retry count), the rollout calls of the log, the groups
each step's dump holds, and the metrics Dressage returned. Only the trajectory folders
are required; every other file is optional and its absence is reported in ``warnings``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from analysis.errors import (
    InputNotFoundError,
    MissingFieldError,
    ReplayError,
    UnknownFormatError,
)
from analysis.formats.dressage.identity import (
    build_attempts,
    detect_loop,
    enrich_from_dumps,
    mark_incomplete,
    tell_attempts_apart,
)
from analysis.formats.dressage.log import (
    DressageLog,
    calls_frame,
    events_frame,
    read_dressage_log,
)
from analysis.formats.dressage.records import attempt_label
from analysis.formats.dressage.retries import RetryLimit, infer_retry_limit
from analysis.formats.dressage.run_metrics import USED_METRICS, read_metrics, read_prompt_order
from analysis.formats.dressage.sessions import (
    ERRORS,
    FAIL_KINDS,
    PAYLOAD,
    SPAN_MARKER,
    Trajectory,
    classify_failure,
    is_kind,
    read_trajectories,
    subfolders,
    unreadable,
)
from analysis.formats.dressage.step_dumps import KEPT_SCHEMA, read_dump_rows
from analysis.table.limits import DEFAULT_LIMITS, Limits

DUMPS = "rollout_data"
METRICS_CSV = "dressage_metrics.csv"
"""The per-step metrics exported from a dashboard as CSV, read when there is no JSONL."""
LOG, METRICS, PROMPTS, ROLLOUTS = (
    "dressage_log.txt",
    "dressage_metrics.jsonl",
    "prompts.jsonl",
    "rollouts.jsonl",
)


TRAJECTORY_SCHEMA: dict[str, Any] = {
    "trajectory_id": pl.String,
    "attempt_id": pl.String,
    "instance_id": pl.String,
    "start_rollout_id": pl.Int64,
    "retry_count": pl.Int64,
    "finished_at": pl.Float64,
    "completed": pl.Boolean,
    "end_version": pl.String,
    "span": pl.Int64,
    "fail_kind": pl.String,
    "sample_index": pl.Int64,
    "sample_position": pl.Int64,
    "group_index": pl.Int64,
    "async_group_id": pl.Int64,
    "span_marker": pl.Boolean,
    "segments": pl.Int64,
    "response_tokens": pl.Int64,
    "turn_tokens": pl.List(pl.Int64),
    "tail_tokens": pl.Int64,
}
ATTEMPT_SCHEMA: dict[str, Any] = {
    "attempt_id": pl.String,
    "instance_id": pl.String,
    "start_rollout_id": pl.Int64,
    "retry_count": pl.Int64,
    "completed_at": pl.Float64,
    "retry_of": pl.String,
    "draw": pl.Int64,
    "fail_kind": pl.String,
    "span_verdict": pl.Boolean,
    "async_group_id": pl.Int64,
    "trajectories": pl.Int64,
    "order_known": pl.Boolean,
    "incomplete": pl.Boolean,
}


@dataclass(frozen=True)
class RunLog:
    """Everything a Dressage run left on disk, as tables (see the module docstring).

    ``trajectories`` is in attempt order, then sample order (``sample_position``);
    ``calls`` is empty without a log; ``kept`` holds one row per session of each dump,
    in dump order; ``log_events`` one row per drop / retry / exhausted / final-drain line.
    """

    root: Path
    trajectories: pl.DataFrame
    attempts: pl.DataFrame
    calls: pl.DataFrame
    kept: pl.DataFrame
    metrics: pl.DataFrame
    log_events: pl.DataFrame
    samples_per_prompt: int | None
    target_groups: int | None
    final_rollout_id: int | None
    zone_offset_s: float
    sources: tuple[str, ...]
    warnings: tuple[str, ...] = ()
    retry_limit: RetryLimit = field(default_factory=RetryLimit)
    """What the files say of ``DRESSAGE_ROLLOUT_MAX_RETRIES`` (bounds and their evidence)."""
    max_preempts: tuple[int, ...] = ()
    """The ``max_preempts`` values named in the run's span rejections (the proxy's 502
    bodies in ``traj_err/`` or the log); empty when no rejection names it."""
    loop: str | None = None
    """The collector loop that made the run, as its files tell: ``partial``
    (``partial_async_rollout.py``) or ``fully`` (``fully_async_rollout.py``); None when
    nothing tells (docs/semantics.md §12.4)."""
    loop_reason: str = "nothing in the files tells"
    """What told the loop, in words."""
    ambiguous_attempts: int = 0
    """Attempts without a start rollout told apart by finish times alone where their
    times could interleave (§12.1)."""
    weight_updates: tuple[tuple[float, int], ...] = ()
    """(Unix time, rollout id) of the log's "weights updated (weight_update_after_rollout_r)"
    lines: the trainer starts rollout call r + 2 right after that update (§12.4)."""

    @property
    def trainer_steps(self) -> int:
        """The run's trainer steps (rollout calls), as its dumps, log and metrics number
        them: its trajectory records carry none."""
        ids: set[int] = set()
        for table in (self.kept, self.calls, self.metrics):
            if "rollout_id" in table.columns:
                ids.update(table["rollout_id"].drop_nulls().to_list())
        if self.final_rollout_id is not None:
            ids.add(self.final_rollout_id)
        return len(ids)

    def __repr__(self) -> str:
        return (
            f"RunLog({str(self.root)!r}: {self.attempts.height:,} attempts, "
            f"{self.trajectories.height:,} trajectories, {self.trainer_steps:,} trainer steps, "
            f"loop={self.loop}, target_groups={self.target_groups})"
        )

    def _repr_html_(self) -> str:
        """The tables in a notebook: their sizes, and the head of each."""
        import html

        rows = "".join(
            f"<details><summary>{name}: {table.height:,} rows</summary>"
            f"{table.head(5)._repr_html_()}</details>"
            for name, table in (
                ("trajectories", self.trajectories), ("attempts", self.attempts),
                ("calls", self.calls), ("kept", self.kept), ("metrics", self.metrics),
                ("log_events", self.log_events),
            )
        )  # fmt: skip
        return f"<p>{html.escape(repr(self))}</p>{rows}"


def find_run_root(path: Path) -> Path | None:
    """The folder holding ``traj_payload/`` or ``traj_err/``: ``path`` itself, its parent
    when pointed at one of those, or its only subfolder that holds them (an artifact
    tree with its ``<run>`` level)."""

    def holds(folder: Path) -> bool:
        return (folder / PAYLOAD).is_dir() or (folder / ERRORS).is_dir()

    if not path.is_dir():
        return None
    if path.name in (PAYLOAD, ERRORS):
        return path.parent
    if holds(path):
        return path
    inner = [child for child in subfolders(path) if holds(child)]
    return inner[0] if len(inner) == 1 else None


def is_run_folder(path: str | Path) -> bool:
    """Whether ``path`` is (or holds exactly one) Dressage run folder; False for a path
    that cannot be looked at (reading it says why, in the loader's words)."""
    try:
        return find_run_root(Path(path)) is not None
    except OSError:
        return False


def read_run(
    path: str | Path, *, trajectories_only: bool = False, limits: Limits = DEFAULT_LIMITS
) -> RunLog:
    """Read a Dressage run folder into a :class:`RunLog`.

    ``trajectories_only`` reads just the trajectory folders (trajectories and attempts),
    for a caller that does not replay the loop. Every file is read within ``limits``
    (:class:`analysis.Limits`, or :attr:`analysis.ReadOptions.limits`), as ``load_logs``
    reads logs: a JSON file or line past ``max_record_bytes``, a dump past the pickle
    limits, is refused naming the limit.
    """
    given = Path(path)
    try:
        os.stat(given)
        root = find_run_root(given)
    except FileNotFoundError:
        raise InputNotFoundError(f"{given}: no such file or directory; check the path") from None
    except OSError as exc:
        raise unreadable(given, exc, "cannot look into it") from exc
    if root is None:
        raise UnknownFormatError(
            f"{given}: not a Dressage run folder (no traj_payload/ or traj_err/ in it or in "
            "exactly one of its subfolders); point at the folder that holds traj_payload/"
        )
    warnings: list[str] = []
    sources = [name for name in (PAYLOAD, ERRORS) if (root / name).is_dir()]
    trajectories = read_trajectories(root, warnings, limits)
    if not trajectories:
        raise MissingFieldError(
            f"{root}: no trajectory folder ({PAYLOAD}/<instance>/<session>/ with session.json "
            f"or samples/, or {ERRORS}/<instance>/<session>/error.json); point at a run folder "
            "that holds them"
        )
    prompts: list[str] | None = None
    dumps: list[dict[str, Any]] = []
    log: DressageLog | None = None
    metrics: list[dict[str, Any]] = []
    if not trajectories_only:
        dumps, dump_source = read_dump_rows(root, limits)
        if dump_source:
            sources.append(dump_source)
        else:
            warnings.append(
                "no rollout_data/*.pt or rollouts.jsonl: kept groups cannot be checked and "
                "the sample order of kept attempts is guessed"
            )
        if is_kind(root / PROMPTS, "file"):
            sources.append(PROMPTS)
            prompts = read_prompt_order(root / PROMPTS, limits)
        else:
            warnings.append("no prompts.jsonl: draw ordinals fall back to instance-id order")
        metrics_file = next(
            (root / name for name in (METRICS, METRICS_CSV) if is_kind(root / name, "file")), None
        )
        if metrics_file is not None:
            sources.append(metrics_file.name)
            metrics = read_metrics(metrics_file, limits)
            _warn_repeated_steps(metrics, metrics_file.name, warnings)
        else:
            warnings.append("no dressage_metrics.jsonl: the per-step metrics cannot be checked")
        if is_kind(root / LOG, "file"):
            sources.append(LOG)
            log = read_dressage_log(
                root / LOG,
                error_times={
                    t.trajectory_id: t.finished_at for t in trajectories if not t.completed
                },
                first_finish=min(t.finished_at for t in trajectories),
                limits=limits,
            )
            warnings += log.warnings(LOG)
        else:
            warnings.append(
                "no dressage_log.txt: rollout call starts are inferred from the dumps and "
                "metrics, and the log's drop / retry lines cannot be checked"
            )
    enrich_from_dumps(trajectories, dumps)
    samples_per_prompt = _samples_per_prompt(log, metrics, trajectories, dumps)
    ambiguous = tell_attempts_apart(trajectories, samples_per_prompt, warnings)
    attempts = build_attempts(trajectories, prompts, warnings)
    loop, loop_reason = detect_loop(log, trajectories, dumps)
    if ERRORS not in sources and not trajectories_only:
        mark_incomplete(attempts, samples_per_prompt, warnings)
    retry_limit, retry_warnings = infer_retry_limit(
        (row["retry_count"] for row in attempts),
        {
            t.async_group_id: t.retry_count
            for t in trajectories
            if t.async_group_id is not None and not t.completed
        },
        ((event.kind, event.number) for event in (log.events if log else ())),
    )
    warnings += retry_warnings
    return RunLog(
        root=root,
        trajectories=_trajectory_frame(trajectories),
        attempts=pl.DataFrame(attempts, schema=ATTEMPT_SCHEMA, orient="row"),
        calls=calls_frame(log),
        kept=pl.DataFrame(dumps, schema=KEPT_SCHEMA),
        metrics=_metrics_frame(metrics),
        log_events=events_frame(log),
        samples_per_prompt=samples_per_prompt,
        target_groups=_target_groups(log, metrics, dumps),
        final_rollout_id=log.final_rollout_id if log else None,
        zone_offset_s=log.zone_offset_s if log else 0.0,
        sources=tuple(sources),
        warnings=tuple(warnings),
        retry_limit=retry_limit,
        max_preempts=tuple(
            sorted({m for t in trajectories for m in t.max_preempts}.union(*_log_preempts(log)))
        ),
        loop=loop,
        loop_reason=loop_reason,
        ambiguous_attempts=ambiguous,
        weight_updates=tuple((at, r) for at, r, _ in (log.weight_updates if log else ())),
    )


# --------------------------------------------------------------------------- trajectories


def _log_preempts(log: DressageLog | None) -> list[set[int]]:
    return [set(log.max_preempts)] if log is not None else []


# --------------------------------------------------------------------------- attempts


# --------------------------------------------------------------------------- facts and frames


def _samples_per_prompt(
    log: DressageLog | None,
    metrics: list[dict[str, Any]],
    trajectories: list[Trajectory],
    dumps: list[dict[str, Any]],
) -> int | None:
    if log is not None and log.samples_per_prompt:
        return log.samples_per_prompt
    for row in metrics[:1]:  # both checked by read_metrics: whole numbers >= 1
        groups = row.get("dressage/partial_rollout_target_groups")
        samples = row.get("dressage/partial_rollout_target_samples")
        if groups and samples:
            return max(1, int(samples) // int(groups))
    per_group: dict[tuple[int, int], int] = {}
    for row in dumps:  # a kept group holds every trajectory of its attempt
        key2 = (row["rollout_id"], row["group_position"])
        per_group[key2] = per_group.get(key2, 0) + 1
    if per_group:
        return max(per_group.values())
    counts: dict[tuple[str, int | None, int], int] = {}
    for t in trajectories:
        key = (t.instance_id, t.start_rollout_id, t.retry_count)
        counts[key] = counts.get(key, 0) + 1
    return max(counts.values()) if counts else None


def run_target_groups(path: str | Path, limits: Limits = DEFAULT_LIMITS) -> int | None:
    """A Dressage run folder's own batch size, cheaply: the target_groups of the last
    rollout call that dressage_log.txt starts (as :func:`read_run` takes it, from the
    same lines), else the metrics' or the dumps' (the whole run is read only then); None
    when the run does not say, or cannot be read (within ``limits``: a file past them is
    refused, as reading the run would refuse it)."""
    from analysis.formats.dressage.log import call_start_target_groups
    from analysis.table.limits import LimitError

    root = find_run_root(Path(path))
    if root is None:
        return None
    if is_kind(root / LOG, "file"):
        try:
            target = call_start_target_groups(root / LOG, limits)
        except LimitError:
            raise
        except ReplayError:
            target = None  # an unreadable log: the slower way below
        if target is not None:
            return target or None
    try:
        return read_run(root, limits=limits).target_groups
    except LimitError:
        raise
    except ReplayError:
        return None


def _target_groups(
    log: DressageLog | None, metrics: list[dict[str, Any]], dumps: list[dict[str, Any]]
) -> int | None:
    if log is not None and log.target_groups:
        return log.target_groups
    for row in metrics[:1]:
        if row.get("dressage/partial_rollout_target_groups"):
            return int(row["dressage/partial_rollout_target_groups"])
    per_step: dict[int, set[int]] = {}
    for row in dumps:
        per_step.setdefault(row["rollout_id"], set()).add(row["group_position"])
    return max((len(groups) for groups in per_step.values()), default=None)


def _warn_repeated_steps(metrics: list[dict[str, Any]], name: str, warnings: list[str]) -> None:
    """A step on two lines of the metrics (a file appended to twice): the later line is used."""
    counts: dict[int, int] = {}
    for row in metrics:
        counts[row["rollout_id"]] = counts.get(row["rollout_id"], 0) + 1
    repeated = [step for step, count in counts.items() if count > 1]
    if repeated:
        shown = ", ".join(map(str, repeated[:5])) + (", ..." if len(repeated) > 5 else "")
        warnings.append(
            f"{name}: {len(repeated)} rollout_id(s) on more than one line ({shown}); the last "
            "line of each is used (remove the others if the file was appended to twice)"
        )


def _metrics_frame(metrics: list[dict[str, Any]]) -> pl.DataFrame:
    """The metrics the replay uses (numbers, checked by ``read_metrics``), one row per line."""
    if not metrics:
        return pl.DataFrame()
    names = [name for name in USED_METRICS if any(name in row for row in metrics)]
    schema: dict[str, Any] = {"rollout_id": pl.Int64, **dict.fromkeys(names, pl.Float64)}
    rows = [
        [row["rollout_id"], *(None if row.get(n) is None else float(row[n]) for n in names)]
        for row in metrics
    ]
    return pl.DataFrame(rows, schema=schema, orient="row")


def _trajectory_frame(trajectories: list[Trajectory]) -> pl.DataFrame:
    return pl.DataFrame(
        [
            {
                name: list(value) if type(value := getattr(t, name)) is tuple else value
                for name in TRAJECTORY_SCHEMA
            }
            for t in trajectories
        ],
        schema=TRAJECTORY_SCHEMA,
    )


__all__ = [
    "FAIL_KINDS",
    "SPAN_MARKER",
    "RunLog",
    "attempt_label",
    "classify_failure",
    "find_run_root",
    "is_run_folder",
    "read_run",
]
