"""Every format ``simulate`` writes streams: a writer lets each record go once it is
written, whatever the number of records (issue 17, target 3; the bench measures memory)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import analysis
from analysis.formats.load import records_to_table
from analysis.output.raw_logs import SPANS_FIRST, write_canonical_parquet, write_log
from analysis.simulation.parameters import SimulationConfig
from analysis.simulation.simulator import simulate

CONFIG = SimulationConfig(
    n_groups=120, n_samples_per_prompt=4, max_active_groups=8, batch_groups=4,
    median_response_tokens=30, max_response_tokens=200, abort_fraction=0.05, seed=5,
)  # fmt: skip


class Alive:
    """Counts the records handed out and not yet freed."""

    current: Alive | None = None

    def __init__(self) -> None:
        self.now = self.most = 0
        Alive.current = self

    def records(self, records: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for record in records:
            self.now += 1
            self.most = max(self.most, self.now)
            yield Tracked(record)


class Tracked(dict[str, Any]):
    """A record that tells :class:`Alive` when it is freed (module level: it is pickled)."""

    def __del__(self) -> None:
        if Alive.current is not None:
            Alive.current.now -= 1


@pytest.mark.parametrize(
    ("name", "log_format", "most"),
    [
        ("log.jsonl", "jsonl", 2),
        ("log.jsonl.gz", "jsonl", 2),
        ("log.parquet", "parquet", 2),
        ("run", "artifacts", 40),  # one trajectory's segments at most
        ("dumps", "pt", 80),  # one trainer step's records: B groups of samples
    ],
)
def test_writers_hold_few_records(tmp_path: Path, name: str, log_format: str, most: int) -> None:
    alive = Alive()
    count = write_log(alive.records(simulate(CONFIG)), tmp_path / name, log_format)
    assert count > 400
    assert alive.most <= most, f"{alive.most} records held at once"


def test_the_check_can_fail(tmp_path: Path) -> None:
    """A writer that keeps the records is caught."""
    alive = Alive()
    kept = list(alive.records(simulate(CONFIG)))
    assert alive.most == len(kept) > 400


@pytest.mark.parametrize("chunk", [7, 100, 20_000])
def test_parquet_parts_are_the_table_of_the_records(tmp_path: Path, chunk: int) -> None:
    """Streamed a part at a time, the canonical Parquet is the table the records give,
    in parts of ``chunk`` rows."""
    import pyarrow.parquet as pq

    records = list(simulate(CONFIG))
    path = tmp_path / "log.parquet"
    assert write_canonical_parquet(iter(records), path, chunk_records=chunk, fields=SPANS_FIRST)
    expected = pl.concat(
        records_to_table(records[i : i + chunk], fields=SPANS_FIRST, source=str(path),
                         first_record=1 + i)
        for i in range(0, len(records), chunk)
    )  # fmt: skip
    assert pl.read_parquet(path).equals(expected)
    metadata = pq.ParquetFile(path).metadata
    sizes = [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)]
    assert sizes == [min(chunk, len(records) - i) for i in range(0, len(records), chunk)]
    assert analysis.load_logs([path]).height == len(records)


def test_no_records_still_write_an_empty_canonical_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.parquet"
    assert write_canonical_parquet(iter([]), path) == 0
    assert pl.read_parquet(path).height == 0
