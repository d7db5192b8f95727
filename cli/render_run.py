"""How the replay of a run folder (Dressage's own loop) is printed: its outcomes, the
generation the fully-async loop threw away, and ``verify``'s per-step checks."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich import box
from rich.console import Console
from rich.table import Table

from analysis import Decision, counted
from cli.render import OUTCOME_COLUMNS, outcome_cell, print_fitted, shown_number, thrown_away_words

if TYPE_CHECKING:  # only named in annotations: a replay need not import the run readers
    from analysis import LoopReplay


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
