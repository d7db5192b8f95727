"""``dressage-replay report``: one self-contained HTML report."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

import analysis
from cli.flags import say_setting
from cli.options import (
    BadRecordPolicy,
    BatchGroups,
    FieldOption,
    IncludeEval,
    Inputs,
    KeepVersionsList,
    MaxPreemptsList,
    OnBadRecord,
    OrderBy,
    Quiet,
    Traceback,
    TrustPickle,
    parse_grid,
    reading,
)  # fmt: skip
from cli.output import progress_bar, warn


def report(
    inputs: Inputs,
    output: Annotated[Path, typer.Option("--output", "-o", help="The .html file to write.")],
    keep_versions: KeepVersionsList = "0..4",
    max_preempts: MaxPreemptsList = "none,0..3",
    batch_groups: BatchGroups = None,
    order_by: OrderBy = None,
    field: FieldOption = None,
    on_bad_record: OnBadRecord = BadRecordPolicy.fail,
    trust_pickle: TrustPickle = False,
    include_eval: IncludeEval = False,
    quiet: Quiet = False,
    traceback_: Traceback = False,
) -> None:
    """Write one self-contained HTML report: the log, the sweep, the plots, who gets dropped."""
    from analysis.views.report import REPORT_FORMATS, build_report, write_report

    ks, ms = parse_grid(keep_versions, max_preempts)
    analysis.check_output(output, REPORT_FORMATS, what="report", inputs=inputs)
    logs = reading(
        inputs, field=field, on_bad_record=on_bad_record, trust_pickle=trust_pickle,
        order_by=order_by, quiet=quiet, include_eval=include_eval,
    )  # fmt: skip
    table, prepared, loaded = logs.prepare(whole_table=True)
    with progress_bar("replaying settings", quiet=quiet) as update:
        document = build_report(
            prepared, table, analysis.inspect_log(table, loaded),
            keep_versions=ks, max_preempts=ms, batch_groups=batch_groups, progress=update,
            say=say_setting,
        )  # fmt: skip
    write_report(document, output, inputs=inputs)
    typer.echo(f"wrote {output}", err=True)
    warn(loaded)
