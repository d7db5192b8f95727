"""How the replay of a run folder (Dressage's own loop) is printed: its outcomes, the
generation the fully-async loop threw away, ``verify``'s per-step checks, and
``simulate --like RUN_FOLDER``'s comparison of the run with its fitted model."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich import box
from rich.console import Console
from rich.table import Table

from analysis import Decision, counted, k_label, m_label
from cli.flags import flagged
from cli.render import OUTCOME_COLUMNS, outcome_cell, print_fitted, shown_number, thrown_away_words

if TYPE_CHECKING:  # only named in annotations: a replay need not import the run readers
    from analysis import LikeRun, LoopReplay


_LOOP_ROWS = (*OUTCOME_COLUMNS, (Decision.LEFTOVER.value, Decision.LEFTOVER.words))
_SURPLUS_ROW = (Decision.DISCARDED_SURPLUS.value, Decision.DISCARDED_SURPLUS.words)
_UNKNOWN_ROW = (Decision.UNKNOWN.value, Decision.UNKNOWN.words)


def print_run_summary(result: LoopReplay, console: Console) -> None:
    """Print the replay of a run folder (Dressage's own loop) as a table of outcomes by
    attempt and by trajectory, with the gap figures and how the replay fares against the
    run's own files."""
    figures = result.to_dict()
    counts = {"groups": figures["groups"], "trajectories": figures["trajectories"]}
    title = f"Dressage's {result.loop} loop: keep_versions={result.keep_versions}"
    headers = [("outcome", "left"), *((unit, "right") for unit in counts)]
    rows = [["total", *(outcome_cell(c["total"], None) for c in counts.values())]]
    # The fully-async loop throws away what a call polled and did not need (§12.4).
    shown = (*_LOOP_ROWS, _SURPLUS_ROW) if result.loop == "fully" else _LOOP_ROWS
    if any(c.get(Decision.UNKNOWN.value) for c in counts.values()):
        shown = (*shown, _UNKNOWN_ROW)  # only when the files leave some decision open
    for key, label in shown:
        rows.append([label, *(outcome_cell(c.get(key, 0), c["total"]) for c in counts.values())])
    print_fitted(console, title, headers, rows, keys=1)
    gap, checks = figures["version_gap"], figures["checks"]
    thrown = (
        [f"thrown away         {thrown_away_words(result.thrown_away())}"]
        if result.loop == "fully"
        else []
    )
    for line in (
        f"loop                {result.loop} ({result.loop_reason})",
        *thrown,
        f"batches emitted     {figures['batches']['emitted']}",
        f"versions observed   {figures['versions_observed']}",
        f"version gap, kept   min {shown_number(gap['min'])}  mean {shown_number(gap['mean'])}"
        f"  max {shown_number(gap['max'])}  (per trajectory)",
        f"retry limit         {result.max_retries_words}  ({result.max_retries_how})",
        f"agrees with the run's own files on {checks['agree']:,} of {checks['total']:,} checks",
        f"order-ambiguous     {counted(figures['order_ambiguous']['groups'], 'group')}, "
        f"{counted(figures['order_ambiguous']['trajectories'], 'trajectory', 'trajectories')}",
    ):
        console.print(line, highlight=False)
    if checks["agree"] != checks["total"]:
        console.print(
            f"warning: {checks['total'] - checks['agree']:,} of the replay's "
            f"{checks['total']:,} checks disagree with the run's files. Expected when "
            f"keep_versions={result.keep_versions} is not the run's own setting (a what-if, "
            "replayed on the attempts as they happened: retries and completion times would "
            "have differed); otherwise the replay differs from what Dressage did. "
            "`dressage-replay verify RUN` finds the run's own setting and shows where a replay "
            "at it disagrees.",
            highlight=False,
        )


def print_checks(result: LoopReplay, console: Console, *, all_rows: bool) -> None:
    """Per step, how many of the replay's checks agree with the run's own files; each
    disagreement (every check with ``all_rows``) with what the run says and the replay."""
    checks = result.checks
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, title="Per step", title_justify="left")
    for header, justify in (("step", "right"), ("checks", "right"), ("agree", "right")):
        table.add_column(header, justify=justify)  # type: ignore[arg-type]
    table.add_column("disagreements")
    for step in checks["step"].unique(maintain_order=True).to_list():
        # step null: a check over the whole run (a log without call lines, §12.4)
        rows = checks.filter(checks["step"].is_null() if step is None else checks["step"] == step)
        wrong = rows.filter(~rows["agrees"])["check"].to_list()
        table.add_row(
            "run" if step is None else str(step),
            str(rows.height),
            str(rows.height - len(wrong)),
            ", ".join(wrong) or "-",
        )
    console.print(table)
    shown = checks if all_rows else checks.filter(~checks["agrees"])
    if shown.height:
        detail = Table(box=box.SIMPLE_HEAD, pad_edge=False)
        for header in ("step", "check", "the run's files", "the replay", "agrees"):
            detail.add_column(header, overflow="fold")
        for step, check, expected, replayed, agrees in shown.iter_rows():
            detail.add_row(
                "run" if step is None else str(step),
                check,
                expected or "-",
                replayed or "-",
                "yes" if agrees else "NO",
            )
        console.print(detail)


def print_like(like: LikeRun, console: Console) -> None:
    """``simulate --like RUN_FOLDER``: the run's fitted model, then the run at its own
    setting beside the mean (and range) of the simulated draws."""
    model = like.model
    figures = like.to_dict()
    fitted = figures["fitted"]
    estimates = fitted["estimates"]
    in_flight = (
        "the attempts finishing after the final call returned"
        if model.loop == "partial"
        else "the 90% quantile of the attempts generating at once"
    )
    rows = [
        ["loop", model.loop, "the run's files"],
        ["groups per trainer step (B)", f"{model.batch_groups:,}", "the run's rollout calls"],
        ["trajectories per group", f"{model.samples_per_prompt:,}", "the run's rollout calls"],
        ["rollout calls", f"{model.calls:,}", "the run's trainer steps"],
        ["time per token (s)", _three(model.token_time), estimates.get("token_time", "")],
        ["groups in flight", f"{model.max_active_groups:,}", in_flight],
        ["weight update pause (s)", _three(model.update_pause), "median quiet time before an update"],
        ["trainer step (s, median)", _three(fitted["train_time_median"]), estimates.get("train_times", "")],
        ["retry limit", f"{model.max_retries:,}", "the run's retry lines (else Dressage's default)"],
        ["attempts replayed as they were", f"{len(model.workload):,}", "the run's attempts, by draw and retry"],
    ]  # fmt: skip
    print_fitted(
        console,
        f"Model of {like.path} (Dressage's {model.loop} loop)",
        [("parameter", "left"), ("value", "right"), ("from", "left")],
        rows,
        keys=1,
    )
    own = f"K={k_label(like.own_keep_versions)}, M={m_label(like.own_max_preempts)}"
    simulated = f"K={k_label(like.keep_versions)}, M={m_label(like.max_preempts)}"
    draws = len(like.runs)
    seeds = f"seed {like.seed}" if draws == 1 else f"seeds {like.seed}-{like.seed + draws - 1}"
    headers = [
        ("figure", "left"),
        (f"the run ({own})", "right"),
        (f"simulated ({simulated}, mean of {draws})", "right"),
        ("range", "right"),
        ("difference", "right"),
    ]
    table = []
    for values in figures["figures"].values():
        label = values["label"]
        low, high = values["simulated_low"], values["simulated_high"]
        table.append([
            label, _three(values["run"]), _three(values["simulated"]),
            "-" if low is None else f"{_three(low)}-{_three(high)}",
            "" if values["difference"] is None else f"{values['difference']:+.3g}",
        ])  # fmt: skip
    title = "The run at its own setting and the simulated runs"
    print_fitted(console, f"{title} ({seeds})", headers, table, keys=1)
    for note in like.notes:
        console.print(f"note: {flagged(note)}", soft_wrap=True, highlight=False, markup=False)


def _three(value: float | None) -> str:
    """A figure with three significant digits (a whole one as it is)."""
    if value is None:
        return "-"
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.3g}"
