"""Dressage's artifact format: an artifact folder (``<instance>/<session>/samples/<segment>.json``,
or a run folder's ``traj_payload/`` and ``traj_err/``) read whole, in completion order; or
one ``.json`` document (an artifact, or a list of records)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from analysis.errors import Message, setting
from analysis.formats.dressage.artifacts import read_artifact_folder
from analysis.formats.frames import FolderTable
from analysis.formats.reading import Format, RawRecords, Reading
from analysis.formats.source import Source
from analysis.formats.text.jsonl import read_json_file


@dataclass(frozen=True)
class ArtifactFormat(Format):
    def read(
        self, source: Source, reading: Reading, before: int, total: int
    ) -> Iterator[pl.DataFrame]:
        if source.folder:
            yield from self._folder(source, reading, before, total)
        else:
            yield from reading.records(source, self._document(source, reading))

    @staticmethod
    def _document(source: Source, reading: Reading) -> RawRecords:
        document = read_json_file(source.path, reading.options.limits)
        if isinstance(document, list):
            for number, record in enumerate(document, start=1):
                yield f"{source.path}: record {number}", number, None, record
        else:
            yield source.path.as_posix(), 1, None, document
        return 0

    @staticmethod
    def _folder(
        source: Source, reading: Reading, before: int, total: int
    ) -> Iterator[pl.DataFrame]:
        yield from reading.flush(str(source.path))
        options, report = reading.options, reading.report
        within = reading.within(before, total)  # instance folders: parts of this source

        extra = options.extra_fields
        folder = FolderTable(extra, where=str(source.path))
        ties: list[str] = []
        files, warnings = read_artifact_folder(
            source.path, fields=options.fields, extra=extra, on_chunk=folder.take,
            progress=within, tie_warnings=ties, limits=options.limits,
        )  # fmt: skip
        report.sources.append(dataclasses.replace(source, files=files))
        report.warnings += warnings
        for problem in folder.errors_in_order():
            reading.skip_or_raise(problem)
        ordered = folder.table()
        if ordered is not None:
            if not folder.by_completion:
                untimed = f"{folder.untimed:,} of {ordered.height:,} records"
                report.warnings += [_by_modification_time(source.path, untimed), *ties]
            yield ordered


def _by_modification_time(folder: Path, untimed: str) -> Message:
    """Artifact files ordered by modification time: a copy or a checkout reorders them."""
    return Message(
        f"{folder}: {untimed} carry no completion time "
        "(metadata.proxy_extra_info.timestamp), so the artifact files arrive in order of "
        "modification time, which a copy or a checkout changes; pass "
        + setting("order_by")
        + " with a completion-time field if the log has one"
    )


FORMAT = ArtifactFormat(
    name="artifacts",
    described="a Dressage artifact file",
    endings=(".json",),
    folder_rank=1,  # an artifact tree, found by its layout (discover), not by its files' names
)

FORMATS = (FORMAT,)
