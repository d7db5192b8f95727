"""``dressage-replay replay``: one setting of both staleness controls."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

import analysis
from cli.flags import flagged, options_refused_as_usage
from cli.groups import (
    READ,
    RUN,
    ReadFlags,
    RunFlags,
    declared,
    reads_logs,
    takes_group,
    takes_run_settings,
)
from cli.options import (
    FLAG,
    BatchGroups,
    Force,
    Inputs,
    OrderBy,
    PolicyOption,
    one_keep_versions,
    one_max_preempts,
    the_policy,
)
from cli.output import (
    is_stdout,
    print_csv,
    print_json,
    progress_bar,
    refuse_existing,
    results_out,
    say_note,
    stdout_console,
    stdout_once,
    warn,
)

if TYPE_CHECKING:
    from rich.console import Console


@dataclass(frozen=True)
class TableOutputs:
    """replay's tables (one row per group or attempt, one per trajectory) and whether an
    existing one is replaced, given to the command as one value."""

    decisions: Path | None = None
    trajectories: Path | None = None
    force: bool = False
    given: frozenset[str] = frozenset()


_TABLES = {
    "decisions": Annotated[
        Path | None,
        typer.Option(
            help="Write one row per group to a file: .csv, .parquet, .json, .jsonl or .arrow; "
            "- writes CSV to standard output (in place of the summary)."
        ),
    ],
    "trajectories": Annotated[
        Path | None,
        typer.Option(
            help="Write one row per trajectory (trajectory_id, group_id, decision, stage, "
            "batch, version_gap, span) to a file: .csv, .parquet, .json, .jsonl or .arrow; - "
            "writes CSV to standard output."
        ),
    ],
    "force": Force,
}
TABLES = TableOutputs()


@reads_logs()
@takes_run_settings()
@takes_group("tables", TableOutputs, declared(TableOutputs, _TABLES))
def replay(
    inputs: Inputs,
    keep_versions: Annotated[
        int,
        typer.Option(
            "--keep-versions",
            "-k",
            help="K: keep groups from the K newest observed versions; 0 or off disables.",
            parser=one_keep_versions,
            metavar="<int|off>",
        ),
    ] = 0,
    max_preempts: Annotated[
        str,
        typer.Option(
            "--max-preempts",
            "-m",
            help="M: a trajectory may span at most M+1 versions; none or off disables.",
            metavar="<int|none>",
        ),
    ] = "none",
    batch_groups: BatchGroups = None,
    order_by: OrderBy = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the summary as one JSON object.", metavar=FLAG)
    ] = False,
    tables: TableOutputs = TABLES,
    bias: Annotated[
        bool,
        typer.Option(
            "--bias",
            help="Also compare kept, dropped and rejected groups (who gets dropped).",
            metavar=FLAG,
        ),
    ] = False,
    policy: PolicyOption = None,
    run: RunFlags = RUN,
    read: ReadFlags = READ,
) -> None:
    """Replay both staleness controls for one setting and summarise what they would do.

    A Dressage run folder (traj_payload/, traj_err/, rollout_data/, dressage_log.txt) is \
replayed as Dressage's own collector loop runs (docs: Tutorial: a real run folder); with --policy, \
its records are replayed on the simple loop, as sweep --policy does."""
    decisions, trajectories, force = tables.decisions, tables.trajectories, tables.force
    stdout_once(**{"--json": json_output, "--decisions": decisions, "--trajectories": trajectories})
    for output in (decisions, trajectories):  # before the log is read: a typo is told at once
        if output is not None and not is_stdout(output):
            analysis.check_output(output, analysis.FRAME_FORMATS, inputs=inputs)
    refuse_existing(decisions, trajectories, force=force)
    # the second would be written over the first
    if decisions and trajectories and decisions.resolve() == trajectories.resolve():
        raise analysis.OutputError(
            f"{trajectories}: --decisions and --trajectories name the same file; give each its own"
        )
    chosen = None
    if policy is not None:
        beside = [name for name in ("keep_versions", "max_preempts") if name in read.given]
        chosen = the_policy(policy, beside=beside)
    config = analysis.ReplayConfig(
        keep_versions=keep_versions,
        max_preempts=None if chosen is not None else one_max_preempts(max_preempts),
        batch_groups=batch_groups,
    )
    with options_refused_as_usage():
        replayed = analysis.replay(
            inputs, config, policy=chosen, options=read.options(order_by=order_by),
            order_by=order_by, bias=bias,
            progress=lambda doing: progress_bar(doing, quiet=read.quiet),
            note=say_note, max_retries=run.max_retries,
            loop=run.loop,  # type: ignore[arg-type]
        )  # fmt: skip
    files = [None if is_stdout(path) else path for path in (decisions, trajectories)]
    for path in replayed.write(decisions=files[0], trajectories=files[1]):
        typer.echo(f"wrote {path}", err=True)  # as every command that writes says
    with results_out():
        if is_stdout(decisions) or is_stdout(trajectories):  # the table is the output
            print_csv(
                replayed.decision_frame() if is_stdout(decisions) else replayed.trajectory_frame()
            )
        elif json_output:
            print_json(replayed.to_dict())
        else:
            print_replayed(replayed, stdout_console())
    if replayed.report is not None:
        warn(replayed.report, verbose=read.verbose)
    for warning in replayed.warnings if replayed.report is None else ():
        typer.echo(f"warning: {flagged(warning)}", err=True)


def print_replayed(replayed: analysis.Replayed, console: Console) -> None:
    """The rich summary of the engine that ran, and who gets dropped when asked."""
    from cli.render import print_bias, print_summary
    from cli.render_run import print_run_summary

    result = replayed.result
    if isinstance(result, analysis.LoopReplay):
        print_run_summary(result, console)
        return
    title = clock = None
    if isinstance(result, analysis.PolicyResult) and not isinstance(
        result.policy, analysis.DressagePolicy
    ):
        title = result.policy.label()
        clock = None if result.clock is None else result.clock.name
    print_summary(result.summary, console, policy=title, clock=clock)
    if replayed.bias is not None:
        print_bias(replayed.bias, console)
