"""Shared fixtures: small simulated logs written in every supported format."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from analysis.output.raw_artifacts import write_artifacts
from analysis.output.raw_logs import write_jsonl, write_pt_dumps
from analysis.simulation.parameters import SimulationConfig
from analysis.simulation.simulator import simulate
from tests.real_runs import FIXTURES, extract_runs

SMALL_RUN = SimulationConfig(
    n_groups=36,
    n_samples_per_prompt=3,
    max_active_groups=10,
    batch_groups=3,
    train_step_time=1.5,
    median_response_tokens=60,
    max_response_tokens=600,
    prompt_tokens=8,
    tool_tokens=4,
    multi_turn_fraction=0.4,
    multi_segment_fraction=0.4,
    abort_fraction=0.05,
    seed=11,
)


@pytest.fixture(scope="session")
def small_records() -> list[dict[str, Any]]:
    return list(simulate(SMALL_RUN))


@pytest.fixture(scope="session")
def small_logs(
    tmp_path_factory: pytest.TempPathFactory, small_records: list[dict[str, Any]]
) -> dict[str, Path]:
    """The same simulated run as JSONL, gzipped JSONL, artifact folder and .pt dumps."""
    root = tmp_path_factory.mktemp("small_logs")
    write_jsonl(small_records, root / "run.jsonl")
    write_jsonl(small_records, root / "run.jsonl.gz")
    write_artifacts(small_records, root / "artifacts")
    write_pt_dumps(small_records, root / "dumps")
    return {
        "jsonl": root / "run.jsonl",
        "jsonl.gz": root / "run.jsonl.gz",
        "artifacts": root / "artifacts",
        "pt": root / "dumps",
    }


# Input generation and example run times are not what these tests are about, and on a
# loaded 2-core machine a first draw can take seconds: the too_slow health check and the
# deadline only made such runs fail. CI runs the property tests with a fixed seed, so a
# submission's result does not depend on luck; local runs keep drawing new examples (and
# hypothesis keeps the failures found).
settings.register_profile("project", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile(
    "ci", parent=settings.get_profile("project"), derandomize=True, print_blob=True
)
settings.load_profile("ci" if os.environ.get("CI") else "project")


@pytest.fixture(scope="session")
def run_folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return extract_runs(FIXTURES, tmp_path_factory.mktemp("real_runs"))


@pytest.fixture(scope="session")
def run_settings(run_folders: dict[str, Path]) -> dict[str, dict[str, Any]]:
    return {
        name: json.loads((folder / "run.json").read_text()) for name, folder in run_folders.items()
    }


@pytest.fixture(scope="session")
def truth(run_folders: dict[str, Path]) -> dict[str, list[dict[str, Any]]]:
    return {
        name: [json.loads(line) for line in (folder / "truth.jsonl").read_text().splitlines()]
        for name, folder in run_folders.items()
    }
