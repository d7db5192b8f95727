"""What a load saw besides the records: the sources read, what was skipped and why, warnings."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from analysis.errors import ReplayError, SkipReason
from analysis.formats.source import Source


@dataclass
class LoadReport:
    """What loading saw besides the records: formats, skipped records, warnings."""

    sources: list[Source] = field(default_factory=list)
    skipped: Counter[SkipReason] = field(default_factory=Counter)
    """How many were skipped, by reason (the keys of ``skipped`` in ``--json``)."""
    skipped_where: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    converted_from: list[str] = field(default_factory=list)
    """The formats converted files (Parquet/Arrow) were read from, as their metadata
    says (``analysis.formats.canonical.reader.source_formats``), each once."""

    @property
    def formats(self) -> list[str]:
        return sorted({s.format for s in self.sources})

    @property
    def files(self) -> int:
        """How many input files were read (every segment file of an artifact folder counts)."""
        return sum(source.files for source in self.sources)

    def skip(self, error: ReplayError) -> None:
        self.skipped[error.skip_reason] += 1
        if len(self.skipped_where) < 5:
            self.skipped_where.append(error.message)
