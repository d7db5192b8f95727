"""``dressage-replay inspect``: what a log holds."""

from __future__ import annotations

from typing import Annotated

import typer

import analysis
from cli.options import (
    FLAG,
    BadRecordPolicy,
    FieldOption,
    IncludeEval,
    Inputs,
    LimitOption,
    OnBadRecord,
    Quiet,
    Traceback,
    TrustPickle,
    reading,
)  # fmt: skip
from cli.output import print_json, report_dict, results_out, stdout_console, warn


def inspect(
    inputs: Inputs,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the findings as one JSON object.", metavar=FLAG)
    ] = False,
    field: FieldOption = None,
    on_bad_record: OnBadRecord = BadRecordPolicy.fail,
    trust_pickle: TrustPickle = False,
    limit: LimitOption = None,
    include_eval: IncludeEval = False,
    quiet: Quiet = False,
    traceback_: Traceback = False,
) -> None:
    """Show what a log holds: format, counts, versions in observation order, data quality."""
    logs = reading(
        inputs, field=field, on_bad_record=on_bad_record, trust_pickle=trust_pickle, quiet=quiet,
        include_eval=include_eval, limit=limit,
    )  # fmt: skip
    table, report = logs.load()
    inspection = analysis.inspect_log(table, report)
    with results_out():
        if json_output:
            print_json({**inspection.to_dict(), **report_dict(report)})
        else:
            from cli.render import print_inspection

            print_inspection(inspection, stdout_console())
    warn(report)
