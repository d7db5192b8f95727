"""Run a partitioned conversion's units as Ray tasks (``convert --ray``): on a cluster the
users' RL jobs already run on (slime, verl, AReaL and OpenRLHF are built on Ray), or on a
local Ray started for the purpose.

Ray is an optional extra (``pip install 'dressage-replay[ray]'``). Every node must have
this package installed and see the inputs and the output folder at the same paths (the
cluster's shared storage): a task reads its unit and writes its part where the driver
said. One task per unit, one CPU each.
"""

from __future__ import annotations

from typing import Any

from analysis.errors import ConfigError
from analysis.output.partitioned import Runner, Unit, UnitResult, convert_unit
from analysis.table.options import ReadOptions

LOCAL = "local"
RAY_LOCAL = LOCAL
"""``--ray local``: a Ray started here (the API's name for :data:`LOCAL`)."""
"""The address that starts a Ray of this machine's own (``num_cpus`` CPUs) for the run."""


def ray_module() -> Any:
    """The ``ray`` package, or a ConfigError that says how to install it."""
    try:
        import ray
    except ImportError:
        raise ConfigError(
            "Ray is not installed: install the extra (pip install 'dressage-replay[ray]'; "
            "from a clone, pip install -e '.[ray]'), or convert without Ray on this "
            "machine's cores"
        ) from None
    return ray


def run_ray(address: str = "auto", *, num_cpus: int | None = None) -> Runner:
    """A runner whose units are Ray tasks. ``address``: ``auto`` (the cluster this machine
    belongs to, as ``ray start`` left it), ``local`` (a Ray started here, with
    ``num_cpus``), or a cluster address (``ray://head:10001``, ``head:6379``). A Ray
    already initialised in this process is used as it is."""
    ray = ray_module()

    def run(units: list[Unit], options: ReadOptions, folder: str) -> list[UnitResult]:
        started = not ray.is_initialized()
        if started:
            settings: dict[str, Any] = {
                "include_dashboard": False, "log_to_driver": False, "configure_logging": False,
            }  # fmt: skip
            if address == LOCAL:
                settings["num_cpus"] = num_cpus
            else:
                settings["address"] = address
            try:
                ray.init(**settings)
            except ConnectionError as error:
                raise ConfigError(
                    f"cannot reach a Ray cluster at {address!r} ({error}); start one with "
                    "`ray start --head`, or give its address"
                ) from None
        try:
            # one CPU a task, and no second-core helper inside it (the tasks spread the work)
            task = ray.remote(num_cpus=1)(convert_unit).options(
                runtime_env={"env_vars": {"DRESSAGE_REPLAY_HELPERS": "0"}}
            )
            pending = [task.remote(unit, options, folder) for unit in units]
            results: list[UnitResult] = []
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                results += ray.get(done)
            return results
        finally:
            if started:
                ray.shutdown()

    run.__name__ = f"Ray tasks ({address})"
    return run
