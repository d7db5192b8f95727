"""Nothing half-written after a kill (issue 18): ``kill -9`` or the OOM killer cannot be
caught, so an output file is written as an anonymous O_TMPFILE that vanishes with the
process; where there is none (and for a folder), the temporary carries the writer's pid,
and the next write of that output removes it once that process is gone, and says so."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import polars as pl
import pytest

import analysis
from analysis.output import atomic
from analysis.output.atomic import LeftoverRemovedWarning, atomic_path
from analysis.output.checks import FRAME_FORMATS
from analysis.output.conversion import write_canonical
from analysis.simulation.parameters import SimulationConfig
from analysis.simulation.simulator import simulate

ROOT = Path(__file__).parents[2]
HANG = 120
"""A ceiling on the time on the clock that only a hang passes: each test here takes 1-3 s
on a quiet host, and several times that on a busy one."""
NAMED = {**os.environ, atomic.NO_TMPFILE_ENV: "1"}


def _has_tmpfile(folder: Path) -> bool:
    try:
        os.close(os.open(folder, os.O_TMPFILE | os.O_RDWR, 0o600))
    except (AttributeError, OSError):
        return False
    return True


needs_tmpfile = pytest.mark.skipif(
    not _has_tmpfile(Path(__file__).parent), reason="no O_TMPFILE here (Linux only)"
)


def _anonymous_in(pid: int, folder: Path) -> bool:
    """Whether process ``pid`` holds an anonymous file of ``folder`` open."""
    try:
        links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
    except OSError:
        return False
    return any(link.startswith(f"{folder}/#") for link in links)


def _named_in(folder: Path, name: str) -> list[Path]:
    return [p for p in folder.iterdir() if re.fullmatch(rf"\.{re.escape(name)}\.\d+-[0-9a-f]{{8}}-[0-9a-f]{{8}}\.tmp", p.name)]  # fmt: skip


def _kill_when(process: subprocess.Popen[str], writing: Callable[[], bool]) -> None:
    """SIGKILL ``process`` once ``writing()`` (a little after: well inside the write)."""
    deadline = time.monotonic() + HANG
    while not writing():
        assert process.poll() is None, process.communicate()[1]
        assert time.monotonic() < deadline, "the write did not begin in time"
        time.sleep(0.01)
    time.sleep(0.2)
    process.kill()
    process.communicate(timeout=HANG)
    assert process.returncode == -signal.SIGKILL


def _simulate(
    output: Path, *extra: str, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "cli", "simulate", "-o", str(output), "--groups", "400000",
         "--quiet", *extra],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip


CHILD = """
import sys, time
from pathlib import Path
from analysis.output.atomic import atomic_path
with atomic_path(Path(sys.argv[1])) as temp, open(temp, "wb") as out:
    for _ in range(64):
        out.write(b"x" * (1 << 20))
    out.flush()
    print("writing", flush=True)
    time.sleep(60)
"""


@needs_tmpfile
def test_a_write_killed_leaves_no_file_at_all(tmp_path: Path) -> None:
    """64 MiB written, then SIGKILL: the folder holds nothing."""
    started = time.monotonic()
    output = tmp_path / "big.bin"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(output)], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None and child.stdout.readline() == "writing\n"
    assert _anonymous_in(child.pid, tmp_path)  # the file it writes has no name
    child.kill()
    child.communicate(timeout=HANG)
    assert child.returncode == -signal.SIGKILL  # killed in its write, not ended by itself
    assert list(tmp_path.iterdir()) == []
    assert time.monotonic() - started < HANG


@needs_tmpfile
@pytest.mark.parametrize("name", ["big.jsonl", "big.parquet"])
def test_simulate_killed_mid_write_leaves_nothing(tmp_path: Path, name: str) -> None:
    started = time.monotonic()
    process = _simulate(tmp_path / name)
    _kill_when(process, lambda: _anonymous_in(process.pid, tmp_path))
    assert list(tmp_path.iterdir()) == []
    assert time.monotonic() - started < HANG


@pytest.mark.parametrize(
    ("name", "extra"),
    [("big.jsonl", ()), ("run", ("--format", "artifacts"))],
    ids=["file", "folder"],
)
def test_a_killed_write_leaves_a_pid_named_temporary_the_next_write_removes(
    tmp_path: Path, name: str, extra: tuple[str, ...]
) -> None:
    """Without O_TMPFILE (forced off here; a folder never has it): the temporary is
    ``.NAME.<pid>-XXXXXXXX.tmp``, and the next simulate to that output removes it, warns,
    and writes the output."""
    started = time.monotonic()
    process = _simulate(tmp_path / name, *extra, env=NAMED)
    _kill_when(process, lambda: bool(_named_in(tmp_path, name)))
    (left,) = _named_in(tmp_path, name)
    assert left.name.startswith(f".{name}.{process.pid}-")
    assert sorted(tmp_path.iterdir()) == [left]
    again = subprocess.run(
        [sys.executable, "-m", "cli", "simulate", "-o", str(tmp_path / name), "--groups", "4",
         "--quiet", *extra],
        cwd=ROOT, capture_output=True, text=True, env=NAMED, timeout=HANG,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    warned = [line for line in again.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warned) == 1 and left.name in warned[0] and "killed" in warned[0], again.stderr
    assert sorted(tmp_path.iterdir()) == [tmp_path / name]
    assert time.monotonic() - started < 2 * HANG


def _dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def test_only_the_outputs_own_leftovers_of_dead_writers_are_removed(tmp_path: Path) -> None:
    from analysis.output.atomic import _here

    dead, alive, here = _dead_pid(), os.getpid(), _here()
    elsewhere = "ffffffff" if here != "ffffffff" else "00000000"
    kept = [
        f".out.csv.{alive}-{here}-0123abcd.tmp",  # its writer runs (this process)
        f".other.csv.{dead}-{here}-0123abcd.tmp",  # another output's
        f".out.csv.{dead}-{here}-0123abcz.tmp",  # not the pattern
        f".out.csv.{dead}-{here}-0123abcd.tmp.bak",
        f"out.csv.{dead}-{here}-0123abcd.tmp",
        ".out.csv.0123abcd.tmp",  # a temporary of before: no pid, left alone
        f".out.csv.{dead}-0123abcd.tmp",  # no tag of where it was written: left alone
        # Written in another container or on another host: its pid means nothing here.
        f".out.csv.{dead}-{elsewhere}-0123abcd.tmp",
    ]
    for name in kept:
        (tmp_path / name).write_text("kept")
    gone = [
        tmp_path / f".out.csv.{dead}-{here}-89abcdef.tmp",
        tmp_path / f".out.csv.{dead}-{here}-00000000.tmp",
    ]
    gone[0].write_text("half")
    gone[1].mkdir()
    (gone[1] / "inside").write_text("half")
    with pytest.warns(LeftoverRemovedWarning, match=r"out\.csv: removed .*killed"):
        analysis.write_frame(pl.DataFrame({"a": [1]}), tmp_path / "out.csv")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*kept, "out.csv"])
    assert (tmp_path / f".out.csv.{alive}-{here}-0123abcd.tmp").read_text() == "kept"


def test_the_tag_is_of_this_pid_namespace(tmp_path: Path) -> None:
    """A process in another pid namespace (a container sharing the folder) writes another
    tag: a live writer there, whose pid is gone here, is not taken for a leftover."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare here")
    from analysis.output.atomic import _here

    code = "import sys; sys.path.insert(0, sys.argv[1]); from analysis.output.atomic import _here; print(_here())"
    done = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", code, str(ROOT)],
        capture_output=True, text=True, timeout=HANG,
    )  # fmt: skip
    if done.returncode:
        pytest.skip(f"cannot make a pid namespace here: {done.stderr.strip()[:100]}")
    assert done.stdout.strip() != _here()
    same = subprocess.run([sys.executable, "-c", code, str(ROOT)], capture_output=True, text=True)
    assert same.stdout.strip() == _here()


def test_no_leftover_no_warning(tmp_path: Path, recwarn: pytest.WarningsRecorder) -> None:
    analysis.write_frame(pl.DataFrame({"a": [1]}), tmp_path / "out.csv")
    assert not [w for w in recwarn if issubclass(w.category, LeftoverRemovedWarning)]


def _records() -> list[dict[str, object]]:
    return list(simulate(SimulationConfig(n_groups=6, n_samples_per_prompt=2, seed=3)))


def _figure() -> object:
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots()
    axes.plot([0, 1], [1, 0])
    return figure


WRITERS = [
    *(f"frame{ext}" for ext in FRAME_FORMATS),
    *(f"log-l{ext}" for ext in (".jsonl", ".jsonl.gz", ".parquet")),
    "log-pt",
    "canonical.arrow",
    *(f"figure.{ext}" for ext in ("png", "svg", "pdf")),
    "report.html",
]


def _write(writer: str, folder: Path) -> None:
    """Write an output with the writer named (a table, a log, a figure, a report)."""
    from analysis.views.plots import save_figure
    from analysis.views.report import write_report

    kind, _, name = writer.partition("-") if "-" in writer else writer.partition(".")
    if kind.startswith("frame"):
        analysis.write_frame(TABLE, folder / f"t{writer.removeprefix('frame')}")
    elif writer == "log-pt":
        analysis.write_log(_records(), folder / "dumps", "pt")
    elif kind == "log":
        analysis.write_log(_records(), folder / name, analysis.log_format_for(folder / name, None))
    elif kind == "canonical":
        log = analysis.load_logs([ROOT / "sample_data" / "rollouts.jsonl"])
        write_canonical(log, folder / "c.arrow")
    elif kind == "figure":
        save_figure(_figure(), folder / f"f.{name}")  # type: ignore[arg-type]
    else:
        write_report("<html></html>", folder / "r.html")


TABLE = pl.DataFrame({"a": [1, 2], "b": ["x", "y"]})


@needs_tmpfile
@pytest.mark.parametrize("writer", WRITERS)
def test_every_writer_writes_through_the_anonymous_file(
    writer: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """polars', pyarrow's, matplotlib's and the raw writers all take /proc/<pid>/fd/N."""
    made: list[int | None] = []
    anonymous = atomic._anonymous_file

    def spy(directory: Path) -> int | None:
        made.append(anonymous(directory))
        return made[-1]

    monkeypatch.setattr(atomic, "_anonymous_file", spy)
    _write(writer, tmp_path)
    assert made and all(handle is not None for handle in made)
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert written and all(p.stat().st_size > 0 for p in written)
    assert not [p for p in tmp_path.rglob("*.tmp")]
    for path in written:  # the permissions a plain open() gives
        assert path.stat().st_mode & 0o777 == 0o666 & ~_umask()
    if writer.startswith("frame"):  # and reads back whole
        (path,) = written
        readers: dict[str, Callable[[Path], pl.DataFrame]] = {".csv": pl.read_csv, ".parquet": pl.read_parquet, ".json": pl.read_json,
                   ".jsonl": pl.read_ndjson, ".ndjson": pl.read_ndjson}  # fmt: skip
        assert readers.get(path.suffix, pl.read_ipc)(path).equals(TABLE)
    elif writer.startswith("log-") or writer == "canonical.arrow":
        assert analysis.load_logs([written[0].parent if writer == "log-pt" else written[0]]).height


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_atomic_path_falls_back_to_a_named_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(atomic, "use_tmpfile", False)
    with atomic_path(tmp_path / "a.txt") as temp:
        assert temp.parent == tmp_path
        assert temp.name.startswith(f".a.txt.{os.getpid()}-") and temp.name.endswith(".tmp")
        temp.write_text("whole")
    assert [p.name for p in tmp_path.iterdir()] == ["a.txt"]
    assert (tmp_path / "a.txt").read_text() == "whole"


def test_convert_to_a_folder_removes_the_staging_a_killed_convert_left(tmp_path: Path) -> None:
    """convert -o FOLDER stages its parts in ``.NAME.<pid>-XXXXXXXX.tmp`` as well."""
    from typer.testing import CliRunner

    from analysis.output.atomic import _here
    from cli.app import app

    left = tmp_path / f".ds.{_dead_pid()}-{_here()}-0123abcd.tmp"
    left.mkdir()
    (left / "part-00000.parquet").write_text("half")
    result = CliRunner().invoke(
        app, ["convert", str(ROOT / "sample_data" / "rollouts.jsonl"), "-o", str(tmp_path / "ds"),
              "--workers", "1", "--quiet"],
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert f"warning: {tmp_path / 'ds'}: removed {left.name}, left half-written" in result.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["ds"]
    assert analysis.load_logs([tmp_path / "ds"]).height > 0
