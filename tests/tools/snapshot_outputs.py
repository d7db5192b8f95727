"""Write every output of the sample logs and the test fixtures into one folder, for comparing two builds.

Run it before and after a change that should not alter behaviour, then compare the folders::

    python -m tests.tools.snapshot_outputs /tmp/before     # on the old build
    python -m tests.tools.snapshot_outputs /tmp/after      # on the new build
    diff -r /tmp/before /tmp/after                          # no output: identical

It covers, for every log in ``sample_data/``: ``replay --json`` and ``--decisions`` (CSV and
Parquet read back as CSV) over a spread of settings, ``sweep --json`` and ``sweep -o``,
``inspect``, ``convert`` (read back as CSV), ``plot`` (the figure's bytes) and ``report``;
for the real-run fixtures: ``replay RUN`` with ``--trajectories``, ``verify``, ``inspect``,
``sweep`` and ``--policy``; for the peer-log fixtures: ``inspect``, ``replay`` and policies;
``compare`` and ``simulate`` once each. Paths are written relative, so two checkouts compare.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import polars as pl

_UNSTABLE = (
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?"), "<time>"),  # a figure's date
    (re.compile(r"\b([pm]|image|C\d+_\d+_)[0-9a-f]{10}\b"), "<id>"),  # matplotlib's random ids
)


def _steady(path: Path, scrub: str) -> None:
    """Leave out what differs between two runs of the same build: times, random ids, the
    snapshot folder's own path."""
    text = path.read_text()
    for pattern, stand_in in _UNSTABLE:
        text = pattern.sub(stand_in, text)
    path.write_text(text.replace(scrub, "<tmp>"))


SAMPLES = ("sample_data/rollouts.jsonl", "sample_data/artifacts", "sample_data/dumps")
SETTINGS = (("0", "none"), ("1", "0"), ("1", "2"), ("2", "1"), ("2", "none"), ("3", "2"))
SWEEPS = (("0..3", "none,0..2"), ("1,2", "1"))
RUNS = ("k1-mnone", "k2-m1", "k3-m2-n8")
PEERS = ("prime", "areal", "verl", "nemo")
POLICIES = (
    "dressage:k=2,m=1",
    "prime-rl:max_off_policy_steps=1",
    "prime-rl:max_off_policy_steps=1,clock=steps",
    "verl-drop:max_off_policy_threshold=2",
    "nemo-windowed:max_staleness_versions=1",
)


def _run(args: list[str], out: Path, *, cwd: Path | None = None, scrub: str = "") -> None:
    done = subprocess.run(
        [sys.executable, "-m", "cli", *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
    )
    text = f"exit {done.returncode}\n--- stdout\n{done.stdout}--- stderr\n{done.stderr}"
    out.write_text(text.replace(scrub, "<tmp>") if scrub else text)


def _as_csv(path: Path, target: Path) -> None:
    """A written table, as CSV (its bytes may differ by writer; its rows must not)."""
    if path.is_file() and path.suffix == ".parquet":
        frame = pl.read_parquet(path)
        if any(dtype.is_nested() for dtype in frame.dtypes):
            frame.write_ndjson(target)  # CSV has no lists
        else:
            frame.write_csv(target)
        path.unlink()
    elif path.is_file():
        shutil.move(path, target)
    if target.is_file():
        _steady(target, str(path.parent))


def _samples(folder: Path) -> None:
    for sample in SAMPLES:
        name = Path(sample).name.replace(".", "_")
        for k, m in SETTINGS:
            stem = f"{name}-k{k}-m{m}"
            decisions = folder / f"{stem}-decisions.parquet"
            _run(
                ["replay", sample, "-k", k, "-m", m, "--json", "--decisions", str(decisions)],
                folder / f"{stem}-replay.txt",
                scrub=str(folder),
            )
            _as_csv(decisions, folder / f"{stem}-decisions.csv")
            _run(["replay", sample, "-k", k, "-m", m], folder / f"{stem}-replay-table.txt")
        for k, m in SWEEPS:
            stem = f"{name}-sweep-k{k}-m{m}"
            rows = folder / f"{stem}.csv"
            _run(["sweep", sample, "-k", k, "-m", m, "--json"], folder / f"{stem}-json.txt")
            _run(
                ["sweep", sample, "-k", k, "-m", m, "-o", str(rows)],
                folder / f"{stem}-o.txt",
                scrub=str(folder),
            )
        _run(["inspect", sample], folder / f"{name}-inspect.txt")
        _run(["inspect", sample, "--json"], folder / f"{name}-inspect-json.txt")
        table = folder / f"{name}-convert.parquet"
        _run(
            ["convert", sample, "-o", str(table)], folder / f"{name}-convert.txt", scrub=str(folder)
        )
        _as_csv(table, folder / f"{name}-convert.csv")
        _run(["replay", sample, "-k", "1", "--bias", "--json"], folder / f"{name}-bias.txt")
        for kind in ("sweep", "spans", "gaps", "timeline", "heatmap"):
            png = folder / f"{name}-plot-{kind}.svg"
            _run(
                ["plot", kind, sample, "-k", "0..3", "-m", "none,0..2", "-o", str(png)],
                folder / f"{name}-plot-{kind}.txt",
                scrub=str(folder),
            )
            if png.is_file():
                _steady(png, str(folder))
        _run(
            ["report", sample, "-o", str(folder / f"{name}-report.html")],
            folder / f"{name}-report.txt",
            scrub=str(folder),
        )
        _steady(folder / f"{name}-report.html", str(folder))
    _run(
        ["compare", "sample_data/rollouts.jsonl", "sample_data/dumps", "--json"],
        folder / "compare.txt",
    )
    sim = folder / "simulate.parquet"
    _run(
        ["simulate", "--seed", "7", "--groups", "24", "-o", str(sim)],
        folder / "simulate.txt",
        scrub=str(folder),
    )
    _as_csv(sim, folder / "simulate.csv")


def _fixtures(folder: Path, here: Path) -> None:
    root = here / "tests" / "fixtures"
    with tempfile.TemporaryDirectory() as raw:
        unpacked = Path(raw)
        for run in RUNS:
            with tarfile.open(root / "real_runs" / f"{run}.tar.xz") as archive:
                archive.extractall(unpacked, filter="data")
        with tarfile.open(root / "peer-logs.tar.xz") as archive:
            archive.extractall(unpacked, filter="data")
        for run in RUNS:
            trajectories = folder / f"run-{run}-trajectories.csv"
            _run(
                ["replay", run, "--json", "--trajectories", str(trajectories)],
                folder / f"run-{run}-replay.txt",
                cwd=unpacked,
                scrub=str(folder),
            )
            _run(["replay", run], folder / f"run-{run}-replay-table.txt", cwd=unpacked)
            _run(["replay", run, "-k", "1"], folder / f"run-{run}-replay-k1.txt", cwd=unpacked)
            _run(["verify", run], folder / f"run-{run}-verify.txt", cwd=unpacked)
            _run(["verify", run, "--json"], folder / f"run-{run}-verify-json.txt", cwd=unpacked)
            _run(["inspect", run], folder / f"run-{run}-inspect.txt", cwd=unpacked)
            _run(
                ["sweep", run, "-k", "0..3", "-m", "none,0..2", "--json"],
                folder / f"run-{run}-sweep.txt",
                cwd=unpacked,
            )
            policies = [arg for spec in POLICIES for arg in ("--policy", spec)]
            _run(
                ["replay", run, *policies[:2], "--json"],
                folder / f"run-{run}-policy.txt",
                cwd=unpacked,
            )
            _run(["sweep", run, *policies], folder / f"run-{run}-policies.txt", cwd=unpacked)
        for peer in PEERS:
            log = f"peer-logs/{peer}"
            _run(["inspect", log], folder / f"peer-{peer}-inspect.txt", cwd=unpacked)
            _run(
                ["replay", log, "-k", "1", "--json"],
                folder / f"peer-{peer}-replay.txt",
                cwd=unpacked,
            )
            policies = [arg for spec in POLICIES[1:] for arg in ("--policy", spec)]
            _run(["sweep", log, *policies], folder / f"peer-{peer}-policies.txt", cwd=unpacked)


def snapshot(folder: Path) -> None:
    """Write the outputs of every sample, fixture and setting into *folder*."""
    folder = folder.resolve()
    folder.mkdir(parents=True, exist_ok=True)
    here = Path(__file__).resolve().parents[2]
    _samples(folder)
    _fixtures(folder, here)


if __name__ == "__main__":
    snapshot(Path(sys.argv[1]))
