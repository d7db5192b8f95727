"""A canonical file whose rows need more memory than the process can have is refused
before it is read (exit 10): reading on, polars' allocator aborted the process (exit 134)
once an address-space limit was reached (a 186 MB Arrow file of 5 million rows)."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import analysis
from analysis.errors import ExitCode, NoRoomError
from tests import hostile

canonical = importlib.import_module("analysis.formats.canonical.reader")


@pytest.mark.parametrize("suffix", [".parquet", ".arrow"])
def test_rows_past_the_memory_left_are_refused_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suffix: str
) -> None:
    table = analysis.load_logs(["sample_data/rollouts.jsonl"])
    path = tmp_path / f"log{suffix}"
    table.write_parquet(path) if suffix == ".parquet" else table.write_ipc(path)
    need = table.height * canonical.ROW_BYTES
    monkeypatch.setattr(canonical, "memory_room", lambda: need)
    assert analysis.load_logs([path]).height == table.height  # just fits
    monkeypatch.setattr(canonical, "memory_room", lambda: need - 1)
    with pytest.raises(
        NoRoomError, match=rf"log{suffix}: its {table.height:,} rows need"
    ) as raised:
        analysis.load_logs([path])
    assert raised.value.exit_code == ExitCode.OUT_OF_MEMORY and int(ExitCode.OUT_OF_MEMORY) == 10


ROOM = """
import resource, sys
from analysis.table.limits import memory_room
with open("/proc/self/statm") as statm:
    mapped = int(statm.read().split()[0]) * resource.getpagesize()
resource.setrlimit(resource.RLIMIT_AS, (mapped + (300 << 20), resource.getrlimit(resource.RLIMIT_AS)[1]))
print(memory_room() >> 20)
"""


def test_the_room_is_what_the_address_space_limit_leaves() -> None:
    done = subprocess.run(
        [sys.executable, "-c", ROOM], cwd=hostile.ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert 250 <= int(done.stdout) <= 300
