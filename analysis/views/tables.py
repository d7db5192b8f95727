"""Result tables as rows of text, formatted once for the terminal and the HTML report alike
(the library decides what a table shows; the command line and the report only lay it out)."""

from __future__ import annotations

from typing import Any

import polars as pl

SWEEP_CAPTION = "Sweep (shares in %)"


def number(value: Any, digits: int = 1, *, none: str = "-") -> str:
    """A figure as every table prints it: whole numbers with thousands separators, others
    to ``digits`` decimals (with separators too), ``none`` for a missing one."""
    if value is None:
        return none
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def sweep_table(rows: pl.DataFrame) -> tuple[list[str], list[list[str]]]:
    """The sweep's headers and rows: Pareto star, K, M, shares in % to one decimal, the
    failed column only when the log has failed groups (then a row's group shares add up
    to 100: kept, stale, span-rejected, failed)."""
    failed = bool(rows.height) and bool(rows["failed_pct"].max())
    headers = [
        "", "K", "M", "groups kept", "samples kept", "tokens kept", "stale, arrival",
        "stale, pending", "span rejected", *(["groups failed"] if failed else []), "batches",
        "gap mean", "gap max", "span mean", "span max",
    ]  # fmt: skip
    body = [
        [
            "*" if row["pareto"] else "",
            str(row["keep_versions"]),
            "none" if row["max_preempts"] is None else str(row["max_preempts"]),
            number(row["groups_kept_pct"]),
            number(row["samples_kept_pct"]),
            number(row["tokens_kept_pct"]),
            number(row["dropped_arrival_pct"]),
            number(row["dropped_pending_pct"]),
            number(row["rejected_span_pct"]),
            *([number(row["failed_pct"])] if failed else []),
            number(row["batches_emitted"]),
            number(row["version_gap_mean"], 2),
            number(row["version_gap_max"]),
            number(row["version_span_mean"], 2),
            number(row["version_span_max"]),
        ]
        for row in rows.iter_rows(named=True)
    ]
    return headers, body


def policy_sweep_table(rows: pl.DataFrame) -> tuple[list[str], list[list[str]]]:
    """A sweep over policies (docs/semantics.md §13): the sweep's columns with the policy's
    spec in place of K and M, and the token-weighted gap and span means (§10.6) after them."""
    headers, body = sweep_table(rows.drop("policy"))
    headers = ["", "policy", *headers[3:], "tok. gap mean", "tok. span mean"]
    weighted = zip(
        rows["policy"].to_list(),
        rows["version_gap_mean_tokens"].to_list(),
        rows["version_span_mean_tokens"].to_list(),
        strict=True,
    )
    body = [
        [line[0], spec, *line[3:], number(gap, 2), number(span, 2)]
        for line, (spec, gap, span) in zip(body, weighted, strict=True)
    ]
    return headers, body
