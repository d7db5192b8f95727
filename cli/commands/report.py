"""``dressage-replay report``: one self-contained HTML report."""

from __future__ import annotations

import functools
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer

import analysis
from cli.commands.inspect import with_run_facts
from cli.flags import say_setting
from cli.groups import GRID, READ, GridFlags, ReadFlags, sweeps_logs
from cli.options import (
    BadRecordPolicy,
    Force,
    Inputs,
    policies_option,
    some_policies,
)  # fmt: skip
from cli.output import progress_bar, refuse_existing, say_note, warn


@sweeps_logs()
def report(
    inputs: Inputs,
    output: Annotated[Path, typer.Option("--output", "-o", help="The .html file to write.")],
    force: Force = False,
    grid: GridFlags = GRID,
    policy: Annotated[
        list[str] | None,
        policies_option(
            "Also compare these policies (repeat it), in a section of their own "
            "(docs/semantics.md §13)."
        ),
    ] = None,
    read: ReadFlags = READ,
) -> None:
    """Write one self-contained HTML report: the log, the sweep, the plots, who gets dropped."""
    order_by = grid.order_by
    policies = some_policies(policy or [])
    analysis.check_output(output, analysis.REPORT_FORMATS, what="report", inputs=inputs)
    refuse_existing(output, force=force)
    options = read.options(order_by=order_by)
    ks, ms = grid.parse_for(inputs, options)
    run = (  # a run folder's settings are replayed on its own loop (docs/semantics.md §12.7)
        analysis.read_run_folder(
            inputs[0], options, batch_groups=grid.batch_groups, order_by=order_by
        )
        if analysis.picks_run_loop(inputs, options)
        else None
    )
    log = analysis.load_log(
        inputs, options=options, order_by=order_by, batch_groups=grid.batch_groups, whole_table=True,
        progress=functools.partial(progress_bar, quiet=read.quiet), note=say_note,
    )  # fmt: skip
    table, prepared, loaded, batch_groups = log.table, log.prepared, log.report, log.batch_groups
    if run is not None and (not policies or grid.what_if == "model"):
        # Every setting (and policy) runs on the run's own loop: only the log's facts read
        # the folder as one log, so the warning that it is read on the simple loop would
        # mislead.
        said = str(analysis.run_folder_read_as_log(inputs[0]))
        loaded.warnings[:] = [warning for warning in loaded.warnings if str(warning) != said]
    command = _reproduce(inputs, output, grid, batch_groups, read, own_loop=run is not None)
    command += "".join(f" --policy {shlex.quote(p.label())}" for p in policies)
    # Prepared as inspect prepares it (arrival order) unless --order-by: reused.
    same_order = order_by is None
    inspection = analysis.inspect_log(table, loaded, prepared=prepared if same_order else None)
    if run is not None:  # its own batch size and what its loop threw away
        inspection = with_run_facts(inspection, inputs[0], options.limits)
    with progress_bar("replaying settings", quiet=read.quiet) as update:
        document = analysis.build_report(
            prepared, table, inspection,
            keep_versions=ks, max_preempts=ms, batch_groups=batch_groups, progress=update,
            say=say_setting, inputs=inputs, command=command, policies=policies, run=run,
            **grid.model(run is not None),
        )  # fmt: skip
    analysis.write_report(document, output, inputs=inputs)
    typer.echo(f"wrote {output}", err=True)
    warn(loaded, verbose=read.verbose)


def _reproduce(
    inputs: Sequence[Path],
    output: Path,
    grid: GridFlags,
    batch_groups: int | None,
    read: ReadFlags,
    *,
    own_loop: bool = False,
) -> str:
    """The command line that writes this report again: the grid always (a later default
    may differ; a run folder on its own loop: -m only when given, its own M else, and no
    -b), other options only when given; --quiet and --traceback change no figure."""
    words = [
        "dressage-replay", "report", *map(str, inputs), "-o", str(output),
        "-k", grid.keep_versions,
        *(["-m", grid.max_preempts] if "max_preempts" in grid.given or not own_loop else []),
        *(["-b", str(batch_groups)] if batch_groups is not None and not own_loop else []),
        *(["--order-by", grid.order_by] if grid.order_by is not None else []),
        *(word for field in read.field or () for word in ("--field", field)),
        *(["--on-bad-record", read.on_bad_record.value]
          if read.on_bad_record is not BadRecordPolicy.fail else []),
        *(["--trust-pickle"] if read.trust_pickle else []),
        *(["--eval"] if read.include_eval else []),
        *(["--format", read.log_format] if read.log_format is not None else []),
    ]  # fmt: skip
    return shlex.join(words)
