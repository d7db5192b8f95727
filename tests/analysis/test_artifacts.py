"""Artifact folders read with a helper process give exactly what one process reads."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import analysis
from analysis.errors import SkipReason
from analysis.formats.dressage import artifact_helper, artifacts, segments
from analysis.output.raw_artifacts import write_artifacts


@pytest.fixture
def folder(small_records: list[dict[str, Any]], tmp_path: Path) -> Path:
    """The small run as an artifact folder, one file made bad in each half of the sessions."""
    root = tmp_path / "artifacts"
    write_artifacts(small_records, root)
    sessions = sorted(p for p in root.glob("*/*") if p.is_dir())
    assert len(sessions) > 8
    # The first session folder this process reads and the first the helper reads.
    for session in (sessions[0], sessions[-1]):
        segment = next(session.glob("samples/*.json"))
        segment.write_text('{"group_index": 1, "metadata": ')
    # Distinct modification times, so arrival order does not fall back to paths.
    for number, path in enumerate(sorted(root.rglob("samples/*.json"))):
        os.utime(path, ns=(1_700_000_000_000_000_000 + number * 1000,) * 2)
    return root


def load(
    folder: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    helpers: bool,
    slow_here: float = 0.005,
    on_bad_record: Any = "skip",
) -> tuple[pl.DataFrame, analysis.LoadReport]:
    """Load with or without a helper; this process takes ``slow_here`` seconds more per
    session folder, so that the helper, which starts in about 50 ms, gets a share."""
    monkeypatch.setattr(artifact_helper, "HELPER_MIN_INSTANCES", 2 if helpers else 10**9)
    monkeypatch.setattr(segments, "CHUNK_FILES", 7)  # many chunks, from both processes
    real_read_session = segments.read_session

    def read_session(*args: Any) -> None:
        time.sleep(slow_here)
        real_read_session(*args)

    monkeypatch.setattr(artifacts, "read_session", read_session)  # this process only
    report = analysis.LoadReport()
    table = analysis.load_logs([folder], on_bad_record=on_bad_record, report=report)
    return table, report


@pytest.fixture
def helpers(monkeypatch: pytest.MonkeyPatch) -> list[artifact_helper.HelperProcess]:
    """The helpers started, kept to look at once the folder is read."""
    started: list[artifact_helper.HelperProcess] = []

    class KeptHelper(artifact_helper.HelperProcess):
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            started.append(self)

    monkeypatch.setattr(artifact_helper, "HelperProcess", KeptHelper)
    return started


def helper_runs_first(monkeypatch: pytest.MonkeyPatch, code: str) -> None:
    """Make the helper run ``code`` before it starts reading."""
    patched = artifact_helper._BOOTSTRAP.replace("helper_main()", f"{code}\nhelper_main()")
    monkeypatch.setattr(artifact_helper, "_BOOTSTRAP", patched)


def after_its_first_chunk(monkeypatch: pytest.MonkeyPatch, action: str) -> None:
    """Make the helper do ``action`` in place of making its second and later chunks."""
    helper_runs_first(
        monkeypatch,
        "import os\n"
        "from analysis.formats.dressage.segments import Chunk\n"
        "sent = []\n"
        "def first_only(self, real=Chunk.to_marshal):\n"
        "    sent.append(1)\n"
        "    if len(sent) == 1: return real(self)\n"
        f"    {action}\n"
        "Chunk.to_marshal = first_only",
    )


def test_helper_reads_the_same_rows_in_the_same_order(
    folder: Path, monkeypatch: pytest.MonkeyPatch, helpers: list[artifact_helper.HelperProcess]
) -> None:
    report = reads_as_one_process(folder, monkeypatch)
    assert len(helpers) == 1 and helpers[0].instances_done > 0  # the helper took a share
    assert not helpers[0].problem
    assert report.skipped == {"bad record": 2}
    assert report.files == len(list(folder.rglob("samples/*.json")))
    assert report.warnings == []


def reads_as_one_process(
    folder: Path, monkeypatch: pytest.MonkeyPatch, *, slow_here: float = 0.005
) -> analysis.LoadReport:
    """Load with the helper as the test set it up, check that the table, file count and
    skips are those one process reads, and return the report."""
    alone, alone_report = load(folder, monkeypatch, helpers=False)
    shared, report = load(folder, monkeypatch, helpers=True, slow_here=slow_here)
    assert alone.height > 0
    assert_frame_equal(alone, shared)
    assert report.files == alone_report.files
    assert report.skipped == alone_report.skipped
    assert report.skipped_where == alone_report.skipped_where
    return report


def session_count(folder: Path) -> int:
    """The units of work shared with the helper: session folders."""
    return sum(1 for path in folder.glob("*/*") if path.is_dir())


def test_a_slow_helper_leaves_the_folders_to_this_process(
    folder: Path, monkeypatch: pytest.MonkeyPatch, helpers: list[artifact_helper.HelperProcess]
) -> None:
    """Folders are handed out as they are read, not split in advance: a helper that is
    slow (its core busy elsewhere) reads only the batches it was given first."""
    helper_runs_first(
        monkeypatch,
        "import time\n"
        "from analysis.formats.dressage import segments\n"
        "real = segments.read_session\n"
        "segments.read_session = lambda *a: (time.sleep(0.1), real(*a))",
    )
    reads_as_one_process(folder, monkeypatch, slow_here=0)
    (helper,) = helpers
    assert len(helper.assigned) == artifact_helper.HELPER_BATCHES_AHEAD  # never ready for more
    assert helper.instances_done == sum(map(len, helper.assigned)) < session_count(folder) / 2


def test_a_slow_parent_leaves_most_folders_to_the_helper(
    folder: Path, monkeypatch: pytest.MonkeyPatch, helpers: list[artifact_helper.HelperProcess]
) -> None:
    reads_as_one_process(folder, monkeypatch, slow_here=0.05)
    (helper,) = helpers
    assert len(helper.assigned) > artifact_helper.HELPER_BATCHES_AHEAD  # it asked for more
    assert helper.instances_done > session_count(folder) / 2
    # Every folder was read once: by one process or the other.
    taken = [instance for batch in helper.assigned for instance in batch]
    assert len(taken) == len(set(taken)) == helper.instances_done


def test_bad_file_in_the_helpers_share_fails_with_its_location(
    folder: Path, monkeypatch: pytest.MonkeyPatch, helpers: list[artifact_helper.HelperProcess]
) -> None:
    """Only the last session folder, the helper's first, keeps its bad file."""
    sessions = sorted(path for path in folder.glob("*/*") if path.is_dir())
    good = next(sessions[1].glob("samples/*.json")).read_text()
    next(sessions[0].glob("samples/*.json")).write_text(good)
    bad = next(sessions[-1].glob("samples/*.json"))
    with pytest.raises(
        analysis.LogFormatError, match=rf"{bad.name}:1: not valid JSON \(.*, column \d+\)"
    ) as caught:
        load(folder, monkeypatch, helpers=True, on_bad_record="fail")
    assert str(bad) in str(caught.value)
    (helper,) = helpers
    assert str(sessions[-1]) in helper.assigned[0]  # the helper read it


def test_a_helper_that_cannot_start_leaves_the_work_to_this_process(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "executable", str(folder / "no-such-python"))
    report = reads_as_one_process(folder, monkeypatch)
    assert any("helper process failed" in warning for warning in report.warnings)


def test_a_helper_that_dies_midway_leaves_the_rest_to_this_process(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its chunks so far are kept; this process reads the folders they do not cover."""
    after_its_first_chunk(monkeypatch, "os._exit(3)")
    taken: list[int] = []
    real_taken = artifact_helper.HelperProcess._taken

    def counted(self: Any, item: Any) -> Any:
        chunk = real_taken(self, item)
        if chunk is not None:
            taken.append(1)
        return chunk

    monkeypatch.setattr(artifact_helper.HelperProcess, "_taken", counted)
    report = reads_as_one_process(folder, monkeypatch)
    assert taken == [1]  # one chunk came from the helper before it died
    assert any("helper process failed (exit 3" in warning for warning in report.warnings)


def test_a_chunk_that_cannot_be_read_ends_the_helper_and_its_folders_are_read_here(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    after_its_first_chunk(monkeypatch, "return b'not marshal data'")
    report = reads_as_one_process(folder, monkeypatch)
    assert any("unreadable results" in warning for warning in report.warnings)


@pytest.mark.parametrize("stray", ["hello from sitecustomize\n", "ok!\n", "\x1b[0m", "x"])
def test_stray_output_from_the_helper_is_a_failed_helper_not_lost_rows(
    folder: Path, monkeypatch: pytest.MonkeyPatch, stray: str
) -> None:
    """Something printing to stdout as the helper starts (a sitecustomize, say) breaks
    its framing: the helper is ended, and this process reads its share, with a warning.
    Four bytes once made a plausible length and hung the read."""
    helper_runs_first(monkeypatch, f"sys.stdout.write({stray!r})")
    report = reads_as_one_process(folder, monkeypatch)
    assert any("unreadable results" in warning for warning in report.warnings)


def test_helpers_can_be_turned_off(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started = []
    monkeypatch.setattr(artifact_helper, "HelperProcess", lambda *args: started.append(args))
    monkeypatch.setenv("DRESSAGE_REPLAY_HELPERS", "0")
    load(folder, monkeypatch, helpers=True)
    assert started == []


def test_the_helper_never_imports_polars() -> None:
    """It must start in milliseconds: only the record mapping, never the whole library."""
    probe = artifact_helper._BOOTSTRAP.replace(
        "helper_main()", "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('polars', 'pyarrow', 'numpy', 'matplotlib')))"
    )  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-P", "-c", probe, str(Path(artifacts.__file__).parent.parent)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert done.stdout.strip() == "[]"


def test_a_folder_that_cannot_be_listed_is_a_skipped_file_not_silence(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tests run as root, which reads any folder, so os.scandir is made to fail instead
    (in this process only, hence without the helper)."""
    samples = next(folder.glob("*/*/samples"))
    real_scandir = os.scandir

    def scandir(path: Any = ".") -> Any:
        if str(path) == str(samples):
            raise PermissionError(13, "Permission denied")
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)  # the os module artifacts.py uses
    monkeypatch.setattr(artifact_helper, "HELPER_MIN_INSTANCES", 10**9)
    report = analysis.LoadReport()
    analysis.load_logs([folder], on_bad_record="skip", report=report)
    assert report.skipped[SkipReason.UNREADABLE_FILE] == 1
    assert any("cannot list the folder (Permission denied)" in w for w in report.skipped_where)
    with pytest.raises(analysis.InputNotFoundError, match="cannot list the folder"):
        analysis.load_logs([folder])


def test_no_interpreter_to_start_means_no_helper(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "executable", None)
    report = reads_as_one_process(folder, monkeypatch)
    assert report.warnings == []  # not a failure: the helper is simply not wanted


def test_progress_counts_instance_folders(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(artifact_helper, "HELPER_MIN_INSTANCES", 2)
    calls: list[tuple[int, int]] = []
    analysis.load_logs([folder], on_bad_record="skip", progress=lambda *c: calls.append(c))
    done = [d / t for d, t in calls]
    assert done == sorted(done) and done[-1] == 1.0
    assert len(calls) > 5  # advances during the folder, not only at its end


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_a_fifo_named_like_a_segment_is_passed_over_without_blocking(tmp_path: Path) -> None:
    """A file replaced by a FIFO after the listing must not hang the read."""
    fifo = tmp_path / "0.json"
    os.mkfifo(fifo)
    assert segments.read_segment_file(str(fifo), analysis.FieldMap(), ())[2] == []


def test_entries_named_like_segments_that_are_not_files_are_not_counted(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder or a FIFO named *.json in samples/ is passed over: no rows, no error,
    not counted as a segment file; a stray file beside the sessions is no session."""
    monkeypatch.setattr(artifact_helper, "HELPER_MIN_INSTANCES", 10**9)
    before = analysis.LoadReport()
    expected = analysis.load_logs([folder], on_bad_record="skip", report=before)
    samples = next(folder.glob("*/*/samples"))
    (samples / "folder.json").mkdir()
    if hasattr(os, "mkfifo"):
        os.mkfifo(samples / "pipe.json")
    (samples.parent.parent / "notes.json").write_text("{}")
    after = analysis.LoadReport()
    table = analysis.load_logs([folder], on_bad_record="skip", report=after)
    assert_frame_equal(table, expected)
    assert after.files == before.files
    assert after.skipped == before.skipped
