"""Hostile and broken input, degenerate logs, interruption: documented exits, no leftovers."""

from __future__ import annotations

import copy
import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from typer.testing import CliRunner, Result

from analysis.formats.pickled.pickles import dump_pt
from analysis.output.raw_logs import write_jsonl
from analysis.simulation.parameters import SimulationConfig
from analysis.simulation.simulator import simulate
from cli.app import app

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()
DOCUMENTED_FAILURES = {2, 3, 4, 5, 6, 7, 8}
RECORDS = list(simulate(SimulationConfig(n_groups=6, n_samples_per_prompt=2,
                                         median_response_tokens=12, prompt_tokens=3,
                                         tool_tokens=1, seed=9)))  # fmt: skip


def assert_clean_exit(result: Result, folder: Path, output: Path | None = None) -> None:
    """Exit 0 or a documented failure, never a traceback, never a partial output file."""
    assert result.exit_code == 0 or result.exit_code in DOCUMENTED_FAILURES, (
        result.exit_code,
        result.stderr,
        result.exception,
    )
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.stdout + result.stderr
    if result.exit_code != 0:
        assert result.stderr.startswith("Error: ") and result.stderr.count("\n") == 1, result.stderr
    leftovers = [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []
    if output is not None:
        if result.exit_code == 0:
            pl.read_parquet(output)
        else:
            assert not output.exists()


# --------------------------------------------------------------------------- corruption

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(alphabet=st.characters(codec="utf-8"), max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=8,
)
FIELDS = [
    ("group_index",), ("index",), ("tokens",), ("response_length",), ("loss_mask",),
    ("reward",), ("status",), ("metadata",), ("metadata", "parent_traj_id"),
    ("metadata", "segment_index"), ("metadata", "full_versions"), ("metadata", "version_spans"),
    ("metadata", "dressage_end_token_version"), ("metadata", "dressage_return_rollout_id"),
]  # fmt: skip


@st.composite
def mutated_records(draw: st.DrawFn) -> list[dict[str, Any]]:
    """The sample records with some fields dropped or replaced by arbitrary JSON values."""
    records = copy.deepcopy(RECORDS)
    for _ in range(draw(st.integers(1, 4))):
        record = records[draw(st.integers(0, len(records) - 1))]
        path = draw(st.sampled_from(FIELDS))
        parent: Any = record
        for key in path[:-1]:
            parent = parent.get(key) if isinstance(parent, dict) else None
        if not isinstance(parent, dict):
            continue
        if draw(st.booleans()):
            parent.pop(path[-1], None)
        else:
            parent[path[-1]] = draw(json_values)
    return records


def dumps_line(record: dict[str, Any]) -> str:
    return json.dumps(record, allow_nan=True)


@st.composite
def corrupted_bytes(draw: st.DrawFn, data: bytes) -> bytes:
    """Truncate, flip bytes, or splice in control and non-ASCII characters."""
    kind = draw(st.sampled_from(["truncate", "flip", "insert"]))
    if kind == "truncate":
        return data[: draw(st.integers(0, len(data)))]
    buffer = bytearray(data)
    for _ in range(draw(st.integers(1, 8))):
        at = draw(st.integers(0, len(buffer) - 1))
        if kind == "flip":
            buffer[at] ^= draw(st.integers(1, 255))
        else:
            buffer[at:at] = draw(
                st.sampled_from([b"\x00", b"\x1b[31m", "é".encode(), b"\xff", b'"', b"}"])
            )
    return bytes(buffer)


# Damaged and hostile input, signals and closed streams, mostly through subprocesses: the
# slow tier (`make test-slow`, and CI) runs them; `make test` leaves them out.
pytestmark = pytest.mark.slow

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))


@SETTINGS
@given(records=mutated_records(), duplicate_key=st.booleans())
def test_mutated_jsonl_records(
    tmp_path_factory: pytest.TempPathFactory, records: list[Any], duplicate_key: bool
) -> None:
    folder = tmp_path_factory.mktemp("mutated")
    lines = [dumps_line(r) for r in records]
    if duplicate_key:  # JSON allows it; the last value wins, as in every parser we use
        lines[0] = lines[0].replace("{", '{"group_index": "dup", ', 1)
    log = folder / "log.jsonl"
    log.write_text("\n".join(lines) + "\n")
    output = folder / "out.parquet"
    for policy in ("fail", "skip"):
        result = runner.invoke(
            app, ["convert", str(log), "-o", str(output), "--on-bad-record", policy]
        )
        assert_clean_exit(result, folder, output)
        output.unlink(missing_ok=True)
        result = runner.invoke(
            app,
            [
                "replay",
                str(log),
                "-b",
                "2",
                "-k",
                "1",
                "-m",
                "1",
                "--json",
                "--on-bad-record",
                policy,
            ],
        )
        assert_clean_exit(result, folder)
        if result.exit_code == 0:
            json.loads(result.stdout)


def _valid_bytes(kind: str, folder: Path) -> tuple[bytes, str]:
    if kind == "jsonl":
        return ("".join(dumps_line(r) + "\n" for r in RECORDS)).encode(), "log.jsonl"
    if kind == "jsonl.gz":
        return gzip.compress(
            "".join(dumps_line(r) + "\n" for r in RECORDS).encode(), mtime=0
        ), "log.jsonl.gz"
    if kind == "json":
        return json.dumps(RECORDS[0], indent=2).encode(), "0.json"
    if kind == "pt":
        dump_pt({"rollout_id": 0, "samples": RECORDS}, folder / "valid.pt")
        return (folder / "valid.pt").read_bytes(), "rollout_0.pt"
    source = folder / "valid.jsonl"
    write_jsonl(RECORDS, source)
    runner.invoke(app, ["convert", str(source), "-o", str(folder / "valid.parquet")])
    return (folder / "valid.parquet").read_bytes(), "log.parquet"


@pytest.mark.parametrize("kind", ["jsonl", "jsonl.gz", "json", "pt", "parquet"])
def test_corrupted_files_in_every_format(tmp_path: Path, kind: str) -> None:
    data, name = _valid_bytes(kind, tmp_path)

    @SETTINGS
    @given(st.data())
    def check(draws: st.DataObject) -> None:
        corrupted = draws.draw(corrupted_bytes(data))
        folder = tmp_path / "case"
        folder.mkdir(exist_ok=True)
        for leftover in folder.iterdir():
            leftover.unlink()
        log = folder / name
        log.write_bytes(corrupted)
        output = folder / "out.parquet"
        policy = draws.draw(st.sampled_from(["fail", "skip"]))
        result = runner.invoke(
            app, ["convert", str(log), "-o", str(output), "--on-bad-record", policy]
        )
        assert_clean_exit(result, folder, output)
        result = runner.invoke(app, ["inspect", str(log), "--json", "--on-bad-record", policy])
        assert_clean_exit(result, folder)

    check()


def test_a_parquet_column_name_that_is_not_utf8_is_no_internal_error(tmp_path: Path) -> None:
    """Each place a column's name is stored, one byte of it made invalid UTF-8 (hypothesis
    found one in the footer's schema paths that the span check's metadata scan decoded)."""
    data, name = _valid_bytes("parquet", tmp_path)
    places = [i for i in range(len(data)) if data.startswith(b"trajectory_id", i)]
    assert places
    for place in places:
        folder = tmp_path / f"at{place}"
        folder.mkdir()
        log = folder / name
        log.write_bytes(data[: place + 2] + b"\xff" + data[place + 3 :])
        output = folder / "out.parquet"
        assert_clean_exit(
            runner.invoke(app, ["convert", str(log), "-o", str(output)]), folder, output
        )
        assert_clean_exit(runner.invoke(app, ["inspect", str(log), "--json"]), folder)


# --------------------------------------------------------------------------- degenerate logs


def replay_json(tmp_path: Path, records: list[dict[str, Any]], *args: str) -> dict[str, Any]:
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in records))
    result = runner.invoke(app, ["replay", str(log), "--json", *args])
    assert result.exit_code == 0, result.stderr
    summary: dict[str, Any] = json.loads(result.stdout)
    return summary


def test_empty_file(tmp_path: Path) -> None:
    summary = replay_json(tmp_path, [], "-b", "4", "-k", "2", "-m", "1")
    assert summary["groups"]["total"] == 0 and summary["batches"] == {
        "emitted": 0,
        "last_partial": False,
    }
    assert summary["version_gap"] == {"min": None, "mean": None, "max": None}
    assert summary["versions_observed"] == 0
    inspected = runner.invoke(app, ["inspect", str(tmp_path / "log.jsonl"), "--json"])
    assert inspected.exit_code == 0 and json.loads(inspected.stdout)["records"] == 0
    # Without -b: the message names the empty log, not missing trainer steps.
    result = runner.invoke(app, ["replay", str(tmp_path / "log.jsonl")])
    assert result.exit_code == 7
    assert "the log has no records" in result.stderr and "trainer steps" not in result.stderr


def test_one_group(tmp_path: Path) -> None:
    records = [r for r in RECORDS if r["group_index"] == RECORDS[0]["group_index"]]
    summary = replay_json(tmp_path, records, "-b", "4", "-k", "1")
    assert summary["groups"]["total"] == 1
    assert summary["batches"] == {"emitted": 1, "last_partial": True}


def test_no_versions_at_all(tmp_path: Path) -> None:
    records = [{"group_index": i % 3, "metadata": {"parent_traj_id": f"t{i}"}} for i in range(9)]
    summary = replay_json(tmp_path, records, "-b", "2", "-k", "1", "-m", "0")
    assert summary["groups"]["kept"] == 3 and summary["versions_observed"] == 0
    assert summary["version_span"]["unchecked_trajectories"] == 9
    assert any("--field end_version=PATH" in note for note in summary["notes"])


def test_every_label_not_real(tmp_path: Path) -> None:
    records = [
        {"group_index": i, "tokens": [0, 1],
         "metadata": {"parent_traj_id": "t", "full_versions": ["-1", "unknown"],
                      "dressage_end_token_version": " None "}}
        for i in range(4)
    ]  # fmt: skip
    summary = replay_json(tmp_path, records, "-b", "2", "-k", "1", "-m", "0")
    assert summary["groups"]["kept"] == 4 and summary["versions_observed"] == 0
    assert summary["version_span"]["all"]["max"] == 0


def test_batch_larger_than_the_log(tmp_path: Path) -> None:
    summary = replay_json(tmp_path, RECORDS, "-b", "1000")
    assert summary["batches"] == {"emitted": 1, "last_partial": True}
    assert summary["groups"]["kept"] + summary["groups"]["failed"] == summary["groups"]["total"]


def test_single_huge_group(tmp_path: Path) -> None:
    records = [
        {"group_index": 0, "response_length": 3,
         "metadata": {"parent_traj_id": f"t{i}", "dressage_end_token_version": f"v{i % 7}"}}
        for i in range(20_000)
    ]  # fmt: skip
    summary = replay_json(tmp_path, records, "-b", "1", "-k", "7")
    assert summary["groups"] == {**summary["groups"], "total": 1, "kept": 1}
    assert summary["trajectories"]["total"] == 20_000 and summary["version_gap"]["max"] == 6


# --------------------------------------------------------------------------- interruption


@pytest.mark.parametrize(
    ("sent", "code", "said"),
    [(signal.SIGINT, 130, "Interrupted"), (signal.SIGTERM, 143, "Terminated")],
)
def test_interrupted_convert_leaves_nothing(
    tmp_path: Path, sent: signal.Signals, code: int, said: str
) -> None:
    log = tmp_path / "big.jsonl"
    config = SimulationConfig(n_groups=250, n_samples_per_prompt=8, median_response_tokens=3000,
                              tail_sigma=0.2, multi_segment_fraction=0.0, seed=5)  # fmt: skip
    write_jsonl(simulate(config), log)
    output = tmp_path / "out.parquet"
    size = log.stat().st_size
    # A named temporary, to see when the write has begun (an anonymous one has no name;
    # tests/cli/test_killed_writes.py kills that one).
    process = subprocess.Popen(
        [sys.executable, "-m", "cli", "convert", str(log), "-o", str(output), "--quiet"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "DRESSAGE_REPLAY_NO_TMPFILE": "1"},
    )  # fmt: skip
    deadline = time.monotonic() + 120  # a ceiling for a hang (it starts in about a second)
    while not any(p.name.endswith(".tmp") for p in tmp_path.iterdir()):
        assert process.poll() is None, "convert finished before it could be interrupted"
        assert time.monotonic() < deadline
        time.sleep(0.01)
    time.sleep(0.2)  # well inside the write
    process.send_signal(sent)  # SIGTERM: what kill, timeout and job schedulers send
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == code, stderr
    assert "Traceback" not in stderr and f"{said}; no partial output was left" in stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.jsonl"]
    assert log.stat().st_size == size


def negative_value_count(data: bytes, page_offset: int) -> bytes:
    """The Parquet file with the data page at ``page_offset`` claiming a negative number
    of values. Its header is Thrift compact: the DataPageHeader (field 5, a struct; after
    field 3, or field 4 when a CRC is written) starts with num_values, a zigzag varint,
    where setting the low bit turns n into -(n + 1) without changing its length."""
    for marker in (b"\x2c\x15", b"\x1c\x15"):
        at = data.find(marker, page_offset, page_offset + 32)
        if at >= 0:
            damaged = bytearray(data)
            damaged[at + 2] |= 1
            return bytes(damaged)
    raise AssertionError("no data page header found")


@pytest.mark.parametrize("column", ["group_id", "loss_mask_length"])
def test_a_parquet_page_with_a_negative_value_count_is_an_error_not_a_crash(
    tmp_path: Path, column: str
) -> None:
    """polars' own reader aborted the process on such a page (asking for 2^61 bytes);
    found by the fuzz above. In a child process, so that a crash fails only this test."""
    import pyarrow.parquet as pq

    data, _ = _valid_bytes("parquet", tmp_path)
    (tmp_path / "valid.parquet").write_bytes(data)
    row_group = pq.read_metadata(tmp_path / "valid.parquet").row_group(0)
    (offset,) = [
        row_group.column(i).data_page_offset
        for i in range(row_group.num_columns)
        if row_group.column(i).path_in_schema == column
    ]
    log = tmp_path / "damaged.parquet"
    log.write_bytes(negative_value_count(data, offset))
    for command in (["inspect", str(log)], ["replay", str(log), "-b", "2", "-k", "1"]):
        done = subprocess.run(
            [sys.executable, "-m", "cli", *command],
            cwd=ROOT, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 5, done.stderr[-500:]
        assert "negative number of values" in done.stderr
        assert "Traceback" not in done.stderr


def test_parquet_metadata_that_is_not_utf8_is_passed_over(tmp_path: Path) -> None:
    """A damaged metadata key (as the fuzz above made) once made polars panic, printing
    a Rust backtrace, when pyarrow's table was handed over; the data itself is fine."""
    import pyarrow.parquet as pq

    data, _ = _valid_bytes("parquet", tmp_path)
    (tmp_path / "valid.parquet").write_bytes(data)
    table = pq.read_table(tmp_path / "valid.parquet")
    log = tmp_path / "odd.parquet"
    pq.write_table(table.replace_schema_metadata({b"ARR\xfbW:schema": b"\xff"}), log)
    result = runner.invoke(app, ["replay", str(log), "-b", "2", "-k", "1", "--json"])
    assert result.exit_code == 0, result.stderr
    assert "panicked" not in result.stderr
    assert json.loads(result.stdout)["groups"]["total"] == 6


# --------------------------------------------------------------------------- unreadable inputs


def without_read_permission() -> list[str] | None:
    """The command prefix under which a file's permissions hold: none for a user, and for
    root (who reads anything) setpriv dropping the overriding capabilities; None when
    root has no setpriv."""
    import os
    import shutil

    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        return None
    caps = "-dac_override,-dac_read_search"
    return ["setpriv", "--bounding-set", caps, "--inh-caps", caps, "--"]


@pytest.mark.parametrize(
    "kind", ["jsonl", "pt", "parquet", "no extension", "folder", "unsearchable folder", "hidden"]
)
def test_an_unreadable_input_is_exit_3_and_can_be_skipped(tmp_path: Path, kind: str) -> None:
    """Once click's usage error (exit 2), or a 'bad record' (exit 5), or for a folder (or a
    file in a folder that may not be searched) an internal error."""
    prefix = without_read_permission()
    if prefix is None:
        pytest.skip("running as root without setpriv: permissions cannot be taken away")
    data, name = _valid_bytes(kind if kind in ("pt", "parquet") else "jsonl", tmp_path)
    if kind == "no extension":
        name = "log"
    folder = kind in ("folder", "unsearchable folder", "hidden")
    locked = tmp_path / ("locked" if folder else name)
    if folder:
        locked.mkdir()
        (locked / name).write_bytes(data)
    else:
        locked.write_bytes(data)
    locked.chmod({"unsearchable folder": 0o644, "hidden": 0o700}.get(kind, 0))
    target = locked / name if kind == "hidden" else locked
    if kind == "hidden":  # root owns it: as root without the override, it may not be entered
        prefix = [*prefix[:-1], "--reuid", "65534", "--regid", "65534", "--clear-groups", "--"]
        # That user must be able to run the tool from this clone: not so when the clone
        # lives in a folder other users cannot enter (a private home, mktemp -d).
        probe = [*prefix, sys.executable, "-c", "import cli, analysis"]
        if subprocess.run(probe, cwd="/", capture_output=True, timeout=60).returncode != 0:
            pytest.skip("uid 65534 cannot run the tool from where this clone lives")
    try:
        command = [*prefix, sys.executable, "-m", "cli", "replay", str(target), "-b", "2"]
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert done.returncode == 3, done.stderr
        assert done.stderr.count("\n") == 1 and "Permission denied" in done.stderr
        assert str(target) in done.stderr and "; check " in done.stderr
        if not folder:  # a named file is skipped like a bad one
            other = tmp_path / "other.jsonl"
            write_jsonl(RECORDS, other)
            compare = [
                *prefix,
                sys.executable,
                "-m",
                "cli",
                "compare",
                str(target),
                str(other),
            ]
            done = subprocess.run(compare, cwd=ROOT, capture_output=True, text=True, timeout=120)
            assert done.returncode == 3, done.stderr  # was click's usage error (exit 2)
            skip = ["--on-bad-record", "skip", "--json"]
            done = subprocess.run(
                [*command, str(other), *skip], cwd=ROOT, capture_output=True, text=True, timeout=120
            )
            assert done.returncode == 0, done.stderr
            assert json.loads(done.stdout)["skipped"]["by_reason"] == {"unreadable file": 1}
    finally:
        locked.chmod(0o755)


# --------------------------------------------------------------------------- canonical files


def _valid_canonical(tmp_path: Path) -> tuple[Path, Any]:
    """A canonical Parquet file of RECORDS, as convert writes it, and its pyarrow table."""
    import pyarrow.parquet as pq

    data, _ = _valid_bytes("parquet", tmp_path)
    valid = tmp_path / "valid.parquet"
    valid.write_bytes(data)
    return valid, pq.read_table(valid)


def _with_column(table: Any, name: str, values: Any) -> Any:
    return table.set_column(table.schema.get_field_index(name), name, values)


def _with_span_fields(table: Any, fields: dict[str, Any]) -> Any:
    """The table with its span structs made of these fields (name: array of the values)."""
    import pyarrow as pa

    spans = table.column("version_spans").combine_chunks()
    values = pa.StructArray.from_arrays(list(fields.values()), names=list(fields))
    return _with_column(table, "version_spans", type(spans).from_arrays(spans.offsets, values))


def _span_field(table: Any, name: str) -> Any:
    return table.column("version_spans").combine_chunks().values.field(name)


def _written(table: Any, path: Path) -> Path:
    """The table written to ``path`` as Parquet or Arrow IPC, by its extension."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if path.suffix == ".parquet":
        pq.write_table(table, path)
    else:
        with pa.ipc.new_file(path, table.schema) as writer:
            writer.write_table(table)
    return path


def _mistyped(table: Any, case: str) -> Any:
    """The canonical table with one column changed as a damaged or foreign writer might."""
    import decimal

    import pyarrow as pa

    rows = table.num_rows
    if case == "decimal256 ids":  # made polars panic, printing a Rust backtrace
        ids = [decimal.Decimal(i) for i in range(rows)]
        return _with_column(table, "group_id", pa.array(ids, pa.decimal256(76, 0)))
    if case == "text where a number belongs":  # an internal error
        return _with_column(table, "response_length", pa.array(["abc"] * rows))
    if case == "a struct where a number belongs":  # failed later, in a sum
        return _with_column(table, "response_length", pa.array([{"a": 1}] * rows))
    if case == "unsigned 2^64 - 1":
        return _with_column(table, "trainer_step", pa.array([2**64 - 1] * rows, pa.uint64()))
    if case == "span fields renamed":  # read silently as spans without versions
        fields = ("start", "end", "version")
        return _with_span_fields(
            table, {new: _span_field(table, old) for new, old in zip("abc", fields, strict=True)}
        )
    # Bytes that are not UTF-8, stored as strings (pyarrow writes them without a check):
    # polars aborted the whole process on them.
    bad = pa.array([b"1\xff"] * rows, pa.binary()).view(pa.string())
    return _with_column(table, "group_id" if case == "ids not UTF-8" else "end_version", bad)


MISTYPED = [
    "decimal256 ids",
    "text where a number belongs",
    "a struct where a number belongs",
    "unsigned 2^64 - 1",
    "span fields renamed",
    "ids not UTF-8",
    "labels not UTF-8",
]


in_parquet_and_arrow = pytest.mark.parametrize("suffix", [".parquet", ".arrow"])


@in_parquet_and_arrow
@pytest.mark.parametrize("case", MISTYPED)
def test_a_canonical_file_with_a_column_of_the_wrong_kind_is_a_bad_file(
    tmp_path: Path, case: str, suffix: str
) -> None:
    """Found by a fuzz of structured damage. In a child process: some aborted it."""
    _, table = _valid_canonical(tmp_path)
    log = _written(_mistyped(table, case), tmp_path / f"odd{suffix}")
    for command in (["inspect", str(log)], ["replay", str(log), "-b", "2", "-k", "1"]):
        done = subprocess.run(
            [sys.executable, "-m", "cli", *command],
            cwd=ROOT, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 5, done.stderr[-800:]
        assert done.stderr.startswith("Error: ") and done.stderr.count("\n") == 1, done.stderr
        assert str(log) in done.stderr and "panicked" not in done.stderr


def test_sigterm_unwinds_once_and_is_then_ignored_during_the_clean_up() -> None:
    """A second SIGTERM, while outputs being written are removed, once cut that short."""
    import os

    from cli import signals as cli

    before = signal.getsignal(signal.SIGTERM)
    try:
        cli.on_sigterm_unwind()
        with pytest.raises(cli.Terminated):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)  # the handler runs at the next bytecode
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN and cli.was_terminated()
    finally:
        signal.signal(signal.SIGTERM, before)
        cli._terminated = False


def test_an_interrupt_typer_ends_itself_is_still_reported(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """typer turns an interrupt that comes while it parses options into a quiet 130."""
    from cli import app as entry, errors, signals

    monkeypatch.setattr(entry, "app", lambda **_: 130)
    monkeypatch.setattr(entry, "on_sigterm_unwind", lambda: None)
    for terminated, code, said in ((False, 130, "Interrupted"), (True, 143, "Terminated")):
        monkeypatch.setattr(signals, "_terminated", terminated)
        monkeypatch.setattr(errors, "_interrupt_said", False)
        with pytest.raises(SystemExit) as exit_:
            entry.main()
        assert exit_.value.code == code
        assert capsys.readouterr().err == f"{said}; no partial output was left.\n"


LEGITIMATE = [
    "polars Categorical ids",
    "pyarrow dictionary labels",
    "dictionary labels in the spans",
    "integers stored as floats",
    "int32 and large_string",
    "span fields in another order",
]


def _other_layout(valid: Path, table: Any, case: str) -> Any:
    """The canonical table in another layout that a writer may legitimately choose."""
    import pyarrow as pa

    if case == "polars Categorical ids":
        return (
            pl.read_parquet(valid).with_columns(pl.col("group_id").cast(pl.Categorical)).to_arrow()
        )
    if case == "pyarrow dictionary labels":
        return _with_column(table, "end_version", table.column("end_version").dictionary_encode())
    if case == "dictionary labels in the spans":
        fields = {name: _span_field(table, name) for name in ("start", "end", "version")}
        return _with_span_fields(
            table, {**fields, "version": fields["version"].dictionary_encode()}
        )
    if case == "integers stored as floats":  # as pandas writes integers with nulls
        return _with_column(
            table, "segment_index", table.column("segment_index").cast(pa.float64())
        )
    if case == "span fields in another order":
        return _with_span_fields(
            table, {name: _span_field(table, name) for name in ("version", "end", "start")}
        )
    table = _with_column(table, "trainer_step", table.column("trainer_step").cast(pa.int32()))
    return _with_column(table, "group_id", table.column("group_id").cast(pa.large_string()))


@in_parquet_and_arrow
@pytest.mark.parametrize("case", LEGITIMATE)
def test_canonical_files_in_other_legitimate_layouts_read_the_same(
    tmp_path: Path, case: str, suffix: str
) -> None:
    """The column-type check once refused the first four (a review found it)."""
    valid, table = _valid_canonical(tmp_path)
    log = _written(_other_layout(valid, table, case), tmp_path / f"other{suffix}")
    summaries = []
    for path in (valid, log):
        result = runner.invoke(app, ["replay", str(path), "-b", "2", "-k", "1", "--json"])
        assert result.exit_code == 0, result.stderr
        summaries.append({k: v for k, v in json.loads(result.stdout).items() if k != "inputs"})
    assert summaries[0] == summaries[1]


# --------------------------------------------------------------------------- standard output


def _log(folder: Path) -> Path:
    """A small JSONL log of RECORDS in ``folder``."""
    log = folder / "log.jsonl"
    write_jsonl(RECORDS, log)
    return log


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "cli", *args]


def _buffered() -> dict[str, str]:
    # Unbuffered, CPython drops what a pipe does not take without an error (a short
    # write is not retried), so the reader's going would not be seen at all.
    return {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}


@pytest.mark.parametrize(
    "args",
    [
        ["sweep", "-k", "0..40", "-m", "none,0..20"],  # a rich table
        ["sweep", "-k", "0..40", "-m", "none,0..20", "--json"],
        ["--help"],  # typer's own output
    ],
    ids=["table", "json", "help"],
)
def test_a_reader_that_goes_early_ends_the_command_quietly(tmp_path: Path, args: list[str]) -> None:
    log = _log(tmp_path)
    command = _cli(*args[:1], str(log), *args[1:]) if args[0] != "--help" else _cli(*args)
    process = subprocess.Popen(
        command, cwd=ROOT, env=_buffered(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.read(20)  # like `| head -c 20`
    process.stdout.close()
    err = process.stderr.read().decode()
    # 128 + SIGPIPE, not 1 ("internal error"); the help (2 KB) may fit the pipe whole
    # before the reader goes, and then it ends as usual
    ends = (0, 141) if args == ["--help"] else (141,)
    assert process.wait(timeout=120) in ends, err
    assert err == ""


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("json_output", [False, True])
def test_results_that_do_not_fit_on_stdout_are_an_output_error(
    tmp_path: Path, json_output: bool
) -> None:
    log = _log(tmp_path)
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            _cli("replay", str(log), "-b", "2", *(["--json"] if json_output else [])),
            cwd=ROOT, env=_buffered(), stdout=full, stderr=subprocess.PIPE, text=True, timeout=120,
        )  # fmt: skip
    assert done.returncode == 8
    assert done.stderr == (
        "Error: standard output: cannot write the results (No space left on device); "
        "write them where there is room\n"
    )


def test_version() -> None:
    from importlib.metadata import version

    result = runner.invoke(app, ["--version"])
    assert (result.exit_code, result.stdout) == (
        0,
        f"dressage-replay {version('dressage-replay')}\n",
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["replay", "--decisions", "d.xlsx"], "d.xlsx: unknown output extension .xlsx"),
        (["replay", "--decisions", "missing/d.csv"], "missing does not exist"),
        (["replay", "--decisions", "afile/d.csv"], "afile is a file, not a folder"),
        (["replay", "--decisions", "adir"], "adir: is a folder; give a file name"),
        (["sweep", "-o", "s.txt"], "s.txt: unknown output extension .txt"),
        (["plot", "sweep", "-o", "x.gif"], "x.gif: unknown figure extension .gif"),
        (["report", "-o", "missing/r.html"], "missing does not exist"),
        (["report", "-o", "r.txt"], "r.txt: unknown report extension .txt"),
    ],
)
def test_an_output_that_cannot_be_written_is_refused_before_the_log_is_read(
    tmp_path: Path, args: list[str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The log is bad too: were it read first, the error would be its (exit 5), not the
    # output's (exit 8), after minutes of reading on a large log.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("")
    (tmp_path / "adir").mkdir()
    (tmp_path / "log.jsonl").write_text("{not json\n")
    command, *rest = args
    if command == "plot":
        command, kind, *rest = args
        result = runner.invoke(app, [command, kind, "log.jsonl", *rest])
    else:
        result = runner.invoke(app, [command, "log.jsonl", *rest])
    assert result.exit_code == 8, result.stderr
    assert message in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir", "afile", "log.jsonl"]


def test_the_same_run_given_twice_is_warned_about(tmp_path: Path) -> None:
    """As JSONL and as dumps, say: every record is counted twice, silently before."""
    log, dumps = tmp_path / "run.jsonl", tmp_path / "dumps"
    write_jsonl(RECORDS, log)
    dumps.mkdir()
    from analysis.output.raw_logs import write_pt_dumps

    write_pt_dumps(RECORDS, dumps)
    once = runner.invoke(app, ["replay", str(log), "-b", "2"])
    assert once.exit_code == 0 and "share a (group, trajectory, segment)" not in once.stderr
    twice = runner.invoke(app, ["replay", str(log), str(dumps), "-b", "2"])
    assert twice.exit_code == 0
    assert f"warning: {2 * len(RECORDS)} records share a (group, trajectory, segment)" in (
        " ".join(twice.stderr.split())
    )


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("args", [["--version"], ["--help"], ["sweep", "--help"]])
def test_typer_own_output_on_a_full_disk_is_exit_8_too(args: list[str]) -> None:
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            _cli(*args), cwd=ROOT, env=_buffered(), stdout=full, stderr=subprocess.PIPE,
            text=True, timeout=120,
        )  # fmt: skip
    assert (done.returncode, done.stderr) == (
        8,
        "Error: standard output: cannot write (No space left on device)\n",
    )


@pytest.mark.parametrize("json_output", [False, True])
def test_results_with_standard_output_closed_are_an_output_error(
    tmp_path: Path, json_output: bool
) -> None:
    log = _log(tmp_path)
    done = subprocess.run(
        _cli("sweep", str(log), "-b", "2", *(["--json"] if json_output else [])),
        cwd=ROOT, stderr=subprocess.PIPE, text=True, timeout=120,
        preexec_fn=lambda: os.close(1),  # started with `>&-`
    )  # fmt: skip
    assert done.returncode == 8, done.stderr
    assert done.stderr.startswith("Error: standard output is closed")


def test_running_out_of_memory_is_its_own_exit_code(monkeypatch: pytest.MonkeyPatch) -> None:
    """A MemoryError (a sweep or report over hundreds of thousands of versions can get
    there within every input limit) ends in one line and exit 10, not as an internal
    error (exit 1)."""
    import analysis
    from cli.app import app

    def exhausted(*args: object, **kwargs: object) -> None:
        raise MemoryError

    monkeypatch.setattr(analysis, "sweep_log", exhausted)  # what the command calls
    sample = str(Path(__file__).parents[2] / "sample_data" / "rollouts.jsonl")
    result = CliRunner().invoke(app, ["sweep", sample, "-k", "1", "-m", "1"])
    assert result.exit_code == 10 == int(analysis.ExitCode.OUT_OF_MEMORY), result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("Error: out of memory:") and "internal error" not in line
