"""``dressage-replay simulate``: write the log of a simulated async pipeline."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

import analysis
from cli.groups import declared, takes_group
from cli.options import (
    FLAG,
    INT,
    Force,
    LimitOption,
    Quiet,
    Traceback,
    choice_metavar,
    draws_number,
    number_option,
    one_keep_versions,
    one_max_preempts,
    one_of,
    run_limits,
    whole_option,
)
from cli.output import (
    is_stdout,
    print_json,
    print_jsonl,
    progress_bar,
    refuse_existing,
    replacing,
    results_out,
    stdout_once,
)


class LogFormatChoice(StrEnum):
    jsonl = "jsonl"
    parquet = "parquet"
    artifacts = "artifacts"
    pt = "pt"


# Options that name a SimulationConfig field: when given with --like, they win over the fit.
_CONFIG_NAMES = {
    "groups": "n_groups", "samples_per_prompt": "n_samples_per_prompt",
    "max_active_groups": "max_active_groups", "batch_groups": "batch_groups",
    "train_step_time": "train_step_time", "token_time": "token_time",
    "median_tokens": "median_response_tokens", "tail_sigma": "tail_sigma",
    "max_tokens": "max_response_tokens", "multi_turn_fraction": "multi_turn_fraction",
    "multi_segment_fraction": "multi_segment_fraction", "partial_rollout": "partial_rollout",
    "abort_fraction": "abort_fraction", "log_prob_drift": "log_prob_drift",
    "log_prob_noise": "log_prob_noise", "seed": "seed", "admission": "admission",
}  # fmt: skip


@dataclass(frozen=True)
class PipelineFlags:
    """simulate's pipeline options (SimulationConfig's fields as flags), declared once in
    :data:`_PIPELINE` and given to the command as this one value."""

    seed: int = 0
    groups: int = 64
    samples_per_prompt: int = 4
    max_active_groups: int = 16
    batch_groups: int = 4
    train_step_time: float = 20.0
    token_time: float = 0.01
    median_tokens: int = 300
    tail_sigma: float = 0.9
    max_tokens: int = 16_000
    multi_turn_fraction: float = 0.3
    multi_segment_fraction: float = 0.2
    partial_rollout: bool = True
    log_prob_drift: float = 0.0
    log_prob_noise: float = 0.02
    abort_fraction: float = 0.0
    admission: str | None = None
    given: frozenset[str] = frozenset()
    """The command's options that were given (the parser says so)."""

    def config(self) -> analysis.SimulationConfig:
        """The simulator's configuration these options give."""
        return analysis.SimulationConfig(
            **{field: getattr(self, name) for name, field in _CONFIG_NAMES.items()
               if name != "admission"},
            admission=(
                analysis.simulation_rule(self.admission, batch_groups=self.batch_groups)
                if self.admission else None
            ),
        )  # fmt: skip

    def given_fields(self, config: analysis.SimulationConfig) -> dict[str, object]:
        """What was given of ``config``, by field: with --like, these win over the fit."""
        return {
            field: getattr(config, field)
            for name, field in _CONFIG_NAMES.items()
            if name in self.given
        }


_PIPELINE = {
    "seed": Annotated[
        int,
        whole_option("Random seed: the same seed gives the same log."),
    ],
    "groups": Annotated[int, whole_option("GRPO prompt groups to generate.")],
    "samples_per_prompt": Annotated[int, whole_option("Trajectories per group.")],
    "max_active_groups": Annotated[int, whole_option("Groups in flight at once.")],
    "batch_groups": Annotated[int, whole_option("Groups per trainer step.")],
    "train_step_time": Annotated[
        float,
        number_option("Seconds per trainer step; each step publishes a version."),
    ],
    "token_time": Annotated[
        float,
        number_option("Seconds per generated token of one trajectory."),
    ],
    "median_tokens": Annotated[
        int,
        whole_option("Median response tokens per trajectory."),
    ],
    "tail_sigma": Annotated[
        float,
        number_option("Log-normal spread of response lengths (heavier tail when larger)."),
    ],
    "max_tokens": Annotated[int, whole_option("Longest response, in tokens.")],
    "multi_turn_fraction": Annotated[
        float,
        number_option("Fraction of multi-turn trajectories."),
    ],
    "multi_segment_fraction": Annotated[
        float,
        number_option("Fraction of multi-turn trajectories split into two segment records."),
    ],
    "partial_rollout": Annotated[
        bool,
        typer.Option(
            help="Resume interrupted generation under the new version (else restart).",
            metavar=FLAG,
        ),
    ],
    "log_prob_drift": Annotated[
        float,
        number_option(
            "Write rollout and trainer log-probs whose difference grows by this per version "
            "behind (0: none)."
        ),
    ],
    "log_prob_noise": Annotated[
        float,
        number_option("Spread of the log-prob difference at 0 versions behind."),
    ],
    "abort_fraction": Annotated[
        float,
        number_option("Fraction of groups with an aborted sample."),
    ],
    "admission": Annotated[
        str | None,
        typer.Option(
            "--admission",
            help="Hold groups back before they start, as another system does: "
            "areal:max_head_offpolicyness=N, skyrl:max_staleness_steps=N, "
            "nemo-gated:max_staleness_versions=N or verl-async:staleness_threshold=X (docs: Simulate a pipeline).",
            metavar="RULE:KNOB=VALUE",
            show_default=False,
        ),
    ],
}
"""simulate's pipeline options, in the order --help lists them."""


_RUN_MODEL_GIVEN = {
    "max_active_groups": "max_active_groups", "batch_groups": "batch_groups",
    "train_step_time": "train_step_time", "token_time": "token_time",
}  # fmt: skip
"""Pipeline options that, with --like RUN_FOLDER, replace a value of the run's model."""
_RUN_FOLDER_ONLY = {
    "keep_versions": "--keep-versions", "max_preempts": "--max-preempts", "draws": "--draws",
}  # fmt: skip
"""Options that only a run folder's model takes."""


@takes_group("pipeline", PipelineFlags, declared(PipelineFlags, _PIPELINE))
def simulate(
    output: Annotated[
        Path,
        typer.Option(
            "--output",
            "-o",
            help="Output file (jsonl, parquet) or folder (artifacts, pt); - writes JSONL to "
            "standard output.",
        ),
    ],
    log_format: Annotated[
        LogFormatChoice | None,
        typer.Option(
            "--format",
            help="What to write (default: from the extension, .jsonl[.gz] or .parquet; "
            "artifacts and pt write a new folder).",
            parser=one_of(LogFormatChoice),
            metavar=choice_metavar(LogFormatChoice),
        ),
    ] = None,
    pipeline: PipelineFlags = PipelineFlags(),
    like: Annotated[
        Path | None,
        typer.Option(
            "--like",
            help="Fit the pipeline to this run: a Dressage run folder is simulated on its "
            "own loop from the run's fitted model (at its own K and M unless -k/-m), a log "
            "by the generic simulator; print the fit beside the run's figures, then write "
            "the simulated run; options given win over the fit.",
            metavar="RUN",
            show_default=False,
        ),
    ] = None,
    keep_versions: Annotated[
        int | None,
        typer.Option(
            "--keep-versions",
            "-k",
            help="With --like RUN_FOLDER: K to simulate (default: the run's own, from its "
            "metrics); 0 or off disables.",
            parser=one_keep_versions,
            metavar="<int|off>",
            show_default=False,
        ),
    ] = None,
    max_preempts: Annotated[
        str | None,
        typer.Option(
            "--max-preempts",
            "-m",
            help="With --like RUN_FOLDER: M to simulate (default: the run's own, as its span "
            "rejections name it); none or off disables.",
            metavar="<int|none>",
            show_default=False,
        ),
    ] = None,
    draws: Annotated[
        int | None,
        typer.Option(
            "--draws",
            help="With --like RUN_FOLDER: simulated runs compared with the run (seeds from "
            "--seed on; default 5); the output holds the first.",
            parser=draws_number,
            metavar=INT,
            show_default=False,
        ),
    ] = None,
    json_output: Annotated[
        bool,
        typer.Option(
            "--json", help="With --like: print the comparison as one JSON object.", metavar=FLAG
        ),
    ] = False,
    force: Force = False,
    limit: LimitOption = None,
    quiet: Quiet = False,
    traceback_: Traceback = False,
) -> None:
    """Simulate an async rollout/training pipeline and write its log (see docs: Simulate a pipeline)."""
    chosen = _chosen_format(output, log_format)
    stdout_once(**{"--json": json_output, "--output": output})
    config = pipeline.config()  # a setting error before the output is looked at
    if not is_stdout(output):
        analysis.check_folder(output)  # before --like reads a run (issue 34)
    refuse_existing(output, force=force)  # a file as a folder: one rule
    run_folder = like is not None and analysis.is_run_folder(like)
    _refuse_options(pipeline.given, like=like, run_folder=run_folder)
    if like is not None and run_folder:
        _simulate_run_folder(
            like, output, chosen, pipeline=pipeline, limits=run_limits(limit), force=force,
            setting=(keep_versions, max_preempts), draws=draws, json_output=json_output,
        )  # fmt: skip
        return
    if like is not None:
        config = _fitted(
            like, pipeline.given_fields(config), run_limits(limit),
            stdout_taken=is_stdout(output), json_output=json_output,
        )  # fmt: skip
        if pipeline.admission:  # verl's R defaults to the fitted groups per step
            config = dataclasses.replace(
                config,
                admission=analysis.simulation_rule(
                    pipeline.admission, batch_groups=config.batch_groups
                ),
            )
        sys.stdout.flush()  # the fit's tables before the progress bar and the line on stderr
    with progress_bar("simulating", quiet=quiet) as update:
        records = analysis.simulate(config)
        if update is not None:
            records = groups_done(records, config.n_groups, update)
        count = _write(records, output, chosen, force=force)
    typer.echo(
        f"wrote {count:,} records ({config.n_groups:,} groups) to {_where(output)}", err=True
    )


def _chosen_format(output: Path, log_format: LogFormatChoice | None) -> str:
    """The format to write: standard output takes JSONL only."""
    if not is_stdout(output):
        return analysis.log_format_for(output, log_format.value if log_format else None)
    if log_format not in (None, LogFormatChoice("jsonl")):
        raise typer.BadParameter(
            "standard output (-o -) takes JSONL only; give a file or folder name for "
            + log_format.value,
            param_hint="--format",
        )
    return "jsonl"


def _refuse_options(given: frozenset[str], *, like: Path | None, run_folder: bool) -> None:
    """Usage errors (exit 2) of options that do not go together."""
    if "limit" in given and like is None:
        raise typer.BadParameter(
            "only read with --like: it bounds what reading that run may hold; leave it out, "
            "or give --like RUN",
            param_hint="--limit",
        )
    if "json_output" in given and like is None:
        raise typer.BadParameter(
            "only with --like: it prints the comparison with the run; leave it out, or give "
            "--like RUN",
            param_hint="--json",
        )
    for name, flag in _RUN_FOLDER_ONLY.items():
        if name in given and not run_folder:
            raise typer.BadParameter(
                "only with --like RUN_FOLDER (a Dressage run folder), whose fitted model "
                "simulates Dressage's loop at a setting; leave it out"
                + ("" if like is None else f" ({like} is not a run folder)"),
                param_hint=flag,
            )
    if run_folder:
        for name in _CONFIG_NAMES:
            if name in given and name != "seed" and name not in _RUN_MODEL_GIVEN:
                raise typer.BadParameter(
                    "does not apply to a Dressage run folder's model, which replays the "
                    "run's own workload and calls; leave it out (with --like RUN_FOLDER "
                    "only --seed, --max-active-groups, --batch-groups, --train-step-time "
                    "and --token-time are taken)",
                    param_hint="--" + name.replace("_", "-"),
                )


def _simulate_run_folder(
    like: Path, output: Path, chosen: str, *, pipeline: PipelineFlags, limits: analysis.Limits,
    force: bool, setting: tuple[int | None, str | None], draws: int | None, json_output: bool,
) -> None:  # fmt: skip
    """``simulate --like RUN_FOLDER``: the run's model at a setting beside the run, and
    the first draw's records written."""
    from cli.output import stderr_console, stdout_console
    from cli.render_run import print_like

    keep_versions, max_preempts = setting
    given = {
        field: float(getattr(pipeline, name))
        for name, field in _RUN_MODEL_GIVEN.items()
        if name in pipeline.given
    }
    like_run = analysis.like_run(
        like,
        keep_versions=keep_versions,
        max_preempts="own" if max_preempts is None else one_max_preempts(max_preempts),
        draws=5 if draws is None else draws,
        seed=pipeline.seed,
        limits=limits,
        given=given,
    )
    with results_out():
        if json_output:
            print_json(like_run.to_dict())
        else:
            print_like(like_run, stdout_console() if not is_stdout(output) else stderr_console())
    records = like_run.records()
    if chosen == "pt":  # a step's dump holds what it trained on
        records = (r for r in records if "dressage_return_rollout_id" in r["metadata"])
    count = _write(records, output, chosen, force=force)
    typer.echo(
        f"wrote {count:,} records (the first draw, seed {pipeline.seed}) to {_where(output)}",
        err=True,
    )


def _write(records: Iterable[dict[str, Any]], output: Path, chosen: str, *, force: bool) -> int:
    if is_stdout(output):
        return print_jsonl(records)
    with replacing(output, force=force):
        return analysis.write_log(records, output, chosen)


def _where(output: Path) -> str:
    return "standard output" if is_stdout(output) else str(output)


def _fitted(
    like: Path, given: dict[str, object], limits: analysis.Limits, *, stdout_taken: bool = False,
    json_output: bool = False,
) -> analysis.SimulationConfig:  # fmt: skip
    """Fit the simulator to ``like`` and print the fit (stdout, or stderr when the records
    go there; as JSON with ``json_output``); its configuration."""
    from cli.output import stderr_console, stdout_console
    from cli.render import print_fit

    fit = analysis.fit_run(like, given=given, limits=limits)
    if json_output:
        with results_out():
            print_json(fit.to_dict())
    else:
        print_fit(fit, like, stdout_console() if not stdout_taken else stderr_console())
    return fit.config


def groups_done(
    records: Iterable[dict[str, Any]], groups: int, update: Callable[[int, int], None]
) -> Iterator[dict[str, Any]]:
    """The records, telling ``update`` how many of the groups have been written (a group's
    records come together, in completion order), every 1,000 records and at the end."""
    done, last = 0, None
    for number, record in enumerate(records):
        if record.get("group_index") != last:
            last = record.get("group_index")
            done += 1
        if number % 1000 == 0:
            update(done - 1, groups)  # the current group is not written yet
        yield record
    update(done, groups)
