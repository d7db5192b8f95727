"""``dressage-replay convert``: logs to the canonical table."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

import analysis
from cli.options import (
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
from cli.output import progress_bar, warn


def convert(
    inputs: Inputs,
    output: Annotated[
        Path,
        typer.Option(
            "--output", "-o", help="Output file: .parquet (or .arrow) in the canonical layout."
        ),
    ],
    order_by: Annotated[
        str | None,
        typer.Option(
            help="Keep this field as a column, so that a replay of the output can order "
            "group arrival by it (--order-by); rows stay in input order."
        ),
    ] = None,
    field: FieldOption = None,
    on_bad_record: OnBadRecord = BadRecordPolicy.fail,
    trust_pickle: TrustPickle = False,
    limit: LimitOption = None,
    include_eval: IncludeEval = False,
    quiet: Quiet = False,
    traceback_: Traceback = False,
) -> None:
    """Write the canonical table (one row per record) so big logs load fast next time."""
    logs = reading(
        inputs, field=field, on_bad_record=on_bad_record, trust_pickle=trust_pickle,
        order_by=order_by, quiet=quiet, include_eval=include_eval, limit=limit,
    )  # fmt: skip
    report = analysis.LoadReport()
    with progress_bar("converting", quiet=quiet) as update:
        rows = analysis.convert_logs(inputs, output, logs.options, report=report, progress=update)
    typer.echo(f"wrote {rows:,} records to {output}", err=True)
    warn(report)
