"""Regenerate sample_data/ from the simulator: one small run written in three formats.

Run as ``python sample_data/generate.py`` (``make sample-data``). Deterministic: the same
files every time (git does not keep the artifact files' modification times, but the files
carry their completion times, which the readers order them by). ``artifacts/`` is a
Dressage run folder: ``traj_payload/``, ``traj_err/`` and a ``dressage_log.txt``.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent))

from analysis.output.raw_artifacts import write_run_folder  # noqa: E402
from analysis.output.raw_logs import write_jsonl, write_pt_dumps  # noqa: E402
from analysis.simulation.parameters import SimulationConfig  # noqa: E402
from analysis.simulation.simulator import simulate  # noqa: E402

CONFIG = SimulationConfig(
    n_groups=40,
    n_samples_per_prompt=4,
    max_active_groups=12,
    batch_groups=4,
    train_step_time=2.0,
    token_time=0.01,
    median_response_tokens=100,
    tail_sigma=1.0,
    max_response_tokens=1600,
    prompt_tokens=24,
    multi_turn_fraction=0.3,
    multi_segment_fraction=0.3,
    partial_rollout=True,
    abort_fraction=0.05,
    seed=7,
)


def main() -> None:
    records = list(simulate(CONFIG))
    write_jsonl(records, ROOT / "rollouts.jsonl")
    for folder in ("artifacts", "dumps"):
        shutil.rmtree(ROOT / folder, ignore_errors=True)
    write_run_folder(records, ROOT / "artifacts")
    write_pt_dumps(records, ROOT / "dumps")
    print(f"wrote {len(records)} records to {ROOT}/rollouts.jsonl, artifacts/, dumps/")


if __name__ == "__main__":
    main()
