"""What an untrusted pickle may take to read and build is held to ``max_pickle_bytes``
(issue 18): a deflated data.pkl of 3.6 MB, inflating within ``max_inflation``, built 30
million floats, 1.6 GB."""

from __future__ import annotations

import base64
import os
import pickle
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests import hostile


def floats_pt(path: Path, floats: int, pad_bytes: int) -> Path:
    """A torch.save-shaped archive whose deflated data.pkl holds one sample of ``floats``
    log-probs (two values, alternating: they deflate a thousand times) beside
    ``pad_bytes`` of random text (so the whole inflates within max_inflation)."""

    def text(value: str) -> bytes:
        raw = value.encode()
        return b"X" + len(raw).to_bytes(4, "little") + raw

    pad = base64.b64encode(os.urandom(pad_bytes)).decode()
    values = [b"G" + struct.pack(">d", -0.5), b"G" + struct.pack(">d", -0.25)]
    batch = b"(" + b"".join(values[i % 2] for i in range(1000)) + b"e"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        with archive.open("archive/data.pkl", "w", force_zip64=True) as member:
            member.write(
                b"\x80\x02}(" + text("rollout_id") + b"K\x00" + text("samples") + b"](}("
                + text("group_index") + b"K\x00" + text("index") + b"K\x00"
                + text("metadata") + b"}(" + text("parent_traj_id") + text("t") + b"u"
                + text("pad") + text(pad) + text("rollout_log_probs") + b"]"
            )  # fmt: skip
            for _ in range(floats // 1000):
                member.write(batch)
            member.write(b"ueu.")
        archive.writestr("archive/version", b"3\n")
    return path


BUDGET_RUN = """
import resource, sys
from pathlib import Path
import analysis
from analysis.formats.pickled import pickle_guard
from analysis.formats.pickled.pickles import load_pickled

path = Path(sys.argv[1])
before = resource.getrlimit(resource.RLIMIT_AS)
with pickle_guard.memory_budget(1 << 20) as held:
    assert held and resource.getrlimit(resource.RLIMIT_AS)[0] != before[0]  # (Linux)
try:
    load_pickled(path, limits=analysis.Limits(max_pickle_bytes=8 << 20))
except analysis.errors.LogFormatError as error:
    print(error)
assert resource.getrlimit(resource.RLIMIT_AS) == before  # put back after it
print(len(load_pickled(path)["samples"][0]))  # within the default
"""


def test_a_pickle_past_the_memory_budget_is_refused(tmp_path: Path) -> None:
    """In a process of its own: the budget holds new mappings, and a long-lived process
    (this one) may have freed memory to build into."""
    path = tmp_path / "0.pkl"
    path.write_bytes(
        pickle.dumps({"rollout_id": 0, "samples": [[0.5 + i for i in range(400_000)]]})
    )
    done = subprocess.run(
        [sys.executable, "-c", BUDGET_RUN, str(path)], cwd=hostile.ROOT, capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    refused, count = done.stdout.splitlines()
    assert "0.pkl: " in refused and "max_pickle_bytes=8,388,608 " in refused
    assert count == "400000"


@pytest.mark.slow
def test_a_deflated_dump_of_thirty_million_floats_is_refused(tmp_path: Path) -> None:
    path = floats_pt(tmp_path / "0.pt", 30_000_000, 3_000_000)
    assert path.stat().st_size < 4 << 20
    run = hostile.run_bounded("inspect", str(path))
    assert run.code == 5, run.stderr
    assert run.stderr.startswith("Error: ") and run.stderr.count("\n") == 1, run.stderr
    assert "--limit max_pickle_bytes=" in run.stderr
    assert run.peak_mb < 1024 and run.cpu_seconds < 15, run
