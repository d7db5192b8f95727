"""Write every machine-readable output of the sample logs into one folder, for comparing two builds.

Run it before and after a change that should not alter behaviour, then compare the folders::

    python -m tests.tools.snapshot_outputs /tmp/before     # on the old build
    python -m tests.tools.snapshot_outputs /tmp/after      # on the new build
    diff -r /tmp/before /tmp/after                          # no output: identical

It covers ``replay --json``, ``replay --decisions`` (CSV and Parquet read back as CSV),
``sweep --json`` and ``sweep -o`` for every log in ``sample_data/`` and a spread of settings.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import polars as pl

SAMPLES = ("sample_data/rollouts.jsonl", "sample_data/artifacts", "sample_data/dumps")
SETTINGS = (("0", "none"), ("1", "0"), ("1", "2"), ("2", "1"), ("2", "none"), ("3", "2"))
SWEEPS = (("0..3", "none,0..2"), ("1,2", "1"))


def _run(args: list[str], out: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "cli", *args], capture_output=True, text=True, check=False
    )
    out.write_text(f"exit {done.returncode}\n--- stdout\n{done.stdout}--- stderr\n{done.stderr}")


def snapshot(folder: Path) -> None:
    """Write the outputs of every sample and setting into *folder*."""
    folder.mkdir(parents=True, exist_ok=True)
    for sample in SAMPLES:
        name = Path(sample).name.replace(".", "_")
        for k, m in SETTINGS:
            stem = f"{name}-k{k}-m{m}"
            decisions = folder / f"{stem}-decisions.parquet"
            _run(
                ["replay", sample, "-k", k, "-m", m, "--json", "--decisions", str(decisions)],
                folder / f"{stem}-replay.txt",
            )
            if decisions.exists():
                pl.read_parquet(decisions).write_csv(folder / f"{stem}-decisions.csv")
                decisions.unlink()
        for k, m in SWEEPS:
            stem = f"{name}-sweep-k{k}-m{m}"
            rows = folder / f"{stem}.csv"
            _run(["sweep", sample, "-k", k, "-m", m, "--json"], folder / f"{stem}-json.txt")
            _run(["sweep", sample, "-k", k, "-m", m, "-o", str(rows)], folder / f"{stem}-o.txt")


if __name__ == "__main__":
    snapshot(Path(sys.argv[1]))
