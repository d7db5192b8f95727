"""What a load saw besides the records: the sources read, what was skipped and why, warnings."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from analysis.errors import Message, ReplayError
from analysis.formats.source import Source

_SKIP_REASONS = {
    "LogFormatError": "bad record",
    "DamagedFileError": "damaged file",
    "LimitError": "damaged file",
    "MissingFieldError": "missing field",
    "InputNotFoundError": "unreadable file",
}
"""Why something was skipped, by error (the keys of ``skipped`` in ``--json``)."""
SKIP_REASON_NOUNS = {
    "bad record": ("bad record", "bad records"),
    "damaged file": ("damaged file", "damaged files"),
    "missing field": ("record missing a field", "records missing a field"),
    "unreadable file": ("unreadable file", "unreadable files"),
}
"""Each reason as the thing skipped, singular and plural, for the warning."""


@dataclass
class LoadReport:
    """What loading saw besides the records: formats, skipped records, warnings."""

    sources: list[Source] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
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
        reason = _SKIP_REASONS.get(type(error).__name__, "bad record")
        self.skipped[reason] += 1
        if len(self.skipped_where) < 5:
            self.skipped_where.append(Message(error.raw))
