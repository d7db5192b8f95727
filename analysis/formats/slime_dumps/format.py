"""The slime dump format: ``torch.save(dict(rollout_id=..., samples=[...]))`` files (or bare
pickles), read without trusting them and put in rollout order."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import polars as pl

from analysis.errors import LogFormatError, UnsafePickleError
from analysis.formats.pickled.pickles import ZIP_MAGIC
from analysis.formats.reading import Format, RawRecords, Reading
from analysis.formats.slime_dumps.reader import dump_rollout_id, dump_samples, order_dumps
from analysis.formats.source import Source, unreadable_error


@dataclass(frozen=True)
class DumpFormat(Format):
    def arrange(self, sources: list[Source], reading: Reading) -> list[Source]:
        """Every dump's ``rollout_id`` (from its first bytes when it can), then each run
        of consecutive dumps in that order: their order is inside them."""
        ids = reading.held.setdefault(self.name, {})
        options = reading.options
        for source in [s for s in sources if s.format == self.name]:
            if (unreadable := unreadable_error(source.path)) is not None:
                reading.skip_or_raise(unreadable)
                continue
            try:
                ids[source.path] = dump_rollout_id(
                    source.path, trust_pickle=options.trust_pickle, limits=options.limits
                )
            except UnsafePickleError:
                raise  # never skipped: the user must decide whether to trust the file
            except LogFormatError as error:
                reading.skip_or_raise(error)
        read = [s for s in sources if s.format != self.name or s.path in ids]
        return order_dumps(read, ids)

    def opened_on_arrival(self) -> bool:
        return True

    def read(
        self, source: Source, reading: Reading, before: int, total: int
    ) -> Iterator[pl.DataFrame]:
        yield from reading.records(source, self._samples(source, reading))

    def _samples(self, source: Source, reading: Reading) -> RawRecords:
        # Read now, in rollout_id order: one dump's samples in memory at a time.
        options, known = reading.options, reading.held[self.name][source.path]
        rollout_id, samples = dump_samples(
            source.path, trust_pickle=options.trust_pickle, limits=options.limits
        )
        if rollout_id != known:  # only a dict that repeats the key
            raise LogFormatError(
                f"{source.path}: the dump gives rollout_id twice ({known} and {rollout_id}); "
                "save it with one"
            )
        for number, record in enumerate(samples, start=1):
            yield f"{source.path}: sample {number}", number, rollout_id, record
        return 0


FORMAT = DumpFormat(
    name="pt",
    described="a slime .pt dump",
    endings=(".pt", ".pkl", ".pickle"),
    folder_kind="slime dump",
    folder_rank=0,
    magic=(ZIP_MAGIC, b"\x80"),
)

FORMATS = (FORMAT,)
