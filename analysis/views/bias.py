"""Who gets dropped: kept vs dropped vs rejected groups compared, for one setting.

Staleness control drops the groups that took longest; if those are also the longest or
hardest trajectories, the trainer sees a biased sample. These figures show it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from analysis.engine import (
    PreparedLog,
    ReplayResult,
    real_token_labels,
)
from analysis.engine.batching import NO_VERSION
from analysis.engine.decisions import DECISIONS, Decision

OUTCOMES = DECISIONS
OUTCOME_WORDS = {decision: Decision(decision).words for decision in DECISIONS}
"""The bias table's outcomes in the words the summary prints (``cli/render.py``'s
``_COLUMNS``), in the terminal and the report alike; its one stale row counts both of
the summary's stale rows. JSON keeps the decisions' names."""


@dataclass(frozen=True)
class BiasReport:
    """Per-outcome profile of groups (``table``) and the groups that never reached a batch."""

    table: pl.DataFrame
    never_batched: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"by_outcome": self.table.to_dicts(), "never_batched": list(self.never_batched)}


def arrival_delays(prepared: PreparedLog, table: pl.DataFrame) -> pl.DataFrame:
    """Versions published while each group was generating: current index at its arrival
    minus the index of its oldest token version (or trajectory version when it has none).

    Versions are observed as with both controls off, so every group is measured on the
    same scale whatever the setting. A token version counts once it has been observed
    (as some group's trajectory version) by the time the group arrives.

    Worked out on arrays, a group at a time never (a log of a version per group has
    hundreds of thousands): the stalest trajectory version of each group is the
    observation's, and each token label joins the observed versions' indexes.
    """
    observation = prepared.observation(None)
    known = observation.count_after  # versions observed once each group has arrived
    stalest = observation.min_index.copy()
    own = (
        real_token_labels(table, by="group_id")
        .join(
            prepared.groups.select("group_id").with_row_index("position"),
            on="group_id",
            how="inner",
        )
        .join(
            pl.DataFrame(
                {"label": list(observation.versions), "index": range(len(observation.versions))},
                schema={"label": pl.String, "index": pl.Int64},
            ),
            on="label",
            how="inner",
        )
    )
    position = own["position"].to_numpy().astype(np.int64)
    index = own["index"].to_numpy()
    seen = index < known[position]  # observed by the time its group arrived
    np.minimum.at(stalest, position[seen], index[seen])
    delays = pl.Series(known - 1 - stalest, dtype=pl.Int64)
    return prepared.groups.select("group_id").with_columns(
        arrival_delay=delays.set(pl.Series(stalest == NO_VERSION), None)
    )


def who_gets_dropped(
    prepared: PreparedLog, result: ReplayResult, *, table: pl.DataFrame
) -> BiasReport:
    """Compare groups by outcome on length, segments, reward and arrival delay.

    ``table`` is the loaded log (for rewards); ``prepared`` and ``result`` come from it.
    """
    # From the per-group and per-trajectory arrays: over 300,000 groups, the frames of
    # every decision and trajectory outcome took hundreds of MB of a report.
    facts = prepared.per_trajectory
    trajectories = pl.DataFrame(
        {
            "decision": result.decision_names(per="trajectory"),
            "tokens": pl.Series(facts.tokens).set(pl.Series(facts.tokens_missing), None),
            "records": facts.records,
        }
    )
    per_group_reward = table.group_by("group_id").agg(reward=pl.col("reward").mean())
    decided = prepared.groups.select("group_id").with_columns(result.decision_names())
    groups = decided.join(per_group_reward, on="group_id", how="left").join(
        arrival_delays(prepared, table), on="group_id", how="left"
    )
    by_trajectory = trajectories.group_by("decision").agg(
        trajectories=pl.len(),
        tokens_per_trajectory_mean=pl.col("tokens").mean(),
        tokens_per_trajectory_median=pl.col("tokens").median(),
        segments_per_trajectory_mean=pl.col("records").mean(),
    )
    by_group = groups.group_by("decision").agg(
        groups=pl.len(),
        reward_mean=pl.col("reward").mean(),
        arrival_delay_mean=pl.col("arrival_delay").mean(),
    )
    outcomes = pl.DataFrame({"decision": list(OUTCOMES)})
    report = (
        outcomes.join(by_group, on="decision", how="left", maintain_order="left")
        .join(by_trajectory, on="decision", how="left", maintain_order="left")
        .with_columns(pl.col("groups", "trajectories").fill_null(0).cast(pl.Int64))
        .rename({"decision": "outcome"})
    )
    never = decided.filter(pl.col("decision") != Decision.KEPT)["group_id"].to_list()
    return BiasReport(table=report, never_batched=tuple(never))
