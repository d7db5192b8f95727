"""Every setting of a grid, or every policy, over one read of a log, on the engine that
fits: a Dressage run folder's grid on Dressage's own loop (one replay per K, as
:func:`analysis.replay` replays it), any other log's on the simple loop, policies on the
simple loop (docs/semantics.md §10.3, §12.7, §13.7). ``dressage-replay sweep`` is
:func:`sweep_log` and a renderer."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Literal, overload

from analysis.api import (
    Engine,
    LoadedLog,
    Progress,
    Source,
    load_log,
    log_formats,
    paths_of,
    picks_run_loop,
    read_run_folder,
)
from analysis.engine import PreparedLog, SweepResult, sweep as grid_sweep
from analysis.errors import ConfigError, setting
from analysis.formats.dressage.run import RunLog
from analysis.formats.load_report import LoadReport
from analysis.rules.policies import Policy, PolicySweep, sweep_policies
from analysis.rules.spec import parse_policy
from analysis.simulation.loop_policies import loop_policy_sweep
from analysis.simulation.predict import MODEL_DRAWS, WhatIf, run_sweep
from analysis.table.options import ReadOptions


@dataclass(frozen=True)
class Swept:
    """Every setting of a grid, or every policy, over one load of a log; a run folder's
    grid on Dressage's own loop (one replay per K)."""

    engine: Engine
    """:attr:`Engine.SIMPLE_LOOP` for a grid of K and M over a log, :attr:`Engine.RUN_LOOP`
    for a run folder's grid, :attr:`Engine.POLICY` for policies (on a run folder's own loop
    when ``run`` is set, else on the simple loop)."""
    result: SweepResult | PolicySweep
    log: LoadedLog | None
    """The log as read for the simple loop (None for a run folder on its own loop)."""
    run: RunLog | None = None
    """The run folder as read for its own loop (None on the simple loop)."""

    @property
    def report(self) -> LoadReport:
        """What reading warned of (a run folder's: nothing here; what reading and replaying
        it warned of are the sweep's ``notes``)."""
        if self.log is not None:
            return self.log.report
        return LoadReport()  # a run's warnings are the sweep's notes


def sweep_log(
    source: Source,
    *,
    keep_versions: Sequence[int] = (),
    max_preempts: Sequence[int | None] = (),
    policies: Sequence[Policy | str] = (),
    batch_groups: int | None = None,
    options: ReadOptions | None = None,
    order_by: str | None = None,
    progress: Progress | None = None,
    note: Callable[[str], None] | None = None,
    max_retries: int | None = None,
    loop: Literal["partial", "fully"] | None = None,
    what_if: WhatIf = "model",
    draws: int = MODEL_DRAWS,
    seed: int = 0,
) -> Swept:
    """Sweep a log: every policy when ``policies`` are given (one row each), else every
    (K, M) of the grid; read and prepared once (:func:`load_log`). A Dressage run folder's
    grid (no ``log_format``) is replayed on Dressage's own loop, as :func:`replay` replays
    it (:func:`analysis.engine.run_loop.sweep.sweep_run`): its row at the run's own setting
    equals ``replay(RUN, ReplayConfig(keep_versions=K))``, other rows come from the run's
    model unless ``what_if="replay"`` (docs/semantics.md §12.8); its policies run on that
    loop too (:func:`~analysis.simulation.loop_policies.loop_policy_sweep`, §12.9), or, with
    ``what_if="replay"`` or no model, on the simple loop over the folder read as one log. ``progress`` makes a
    bar for ``"reading"``, then ``"replaying settings"`` or ``"replaying policies"``."""
    if policies and (keep_versions or max_preempts):
        raise ConfigError(
            "give K and M inside each policy (dressage:k=K,m=M), not in "
            + setting("keep_versions")
            + " and "
            + setting("max_preempts")
        )
    bars: Progress = progress or (lambda _: nullcontext(None))
    options = options if options is not None else ReadOptions()
    inputs = paths_of(source)
    if policies and what_if == "model" and picks_run_loop(inputs, options):
        run = read_run_folder(inputs[0], options, batch_groups=batch_groups, order_by=order_by)
        chosen = [parse_policy(p) if isinstance(p, str) else p for p in policies]
        with bars("replaying policies") as update:
            try:
                return Swept(
                    Engine.POLICY,
                    loop_policy_sweep(
                        run,
                        chosen,
                        loop=loop,
                        max_retries=max_retries,
                        draws=draws,
                        seed=seed,
                        progress=update,
                    ),
                    None,
                    run,
                )
            except ConfigError as exc:  # no model: the folder read as one log, said so
                if note is not None:
                    note(f"no what-if model ({exc}): the policies run on the simple loop")
    if not policies and picks_run_loop(inputs, options):
        run = read_run_folder(inputs[0], options, batch_groups=batch_groups, order_by=order_by)
        with bars("replaying settings") as update:
            swept_run = run_sweep(
                run, keep_versions=keep_versions, max_preempts=max_preempts, loop=loop,
                max_retries=max_retries, progress=update, what_if=what_if, draws=draws,
                seed=seed,
            )  # fmt: skip
        return Swept(Engine.RUN_LOOP, swept_run, None, run)
    if loop is not None or max_retries is not None:
        raise ConfigError(
            setting("loop" if loop is not None else "max_retries")
            + " applies to a Dressage run folder replayed as its own loop; leave it out"
        )
    log = load_log(
        source, options=options, order_by=order_by, batch_groups=batch_groups,
        progress=bars, note=note,
    )  # fmt: skip
    if policies:
        chosen = [parse_policy(p) if isinstance(p, str) else p for p in policies]
        with bars("replaying policies") as update:
            swept: SweepResult | PolicySweep = sweep_policies(
                log.prepared,
                chosen,
                batch_groups=log.batch_groups,
                progress=update,
                formats=log_formats(log.report),
            )
        return Swept(Engine.POLICY, swept, log)
    with bars("replaying settings") as update:
        swept = grid_sweep(
            log.prepared,
            keep_versions=keep_versions,
            max_preempts=max_preempts,
            batch_groups=log.batch_groups,
            progress=update,
        )
    return Swept(Engine.SIMPLE_LOOP, swept, log)


@overload
def sweep(
    source: PreparedLog,
    *,
    keep_versions: Sequence[int],
    max_preempts: Sequence[int | None],
    batch_groups: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> SweepResult: ...


@overload
def sweep(
    source: Source,
    *,
    keep_versions: Sequence[int] = (),
    max_preempts: Sequence[int | None] = (),
    policies: Sequence[Policy | str] = (),
    batch_groups: int | None = None,
    options: ReadOptions | None = None,
    order_by: str | None = None,
    progress: Progress | None = None,
    note: Callable[[str], None] | None = None,
    max_retries: int | None = None,
    loop: Literal["partial", "fully"] | None = None,
) -> Swept: ...


def sweep(source: Source | PreparedLog, **settings: Any) -> SweepResult | Swept:
    """Sweep K and M: a prepared log on the simple loop, giving its :class:`SweepResult`;
    paths of logs or of a run folder through :func:`sweep_log`, which picks the engine (a
    run folder's own loop) and says which it ran (:class:`Swept`)."""
    if isinstance(source, PreparedLog):
        return grid_sweep(source, **settings)
    return sweep_log(source, **settings)
