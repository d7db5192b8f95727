"""What a log holds and how healthy it is, before any replay."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from analysis.engine import PreparedLog, prepare
from analysis.engine.run_loop.fully import ThrownAway
from analysis.formats.load_report import LoadReport
from analysis.formats.registry import BY_NAME, peer_limits
from analysis.formats.slime_dumps.reader import EVAL_GROUP_PREFIX

_NUMERIC = re.compile(r"-?\d+")
_ATTEMPT = r"/s\d+/r\d+$"
"""A group id made from a Dressage attempt key (``analysis.formats.dressage.records``)."""


@dataclass(frozen=True)
class LogInspection:
    """Counts, versions in observation order, and data-quality findings of one log."""

    formats: tuple[str, ...]
    sources: int
    records: int
    groups: int
    trajectories: int
    segments: int
    trainer_steps: int
    inferred_batch_groups: int | None
    versions: tuple[str, ...]
    quality: dict[str, int]
    warnings: tuple[str, ...] = field(default=())
    eval_groups: int = 0
    """Groups of evaluation samples (read with ``include_eval``; ids ``eval:...``)."""
    eval_records: int = 0
    attempt_groups: int = 0
    """Groups formed as Dressage attempts (``<instance>/s<start>/r<retry>``): records that
    carried no group id of their own (Dressage artifacts, docs/semantics.md §1.3)."""
    limits: tuple[str, ...] = field(default=())
    """What another system's log carries and what it cannot tell, one line each
    (docs/semantics.md, "Other systems' logs"); empty for Dressage and slime logs."""
    run_batch_groups: int | None = None
    """A Dressage run folder's own batch size (dressage_log.txt's target_groups), which
    its trajectory records do not carry: what the commands use when B is not given."""
    run_trainer_steps: int | None = None
    """A Dressage run folder's trainer steps, as its dumps, log and metrics number them
    (its trajectory records carry none); None for other logs."""
    converted_from: tuple[str, ...] = field(default=())
    """The formats a converted (Parquet/Arrow) log was read from, as its metadata says."""
    thrown_away: ThrownAway | None = None
    """A fully-async Dressage run folder's surplus: what its loop polled and threw away
    (docs/semantics.md §12.4); None for other logs."""
    thrown_away_setting: str = ""
    """The replay that counted it (loop, K), in words."""
    settings_engine: str = "simple-loop"
    """The replay that settings of K and M get for this input (``sweep``, ``plot``,
    ``report``, ``compare``, ``replay``): ``dressage-loop`` for a run folder, which
    ``inspect`` itself describes as one log (docs/semantics.md §12.7)."""

    @property
    def steps(self) -> int:
        """The trainer steps: a run folder's own, else those its records carry."""
        return self.trainer_steps if self.run_trainer_steps is None else self.run_trainer_steps

    def to_dict(self) -> dict[str, Any]:
        return {
            "formats": list(self.formats),
            "sources": self.sources,
            "records": self.records,
            "groups": self.groups,
            "trajectories": self.trajectories,
            "segments": self.segments,
            "trainer_steps": self.steps,
            "eval_groups": self.eval_groups,
            "eval_records": self.eval_records,
            "attempt_groups": self.attempt_groups,
            "inferred_batch_groups": self.inferred_batch_groups,
            "run_batch_groups": self.run_batch_groups,
            "run_trainer_steps": self.run_trainer_steps,
            "converted_from": list(self.converted_from),
            "thrown_away": None
            if self.thrown_away is None
            else {**self.thrown_away.to_dict(), "setting": self.thrown_away_setting},
            "engine": self.settings_engine,
            "versions_observed": len(self.versions),
            "versions": list(self.versions),
            "quality": dict(self.quality),
            "warnings": list(self.warnings),
            "limits": list(self.limits),
        }


def inspect_log(
    table: pl.DataFrame, report: LoadReport | None = None, *, prepared: PreparedLog | None = None
) -> LogInspection:
    """Describe a loaded log: sizes, versions as Dressage would observe them, quality counts.

    ``prepared``: ``prepare(table)`` when already done (in arrival order: not with
    ``order_by``), so that a log of hundreds of thousands of groups is prepared once."""
    report = report or LoadReport()
    prepared = prepare(table) if prepared is None else prepared
    observed = prepared.observation(None).versions

    span_end = pl.col("version_spans").list.last().struct.field("end")
    quality = {
        "records_without_trajectory_id": table["trajectory_id"].null_count(),
        "records_without_real_end_version": table["end_version"].null_count(),
        "records_with_derived_end_version": int(table["end_version_derived"].sum() or 0),
        "records_without_token_versions": table["version_spans"].null_count(),
        "token_version_length_mismatches": table.filter(
            pl.col("token_count").is_not_null()
            & pl.col("version_spans").is_not_null()
            & (pl.coalesce(span_end, pl.lit(0)) != pl.col("token_count"))
        ).height,
        "records_without_response_tokens": table.filter(
            pl.col("response_length").is_null() & pl.col("loss_mask_length").is_null()
        ).height,
        "aborted_records": table.filter(pl.col("status") == "aborted").height,
        "duplicate_segment_records": table.filter(
            pl.col("trajectory_id").is_not_null()
            & pl.struct("group_id", "trajectory_id", "segment_index").is_duplicated()
        ).height,
        "numeric_labels_misordered_by_sorting": _misordered_numeric(observed),
        "records_skipped": sum(report.skipped.values()),
    }
    # Labels a sort would misorder are counted, not warned about: versions are ordered by
    # first observation, so nothing is wrong (a warning on every run of 11+ integer
    # versions read as a problem to a new user).
    warnings = list(report.warnings)
    sources = [*report.formats, *report.converted_from]  # a converted log: its source's
    evaluation = table.filter(pl.col("group_id").str.starts_with(EVAL_GROUP_PREFIX))
    return LogInspection(
        formats=tuple(report.formats),
        sources=report.files,
        records=table.height,
        groups=prepared.n_groups,
        trajectories=prepared.n_trajectories,
        segments=table.select("group_id", "trajectory_id", "segment_index").unique().height,
        trainer_steps=table["trainer_step"].drop_nulls().n_unique(),
        inferred_batch_groups=prepared.inferred_batch_groups,
        versions=observed,
        quality=quality,
        warnings=tuple(warnings),
        eval_groups=evaluation["group_id"].n_unique(),
        eval_records=evaluation.height,
        attempt_groups=table.filter(pl.col("group_id").str.contains(_ATTEMPT))[
            "group_id"
        ].n_unique(),
        limits=peer_limits(sources)
        + tuple(
            note
            for name in dict.fromkeys(sources)
            if name in BY_NAME
            for note in BY_NAME[name].table_notes(table)
        ),
        converted_from=tuple(report.converted_from),
    )


def _misordered_numeric(observed: tuple[str, ...]) -> int:
    """How many numeric-looking labels a string sort would put at another rank than observed."""
    numeric = [label for label in observed if _NUMERIC.fullmatch(label)]
    by_text = sorted(numeric)
    return sum(1 for seen, sorted_ in zip(numeric, by_text, strict=True) if seen != sorted_)
