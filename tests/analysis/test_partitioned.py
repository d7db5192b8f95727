"""`convert -o FOLDER`: a partitioned canonical dataset, by local processes or Ray tasks,
that is the table a local convert writes."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

import analysis
from analysis.errors import ConfigError, DamagedFileError, OutputError
from analysis.output.partitioned import convert_partitioned, plan_units, run_local
from analysis.output.raw_logs import write_jsonl
from cli.app import app

SAMPLE = Path(__file__).resolve().parents[2] / "sample_data"
runner = CliRunner()


@pytest.fixture(scope="module")
def inputs(
    tmp_path_factory: pytest.TempPathFactory, small_records: list[dict[str, Any]]
) -> list[Path]:
    """Three JSONL files (a folder of two and one alone), slime dumps and an artifact tree."""
    root = tmp_path_factory.mktemp("partitioned")
    (root / "logs").mkdir()
    half = len(small_records) // 2
    write_jsonl(small_records[:half], root / "logs" / "a.jsonl")
    write_jsonl(small_records[half:], root / "logs" / "b.jsonl")
    write_jsonl(small_records, root / "c.jsonl")
    return [root / "logs", root / "c.jsonl", SAMPLE / "dumps", SAMPLE / "artifacts"]


def _parts(folder: Path) -> pl.DataFrame:
    return pl.concat([pl.read_parquet(p) for p in sorted(folder.glob("part-*.parquet"))])


@pytest.fixture(scope="module")
def local_convert(inputs: list[Path], tmp_path_factory: pytest.TempPathFactory) -> pl.DataFrame:
    target = tmp_path_factory.mktemp("one") / "one.parquet"
    analysis.convert_logs(inputs, target)
    return pl.read_parquet(target)


def test_units_split_files_and_keep_ordered_folders_whole(inputs: list[Path]) -> None:
    units = plan_units(inputs)
    assert [Path(u.inputs[0]).name for u in units] == [
        "a.jsonl",
        "b.jsonl",
        "c.jsonl",
        "dumps",
        "artifacts",
    ]
    assert [u.index for u in units] == list(range(5))


@pytest.mark.parametrize("workers", [1, 2])
def test_parts_are_the_table_a_local_convert_writes(
    inputs: list[Path], local_convert: pl.DataFrame, tmp_path: Path, workers: int
) -> None:
    done = convert_partitioned(inputs, tmp_path / "ds", runner=run_local(workers))
    assert done.parts == 5 and done.rows == local_convert.height
    assert _parts(tmp_path / "ds").equals(local_convert)
    # and every command reads the folder as one log: the same decisions
    config = analysis.ReplayConfig(keep_versions=2, max_preempts=1)
    ours = analysis.replay(analysis.prepare(analysis.load_logs([tmp_path / "ds"])), config)
    theirs = analysis.replay(analysis.prepare(analysis.load_logs(inputs)), config)
    assert ours.decisions.equals(theirs.decisions)
    assert [p.name for p in tmp_path.iterdir()] == ["ds"]  # no staging folder left


def test_a_large_jsonl_file_is_cut_into_pieces_that_make_the_same_table(
    inputs: list[Path], tmp_path: Path
) -> None:
    """Pieces start at line ends and number their lines as the whole file does, so the
    parts are the table of one read, record numbers included."""
    big = inputs[1]  # c.jsonl
    units = plan_units([big], piece_bytes=big.stat().st_size // 5)
    assert len(units) >= 4 and all(u.piece is not None for u in units)
    assert units[0].piece is not None and units[0].piece.start == 0
    done = convert_partitioned(
        [big], tmp_path / "ds", runner=run_local(2), piece_bytes=big.stat().st_size // 5
    )
    assert done.parts == len(units)
    whole = tmp_path / "one.parquet"
    analysis.convert_logs([big], whole)
    assert _parts(tmp_path / "ds").equals(pl.read_parquet(whole))


def test_a_bad_line_in_a_piece_is_reported_with_its_line_in_the_file(
    tmp_path: Path, small_records: list[dict[str, Any]]
) -> None:
    log = tmp_path / "log.jsonl"
    write_jsonl(small_records, log)
    lines = log.read_text().splitlines()
    lines[-3] = "{broken"
    log.write_text("\n".join(lines) + "\n")
    with pytest.raises(analysis.ReplayError) as ours:
        convert_partitioned([log], tmp_path / "ds", piece_bytes=log.stat().st_size // 4)
    with pytest.raises(analysis.ReplayError) as theirs:
        analysis.load_logs([log])
    assert str(ours.value) == str(theirs.value) and f"log.jsonl:{len(lines) - 2}:" in str(
        ours.value
    )


@pytest.mark.slow  # worker processes start: a few seconds on a loaded host
def test_the_first_failing_unit_in_input_order_is_the_error(
    tmp_path: Path, small_records: list[dict[str, Any]]
) -> None:
    for name in ("a", "b", "c"):
        write_jsonl(small_records[:10], tmp_path / f"{name}.jsonl")
    for name in ("b", "c"):  # two bad files: b's error is the one a single read raises first
        with (tmp_path / f"{name}.jsonl").open("a") as handle:
            handle.write("{not json\n")
    files = [tmp_path / f"{name}.jsonl" for name in ("a", "b", "c")]
    with pytest.raises(analysis.ReplayError) as ours:
        convert_partitioned(files, tmp_path / "ds", runner=run_local(2))
    with pytest.raises(analysis.ReplayError) as theirs:
        analysis.load_logs(files)
    assert str(ours.value) == str(theirs.value) and "b.jsonl" in str(ours.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.jsonl", "b.jsonl", "c.jsonl"]
    skipped = convert_partitioned(
        files, tmp_path / "ds", analysis.ReadOptions(on_bad_record="skip"), runner=run_local(2)
    )
    assert skipped.skipped == {"bad record": 2}
    assert skipped.rows == 30


def test_an_existing_output_or_one_inside_an_input_is_refused(
    inputs: list[Path], tmp_path: Path
) -> None:
    (tmp_path / "there").mkdir()
    with pytest.raises(OutputError, match="already exists"):
        convert_partitioned(inputs[:1], tmp_path / "there")
    with pytest.raises(OutputError, match="inside the input"):
        convert_partitioned([tmp_path], tmp_path / "ds")


@pytest.mark.slow  # worker processes start: a few seconds on a loaded host
def test_convert_to_a_folder_on_the_command_line(
    inputs: list[Path], tmp_path: Path, local_convert: pl.DataFrame
) -> None:
    out = tmp_path / "ds"
    result = runner.invoke(app, ["convert", *map(str, inputs), "-o", str(out), "--workers", "2"])
    assert result.exit_code == 0, result.stderr
    assert (
        f"wrote {local_convert.height:,} records to {out}/ (5 parts, 2 local processes)"
        in result.stderr
    )
    assert _parts(out).equals(local_convert)
    again = runner.invoke(app, ["convert", str(inputs[1]), "-o", str(out)])
    assert again.exit_code == analysis.ExitCode.OUTPUT and "already exists" in again.stderr
    misuse = runner.invoke(
        app, ["convert", str(inputs[1]), "-o", str(tmp_path / "x.parquet"), "--ray", "auto"]
    )
    assert misuse.exit_code == 2 and "without an extension" in misuse.stderr


def test_without_ray_installed_ray_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from analysis.output.ray_runner import run_ray

    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ConfigError, match=r"pip install 'dressage-replay\[ray\]'"):
        run_ray("auto")


@pytest.mark.slow
def test_ray_on_a_local_two_cpu_cluster_writes_the_same_parts(
    inputs: list[Path], local_convert: pl.DataFrame, tmp_path: Path
) -> None:
    pytest.importorskip("ray", reason="the ray extra is not installed (pip install '.[ray]')")
    from analysis.output.ray_runner import run_ray

    done = convert_partitioned(inputs, tmp_path / "ds", runner=run_ray("local", num_cpus=2))
    assert done.workers == "Ray tasks (local)" and done.parts == 5
    assert _parts(tmp_path / "ds").equals(local_convert)
    assert json.dumps(done.formats) == json.dumps(sorted({"jsonl", "pt", "artifacts"}))


def test_damaged_units_name_their_file(tmp_path: Path) -> None:
    (tmp_path / "x.jsonl").write_bytes(b"\xff\xfe not text\n")
    with pytest.raises((analysis.ReplayError, DamagedFileError)) as raised:
        convert_partitioned([tmp_path / "x.jsonl"], tmp_path / "ds")
    assert "x.jsonl" in str(raised.value)


def test_workers_say_what_ran_and_zero_is_refused(tmp_path: Path, inputs: list[Path]) -> None:
    one = convert_partitioned(inputs[1:2], tmp_path / "a", runner=run_local(8))
    assert one.parts == 1 and one.workers == "in this process"  # one unit: no worker started
    with pytest.raises(ConfigError, match="1 or more"):
        run_local(0)
    single = run_local(1)
    convert_partitioned(inputs[:1], tmp_path / "b", runner=single)
    used = getattr(single, "used")  # noqa: B009 (a Runner is a callable; this one says more)
    assert used == "in this process"  # --workers 1 meant every core once
    result = runner.invoke(
        app, ["convert", str(inputs[1]), "-o", str(tmp_path / "c"), "--workers", "0"]
    )
    assert result.exit_code == analysis.ExitCode.CONFIG
    assert "--workers 0" in result.stderr and result.stderr.count("\n") == 1
    both = runner.invoke(
        app,
        ["convert", str(inputs[1]), "-o", str(tmp_path / "d"), "--workers", "2", "--ray", "auto"],
    )
    assert both.exit_code == 2 and "--workers" in both.stderr


def test_a_folder_that_cannot_be_written_is_an_output_error(inputs: list[Path]) -> None:
    with pytest.raises(OutputError, match="cannot write there"):
        convert_partitioned(inputs[1:2], Path("/proc/ds"))


def test_part_names_sort_in_unit_order_however_many() -> None:
    from analysis.output.partitioned import part_name

    assert part_name(7, 10) == "part-00007.parquet"
    names = [part_name(i, 123_456) for i in (9, 99_999, 100_000, 123_455)]
    assert names == sorted(names) and names[0] == "part-000009.parquet"


@pytest.mark.slow
def test_ctrl_c_ends_a_partitioned_convert_at_once_and_leaves_nothing(tmp_path: Path) -> None:
    import signal
    import subprocess
    import time

    config = analysis.SimulationConfig(n_groups=1500, n_samples_per_prompt=8, seed=1)
    for name in "abcdef":
        write_jsonl(analysis.simulate(config), tmp_path / f"{name}.jsonl")
    out = tmp_path / "out"
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "cli", "convert", *sorted(map(str, tmp_path.glob("*.jsonl"))),
         "-o", str(out), "--workers", "2"],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = started + 120
    while not list(tmp_path.glob(".out.*.tmp/part-*.parquet")):  # a part is written
        assert time.monotonic() < deadline and process.poll() is None
        time.sleep(0.1)
    process.send_signal(signal.SIGINT)
    interrupted = time.monotonic()
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130, err
    # At once: within 0.1 s on a quiet host, where starting and writing the first part
    # took 2 s (the whole convert 4 s). Both are timed in this run, so a busy host that
    # slows one slows the other: 10 s, or longer than the start took.
    assert time.monotonic() - interrupted < max(10, interrupted - started)
    assert "Traceback" not in err
    assert not out.exists() and not list(tmp_path.glob(".out.*.tmp"))
