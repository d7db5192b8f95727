"""Result tables as rows of text, formatted once for the terminal and the HTML report alike
(the library decides what a table shows; the command line and the report only lay it out)."""

from __future__ import annotations

from typing import Any

import polars as pl

SWEEP_CAPTION = "Sweep (shares in %)"

ENGINE_WORDS = {"simple-loop": "the simple loop", "dressage-loop": "Dressage's loop"}


def sweep_caption(rows: pl.DataFrame) -> str:
    """The sweep's caption, naming the replay that gave its rows: ``on the simple loop``
    (docs/semantics.md §3), or ``on Dressage's partial loop`` for a run folder (§12); for
    policies, the clock their peer rules ran on when it is one (§13.2; else a column says)."""
    engines = rows["engine"].unique().to_list() if "engine" in rows.columns else []
    if "loop" in rows.columns and rows.height and rows["loop"][0] is not None:
        return f"{SWEEP_CAPTION} on Dressage's {rows['loop'][0]} loop"
    words = " and ".join(ENGINE_WORDS.get(e, e) for e in sorted(engines)) or "the simple loop"
    clocks = _peer_clocks(rows)
    on_clock = f"; other systems' rules on clock={clocks[0]}" if len(clocks) == 1 else ""
    return f"{SWEEP_CAPTION} on {words}{on_clock}"


def _peer_clocks(rows: pl.DataFrame) -> list[str]:
    """The clocks the peer rules of a policy sweep ran on, each once (none for Dressage's)."""
    if "clock" not in rows.columns:
        return []
    return rows["clock"].drop_nulls().unique(maintain_order=True).to_list()


RUN_SWEEP_NOTE = (
    "own: the run's own setting, replayed (`replay RUN -k K`): what Dressage decided. Every "
    "other row is the run's loop simulated at that setting on a model fitted to the run "
    "(its attempts as they were, what it did not make drawn from it; the mean of the "
    "draws): 'kept range' is the groups kept over the draws, 'modelled' the share of "
    "decided attempts resting on drawn events; measured error: docs/semantics.md §12.8."
)
"""What a run folder's sweep table marks, said under it (its what-ifs from the model)."""
RUN_REPLAY_NOTE = (
    "own: the run's own setting (its replay is `replay RUN -k K`, checked against the run's "
    "files). At another K the replay uses only the attempts the run made: 'batches short' "
    "counts rollout calls it could not fill with them (a stricter K needs replacement "
    "attempts the run never made; 'groups short' in all), 'unneeded' the run's attempts it "
    "leaves over beyond the run's own leftovers (a looser K would not have made them). "
    "docs/semantics.md §12.7."
)
"""The same when its rows replay the run's attempts only (``--what-if replay``, or no model)."""


RUN_POLICY_NOTE = (
    "On the run's own loop: a Dressage policy at the run's own setting is its replay (what "
    "Dressage decided; 'modelled' 0); every other row is the run's loop simulated on a model "
    "fitted to the run, with that policy as its filter (another system's rule: no span "
    "control; a group it cancels in flight counts as stale on arrival); the mean of the "
    "draws, 'kept range' over them. docs/semantics.md §12.9."
)
STARVED_NOTE = (
    "{policies}: no attempt passed the rule in time for most steps (the loop starved: "
    "{short} of {steps} steps short of B in the first draw); not comparable, never starred."
)
"""What a run folder's policy table says under it (its rows on the run's own loop)."""


def run_policy_note(rows: pl.DataFrame) -> str | None:
    """:data:`RUN_POLICY_NOTE` when the policies ran on a run folder's own loop, and which
    of them starved it (steps short of B: :data:`STARVED_NOTE`)."""
    if "figures_from" not in rows.columns:
        return None
    starved = rows.filter(pl.col("unfilled_batches").fill_null(0) > 0)
    if not starved.height:
        return RUN_POLICY_NOTE
    first = starved.row(0, named=True)
    steps = first["batches_emitted"] + first["unfilled_batches"]
    said = STARVED_NOTE.format(
        policies=", ".join(starved["policy"]), short=first["unfilled_batches"], steps=steps
    )
    return RUN_POLICY_NOTE + " " + said


def run_sweep_note(rows: pl.DataFrame) -> str:
    """What a run folder's sweep table marks: :data:`RUN_SWEEP_NOTE` when a row comes from
    the model, else :data:`RUN_REPLAY_NOTE`."""
    modelled = "figures_from" in rows.columns and bool((rows["figures_from"] == "model").any())
    return RUN_SWEEP_NOTE if modelled else RUN_REPLAY_NOTE


def m_not_applied_note(rows: pl.DataFrame) -> str | None:
    """What a run folder's sweep says of its rows at another M than the run's, if any."""
    if "max_preempts_applied" not in rows.columns or rows["max_preempts_applied"].all():
        return None
    own = rows["max_preempts_replayed"][0]
    return (
        "n/a: M not applied. Dressage's loop replays the run's own span rejections "
        f"(M={'off or unknown' if own is None else own}, from traj_err/): such a row repeats "
        "that M's figures, and is never Pareto-efficient"
    )


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
    run = "own_setting" in rows.columns
    headers = [
        "", "K", "M", "groups kept", "samples kept", "tokens kept", "stale, arrival",
        "stale, pending", "span rejected", *(["groups failed"] if failed else []), "batches",
        "gap mean", "gap max", "span mean", "span max",
    ]  # fmt: skip
    extra, extra_headers = _run_columns(rows) if run else ([], [])
    body = [
        [
            "*" if row["pareto"] else "",
            str(row["keep_versions"]) + (" own" if run and row["own_setting"] else ""),
            ("none" if row["max_preempts"] is None else str(row["max_preempts"]))
            + (" n/a" if run and not row["max_preempts_applied"] else ""),
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
            *(shown(row) for shown in extra),
        ]
        for row in rows.iter_rows(named=True)
    ]
    return [*headers, *extra_headers], body


def _run_columns(
    rows: pl.DataFrame,
) -> tuple[list[Any], list[str]]:
    """A run folder's sweep: leftovers (and surplus, unknown where any), then how much a
    row rests on attempts the run did not make (docs/semantics.md §12.7)."""
    columns: list[tuple[str, Any]] = [("left over", lambda r: number(r["leftover_pct"]))]
    if rows["discarded_surplus_pct"].fill_null(0).max():
        columns.append(("surplus", lambda r: number(r["discarded_surplus_pct"])))
    if rows["unknown_pct"].fill_null(0).max():
        columns.append(("unknown", lambda r: number(r["unknown_pct"])))
    if "figures_from" in rows.columns and (rows["figures_from"] == "model").any():
        columns += [("kept range", _kept_range), ("modelled", lambda r: number(r["modelled_pct"]))]
    else:
        columns += [
            ("batches short", lambda r: number(r["unfilled_batches"])),
            ("groups short", lambda r: number(r["groups_short"])),
            ("unneeded", lambda r: number(r["unneeded_attempts"])),
        ]
    return [shown for _, shown in columns], [name for name, _ in columns]


def _kept_range(row: dict[str, Any]) -> str:
    low, high = row["groups_kept_low"], row["groups_kept_high"]
    return "-" if low is None or high is None else f"{number(low)}-{number(high)}"


def policy_sweep_table(rows: pl.DataFrame) -> tuple[list[str], list[list[str]]]:
    """A sweep over policies (docs/semantics.md §13): the sweep's columns with the policy's
    spec in place of K and M (and the clock each ran on when the peer rules ran on more
    than one, §13.2; ``-`` for Dressage's), and the token-weighted gap and span means
    (§10.6) after them."""
    headers, body = sweep_table(rows.drop("policy", "clock"))
    # One clock is said in the caption (sweep_caption); several, in a column.
    shown = len(_peer_clocks(rows)) > 1
    headers = [
        "", "policy", *(["clock"] if shown else []), *headers[3:], "tok. gap mean",
        "tok. span mean",
    ]  # fmt: skip
    weighted = zip(
        rows["policy"].to_list(),
        rows["clock"].to_list(),
        rows["version_gap_mean_tokens"].to_list(),
        rows["version_span_mean_tokens"].to_list(),
        strict=True,
    )
    body = [
        [line[0], spec, *([clock or "-"] if shown else []), *line[3:], *_token_means(gap, span)]
        for line, (spec, clock, gap, span) in zip(body, weighted, strict=True)
    ]
    return headers, body


def _token_means(gap: float | None, span: float | None) -> list[str]:
    """The token-weighted gap and span means of a policy row, to two decimals."""
    return [number(gap, 2), number(span, 2)]
