"""``dressage-replay inspect``: what a log holds."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated

import typer

import analysis
from cli.groups import READ, ReadFlags, reads_logs
from cli.options import (
    FLAG,
    Inputs,
)  # fmt: skip
from cli.output import print_json, report_dict, results_out, stdout_console, warn


@reads_logs(placed={"admission": "log_format"})
def inspect(
    inputs: Inputs,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the findings as one JSON object.", metavar=FLAG)
    ] = False,
    read: ReadFlags = READ,
    admission: Annotated[
        list[str] | None,
        typer.Option(
            "--admission",
            help="Also say which groups would have broken another system's admission bound, "
            "and by how much (repeatable): areal:eta=N, skyrl:max_staleness_steps=N, "
            "nemo-gated:max_staleness_versions=N, verl-async:staleness_threshold=X,"
            "required_samples=R[,trigger_parameter_sync_step=T]; any of them takes "
            "step_offset=N (a step trains version step - N; default 1 for prime-rl, else 0).",
            metavar="RULE",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Show what a log holds: format, counts, versions in observation order, data quality;
    for another system's log (prime-rl, AReaL, verl, NeMo-RL), what it can and cannot tell."""
    logs = read.reading(inputs)
    rules = _admission_rules(admission or [])
    table, report = logs.load()
    # What another system's log cannot tell is listed by inspect itself, not warned about.
    said = set(analysis.peer_warnings([*report.formats, *report.converted_from]))
    report.warnings = [warning for warning in report.warnings if warning not in said]
    inspection = analysis.inspect_log(table, report)
    run_folder = analysis.picks_run_loop(inputs, logs.options)
    if run_folder:  # its batch size is in its dressage_log.txt, not in its records
        inspection = with_run_facts(inspection, inputs[0], logs.options.limits)
    bounds = [
        analysis.admission_violations(
            table, rule, formats=(*report.formats, *report.converted_from)
        )
        for rule in rules
    ]
    with results_out():
        if json_output:
            found = {**inspection.to_dict(), **report_dict(report)}
            if bounds:
                found["admission"] = [bound.to_dict() for bound in bounds]
            print_json(found)
        else:
            from cli.render import print_admission, print_inspection

            print_inspection(inspection, stdout_console())
            if bounds:
                print_admission(
                    bounds, stdout_console(), unchecked=_unchecked(inspection, run_folder)
                )
    warn(report, verbose=read.verbose)


def with_run_facts(
    inspection: analysis.LogInspection, folder: Path, limits: analysis.Limits
) -> analysis.LogInspection:
    """``inspection`` with what only a run folder's own loop tells, from one read of the
    run: its batch size and the generation a fully-async loop threw away (docs/semantics.md
    §12.4). A run its loop cannot be replayed on (a file the reader refuses, which
    ``--on-bad-record skip`` passed over) is said in a warning, not fatal; its batch size
    is then read from its log alone."""
    try:
        run = analysis.read_run(folder, limits=limits)
        thrown = analysis.run_thrown_away(run)
    except analysis.ReplayError as error:
        # the batch size from the log alone (a log past a limit is refused there, as every
        # command reading the run refuses it); then the warning
        target = analysis.run_target_groups(folder, limits)
        typer.echo(f"warning: the generation thrown away is not counted: {error}", err=True)
        return dataclasses.replace(
            inspection, run_batch_groups=target, settings_engine="dressage-loop"
        )
    inspection = dataclasses.replace(
        inspection,
        run_batch_groups=run.target_groups,
        run_trainer_steps=run.trainer_steps,
        settings_engine="dressage-loop",
    )
    if thrown is None:  # the partial loop puts its surplus back
        return inspection
    return dataclasses.replace(
        inspection, thrown_away=thrown.thrown, thrown_away_setting=thrown.setting
    )


def _admission_rules(specs: list[str]) -> list[analysis.AdmissionRule]:
    """The --admission rules; one that does not parse is an invalid setting (exit 7), as
    for --policy and simulate --admission."""
    return [analysis.parse_admission(spec) for spec in specs]


def _unchecked(inspection: analysis.LogInspection, run_folder: bool) -> str | None:
    """Why an admission rule checked no group, in the terms of this input."""
    if run_folder:
        return (
            "not checked: a Dressage run folder's trajectory records carry no trainer step "
            "(which step trained a group is in its rollout_data/ dumps, not joined to them), so "
            "no group's lag can be measured; `verify` checks the run against its own files"
        )
    if inspection.limits:
        return (
            "no group has both a start version and a trainer step, so none could be checked "
            "(see what this log can and cannot tell, above)"
        )
    return None
