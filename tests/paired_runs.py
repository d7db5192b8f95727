"""Paired real runs (tests/fixtures/paired_runs/*.tar.xz) and the what-if table of issue 30.

Each archive holds a run folder of Dressage's own loop built by the harness, named
``<workload>-k<K>-m<M|none>-r<repeat>``: one workload at several settings (K, M), every
setting built twice with the identical command (r1, r2), so that two runs of one setting
measure the run-to-run noise. ``pa-wG`` is a generation-bound workload on the partial loop,
``fa-wB`` a backlog-bound one on the fully-async loop; their settings (K, M) = (1, 1),
(2, 1), (2, 0), (2, none) hold a stricter and a looser K at M = 1 and a stricter and a
looser M at K = 2. ``rollouts.jsonl`` is left out (it repeats ``rollout_data/``, which the
reader reads first); ``run.json`` and ``truth.jsonl`` are kept for the truth below, which a
prediction never reads.

The what-if (docs/semantics.md §12.8): for every run A and every other setting B of its
workload, the row at B of A's sweep (:func:`analysis.simulation.predict.run_sweep`, what
``dressage-replay sweep A`` prints: B's figures drawn from A's fitted model) against the
mean of B's runs. ``python -m tests.paired_runs`` (``make whatif``) prints the mean
absolute error per metric and direction beside the noise floor; with ``--like``, each run's
model at the run's own setting against the run (``simulate --like RUN``) beside the noise
floor of the runs' own figures.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
import tempfile
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from analysis.formats.dressage.run import read_run
from analysis.simulation.predict import MODEL_DRAWS, ModelSetting, run_sweep
from tests.real_runs import extract_runs

ROOT = Path(__file__).resolve().parents[1]
PAIRED = Path(__file__).parent / "fixtures" / "paired_runs"
NAME = re.compile(r"(?P<workload>.+)-k(?P<k>\d+)-m(?P<m>\d+|none)-r(?P<repeat>\d+)")

Setting = tuple[int, int | None]
Figures = dict[str, float | None]


@dataclass(frozen=True)
class Metric:
    key: str
    label: str
    threshold: float
    """Issue 30's acceptance bound on the mean absolute error over every ordered pair."""
    digits: int


METRICS = (
    Metric("kept", "kept share (pts)", 3.0, 2),
    Metric("span", "span-rejected share (pts)", 3.0, 2),
    Metric("per_step", "kept groups per step", 0.1, 3),
    Metric("gap", "kept gap", 0.1, 3),
)
EVERY = "every ordered pair"
STRICTER_K, LOOSER_K = "stricter K, same M", "looser K, same M"
STRICTER_M, LOOSER_M, BOTH = "stricter M, same K", "looser M, same K", "another K and M"
DIRECTIONS = (STRICTER_K, LOOSER_K, STRICTER_M, LOOSER_M, BOTH)
ANOTHER_M = (STRICTER_M, LOOSER_M, BOTH)
"""The directions of "another M" (any K): its row in the table."""


@dataclass(frozen=True)
class PairedRun:
    name: str
    workload: str
    setting: Setting
    repeat: int


def parse_name(name: str) -> PairedRun:
    """``pa-wG-k2-mnone-r1`` -> workload ``pa-wG``, setting (2, None), repeat 1."""
    match = NAME.fullmatch(name)
    if match is None:
        raise ValueError(
            f"{name}: not a paired run's name; name it <workload>-k<K>-m<M|none>-r<repeat>"
        )
    m = match["m"]
    return PairedRun(
        name,
        match["workload"],
        (int(match["k"]), None if m == "none" else int(m)),
        int(match["repeat"]),
    )


def setting_text(setting: Setting) -> str:
    k, m = setting
    return f"K={k} M={'none' if m is None else m}"


def _looseness(value: int | None, off: int | None) -> float:
    return math.inf if value == off else float(value or 0)


def direction(source: Setting, target: Setting) -> str:
    """Which way the what-if goes from the run's setting (one of :data:`DIRECTIONS`). K = 0
    (no staleness filter) is the loosest K, M = none (no span check) the loosest M."""
    (k_a, m_a), (k_b, m_b) = source, target
    if k_a != k_b and m_a != m_b:
        return BOTH
    if m_a == m_b:
        return STRICTER_K if _looseness(k_b, 0) < _looseness(k_a, 0) else LOOSER_K
    return STRICTER_M if _looseness(m_b, None) < _looseness(m_a, None) else LOOSER_M


def truth_metrics(folder: Path) -> Figures:
    """What the run did, from the files a replay never reads (``truth.jsonl``: Dressage's
    decision per attempt; ``run.json``: the steps) and Dressage's own per-step metric:
    kept and span-rejected share of decided attempts (all but leftovers), kept groups per
    trainer step, and ``staleness/version_gap_mean`` weighted by each step's
    ``rollout/num_trajectories`` (null when no step has it, as at K = 0)."""
    outcomes = Counter(
        json.loads(line)["outcome"] for line in (folder / "truth.jsonl").read_text().splitlines()
    )
    steps = len(json.loads((folder / "run.json").read_text())["rollout_ids"])
    decided = sum(outcomes.values()) - outcomes["leftover"]
    weighted = weights = 0.0
    have_gap = False
    for line in (folder / "dressage_metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        gap = row.get("staleness/version_gap_mean")
        if gap is not None:
            have_gap = True
            count = row.get("rollout/num_trajectories") or 0.0
            weighted += gap * count
            weights += count
    return {
        "kept": 100.0 * outcomes["kept"] / decided,
        "span": 100.0 * outcomes["rejected_span"] / decided,
        "per_step": outcomes["kept"] / steps,
        "gap": weighted / weights if have_gap and weights else None,
    }


def _mean(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.mean(present) if present else None


@dataclass(frozen=True)
class Prediction:
    source: PairedRun
    target: Setting
    direction: str
    predicted: Figures
    actual: Figures
    """The mean of the target setting's runs."""
    unchanged: Figures
    """The source run's own figures: the "no change" prediction."""


@dataclass(frozen=True)
class WhatIf:
    runs: dict[str, PairedRun]
    truths: dict[str, Figures]
    predictions: list[Prediction]


def by_setting(runs: dict[str, PairedRun]) -> dict[tuple[str, Setting], list[str]]:
    groups: dict[tuple[str, Setting], list[str]] = defaultdict(list)
    for name, run in sorted(runs.items()):
        groups[run.workload, run.setting].append(name)
    return dict(groups)


def predict(
    folder: Path, targets: Sequence[Setting], *, draws: int, seed: int
) -> dict[Setting, Figures]:
    """The figures of ``targets`` as the sweep of the run at ``folder`` says them: kept and
    span-rejected share of decided attempts (the row's shares of every attempt, leftovers
    taken out), kept groups per trainer step (of the draws) and the kept gap."""
    swept = run_sweep(
        read_run(folder),
        keep_versions=sorted({k for k, _ in targets}),
        max_preempts=sorted({m for _, m in targets}, key=lambda m: math.inf if m is None else m),
        draws=draws,
        seed=seed,
    )
    if swept.notes and any(n.startswith("no what-if model") for n in swept.notes):
        raise AssertionError(f"{folder.name}: {swept.notes}")
    found: dict[Setting, Figures] = {}
    for row, result in zip(swept.rows.iter_rows(named=True), swept.results, strict=True):
        key = (row["keep_versions"], row["max_preempts"])
        if key not in targets:
            continue
        # A row the sweep replays though it is not the run's setting: the run's files cannot
        # tell that M from another (an M that rejected nothing reads as none), so the tool
        # answers with the replay; its kept groups per step are left out.
        simulated = result.draws if isinstance(result, ModelSetting) else ()
        decided = 100.0 - (row["leftover_pct"] or 0.0)
        per_step = [
            sum(a.outcome == "kept" for a in draw.attempts) / draw.calls
            for draw in simulated
            if draw.calls
        ]
        found[key] = {
            "kept": 100.0 * row["groups_kept_pct"] / decided,
            "span": 100.0 * row["rejected_span_pct"] / decided,
            "per_step": _mean(per_step),
            "gap": row["version_gap_mean"],
        }
    return found


def measure(folders: dict[str, Path], *, draws: int = MODEL_DRAWS, seed: int = 0) -> WhatIf:
    """Every run's prediction of every other setting of its workload, with the truth."""
    runs = {name: parse_name(name) for name in folders}
    truths = {name: truth_metrics(folder) for name, folder in folders.items()}
    groups = by_setting(runs)
    actual = {
        key: {m.key: _mean(truths[name][m.key] for name in names) for m in METRICS}
        for key, names in groups.items()
    }
    predictions = []
    for name, run in sorted(runs.items()):
        targets = [s for (w, s) in groups if w == run.workload and s != run.setting]
        predicted = predict(folders[name], targets, draws=draws, seed=seed)
        for target in targets:
            predictions.append(
                Prediction(
                    run,
                    target,
                    direction(run.setting, target),
                    predicted[target],
                    actual[run.workload, target],
                    truths[name],
                )
            )
    return WhatIf(runs, truths, predictions)


def mae(predictions: Iterable[Prediction], metric: str, *, unchanged: bool = False) -> float | None:
    """Mean absolute error of the predictions on ``metric`` (pairs where either side is
    null left out); ``unchanged``: of the source run's own figures instead."""
    errors = []
    for p in predictions:
        guess = (p.unchanged if unchanged else p.predicted)[metric]
        truth = p.actual[metric]
        if guess is not None and truth is not None:
            errors.append(abs(guess - truth))
    return statistics.mean(errors) if errors else None


def noise_floor(whatif: WhatIf, workload: str | None = None) -> tuple[Figures, int]:
    """|r1 - r2| per setting (first two repeats), averaged over the settings, and how many
    settings had two runs."""
    diffs: dict[str, list[float]] = defaultdict(list)
    settings = 0
    for (w, _), names in by_setting(whatif.runs).items():
        if len(names) < 2 or workload not in (None, w):
            continue
        settings += 1
        first, second = (whatif.truths[n] for n in names[:2])
        for m in METRICS:
            a, b = first[m.key], second[m.key]
            if a is not None and b is not None:
                diffs[m.key].append(abs(a - b))
    return {m.key: _mean(diffs[m.key]) for m in METRICS}, settings


def every_pair_mae(whatif: WhatIf) -> Figures:
    return {m.key: mae(whatif.predictions, m.key) for m in METRICS}


def _cell(value: float | None, metric: Metric) -> str:
    return "-" if value is None else f"{value:.{metric.digits}f}"


def table(whatif: WhatIf) -> str:
    """The what-if table (markdown): MAE per metric over every ordered pair, per direction
    and per workload, the "no change" baseline, the noise floor and issue 30's bounds."""
    head = "| pairs | predictions | " + " | ".join(m.label for m in METRICS) + " |"
    lines = [head, "|---|---|" + "---|" * len(METRICS)]

    def row(label: str, count: str, values: Figures) -> None:
        cells = " | ".join(_cell(values[m.key], m) for m in METRICS)
        lines.append(f"| {label} | {count} | {cells} |")

    def mae_row(label: str, chosen: list[Prediction], *, unchanged: bool = False) -> None:
        values = {m.key: mae(chosen, m.key, unchanged=unchanged) for m in METRICS}
        row(label, str(len(chosen)), values)

    predictions = whatif.predictions
    mae_row(EVERY, predictions)
    for label, chosen in (
        (STRICTER_K, (STRICTER_K,)),
        (LOOSER_K, (LOOSER_K,)),
        ("another M (any K)", ANOTHER_M),
        *((f"- {name}", (name,)) for name in ANOTHER_M),
    ):
        mae_row(label, [p for p in predictions if p.direction in chosen])
    workloads = sorted({run.workload for run in whatif.runs.values()})
    for workload in workloads:
        mae_row(
            f"{workload}, every pair", [p for p in predictions if p.source.workload == workload]
        )
    mae_row("no change (the source run's own figures)", predictions, unchanged=True)
    floor, settings = noise_floor(whatif)
    row("noise floor: mean \\|r1 - r2\\| per setting", f"{settings} settings", floor)
    for workload in workloads:
        floor, settings = noise_floor(whatif, workload)
        row(f"noise floor, {workload}", f"{settings} settings", floor)
    bounds = " | ".join(f"<= {m.threshold:g}" for m in METRICS)
    lines.append(f"| issue 30's bound, every ordered pair | | {bounds} |")
    return "\n".join(lines)


def describe(whatif: WhatIf, draws: int, source: str) -> str:
    workloads = sorted({run.workload for run in whatif.runs.values()})
    settings = {
        w: ", ".join(setting_text(s) for (wl, s) in by_setting(whatif.runs) if wl == w)
        for w in workloads
    }
    lines = [
        f"What-if predictions on {len(whatif.runs)} paired runs ({source}): "
        f"each run's model ({draws} draws) at every other setting of its workload, against "
        "the mean of that setting's runs; mean absolute error.",
        "",
        *(f"- {w}: {settings[w]}" for w in workloads),
        "",
        table(whatif),
        "",
        "Kept and span-rejected share: of decided attempts (all but leftovers). Gap: "
        "Dressage's staleness/version_gap_mean weighted by rollout/num_trajectories; "
        "pairs where either side has none (K = 0) left out. Noise floor: two runs of one "
        "setting (the identical command).",
    ]
    return "\n".join(lines)


LIKE_FIGURES = (
    ("steps", "trainer steps", 0),
    ("kept", "kept groups", 0),
    ("dropped_stale", "stale drops", 2),
    ("leftover", "leftovers", 2),
    ("gap_mean", "mean kept gap", 3),
    ("rejected_span", "span rejections", 2),
    ("kept_pct", "kept share (pts)", 2),
)
"""The figures of ``simulate --like RUN`` at the run's own setting that the table compares."""


def like_errors(
    folders: dict[str, Path], *, draws: int = MODEL_DRAWS, seed: int = 0
) -> dict[str, tuple[Figures, Figures]]:
    """Each run's figures (its replay at its own setting) and the mean of ``draws``
    simulations of its fitted model there (:func:`analysis.simulation.run_like.like_run`)."""
    from analysis.simulation.run_like import like_run

    found = {}
    for name, folder in sorted(folders.items()):
        like = like_run(folder, draws=draws, seed=seed)
        found[name] = (like.run, like.simulated())
    return found


def _abs_mean(pairs: Iterable[tuple[float | None, float | None]]) -> float | None:
    return _mean(abs(a - b) for a, b in pairs if a is not None and b is not None)


def like_table(figures: dict[str, tuple[Figures, Figures]]) -> str:
    """Per figure: mean |sim - run| over the runs, the noise floor (|r1 - r2| of the runs'
    figures, mean over the settings built twice) and whether the error is within 2x."""
    runs = {name: parse_name(name) for name in figures}
    pairs = [names[:2] for names in by_setting(runs).values() if len(names) >= 2]
    lines = [
        "| figure | mean \\|sim - run\\| | noise floor \\|r1 - r2\\| | within 2x |",
        "|---|---|---|---|",
    ]
    for key, label, digits in LIKE_FIGURES:
        error = _abs_mean((run[key], sim[key]) for run, sim in figures.values())
        floor = _abs_mean((figures[a][0][key], figures[b][0][key]) for a, b in pairs)
        within = "-" if error is None or floor is None else "yes" if error <= 2 * floor else "no"
        cells = ["-" if v is None else f"{v:.{digits}f}" for v in (error, floor)]
        lines.append(f"| {label} | {cells[0]} | {cells[1]} | {within} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make whatif", description=__doc__)
    parser.add_argument("--draws", type=int, default=MODEL_DRAWS, help="simulations per setting")
    parser.add_argument("--seed", type=int, default=0, help="the first draw's seed")
    parser.add_argument(
        "--runs",
        type=Path,
        help="a folder of paired run folders named as above (default: the fixtures)",
    )
    parser.add_argument(
        "--like",
        action="store_true",
        help="instead: each run's model at its own setting against the run (simulate --like)",
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="paired_runs") as tmp:
        if args.runs is None:
            folders, source = extract_runs(PAIRED, Path(tmp)), str(PAIRED.relative_to(ROOT))
        else:
            source = str(args.runs)
            folders = {
                f.name: f
                for f in sorted(args.runs.iterdir())
                if NAME.fullmatch(f.name) and (f / "truth.jsonl").is_file()
            }
        if args.like:
            figures = like_errors(folders, draws=args.draws, seed=args.seed)
            print(f"simulate --like at the run's own setting on {len(figures)} paired runs "
                  f"({source}), mean of {args.draws} draws:\n")  # fmt: skip
            print(like_table(figures))
            return 0
        whatif = measure(folders, draws=args.draws, seed=args.seed)
    print(describe(whatif, args.draws, source))
    return 0


if __name__ == "__main__":
    sys.exit(main())
