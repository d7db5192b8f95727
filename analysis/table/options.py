"""How logs are read: one frozen set of read options, shared by every reader and command."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from analysis.errors import ConfigError, setting
from analysis.table.fieldmap import FieldMap
from analysis.table.limits import DEFAULT_LIMITS, LIMIT_NAMES, Limits
from analysis.table.schema import CANONICAL_COLUMNS

OnBadRecord = Literal["fail", "skip"]


@dataclass(frozen=True)
class ReadOptions:
    """How to read logs into the canonical table, validated on construction.

    Examples
    --------
    >>> ReadOptions(fields=FieldMap.parse(["group=metadata.prompt_id"]), on_bad_record="skip")
    ... # doctest: +ELLIPSIS
    ReadOptions(fields=FieldMap(group=('metadata.prompt_id',), ...), ..., on_bad_record='skip', ...)
    """

    fields: FieldMap = field(default_factory=FieldMap)
    """Where each meaning is found in a raw record (:meth:`FieldMap.parse`)."""
    extra_fields: tuple[str, ...] = ()
    """Dotted paths kept as extra columns of the same name (an ordering field)."""
    on_bad_record: OnBadRecord = "fail"
    """``fail``: stop at the first bad record or damaged file; ``skip``: skip and count it."""
    trust_pickle: bool = False
    """Unpickle dumps fully (runs code from the file); else the safe reader."""
    include_eval: bool = False
    """Also read a folder's evaluation dumps (``eval_<N>.pt``), as groups of their own."""
    columns: tuple[str, ...] | None = None
    """Keep only these canonical columns (all when None); Parquet and Arrow read no others."""
    progress: Callable[[int, int], None] | None = field(default=None, compare=False)
    """Called as ``progress(done, total)`` while reading."""
    chunk_records: int = 50_000
    """Largest number of raw records turned into one chunk of the table."""
    log_format: str | None = None
    """Read every file given, and a folder's JSONL files, as this format (``jsonl``,
    ``prime-rl``, ``areal``, ``verl``, ``nemo-rl``, ...) instead of the one found
    (docs/semantics.md, "Other systems' logs")."""
    # Limits that protect memory from hostile input (analysis.table.limits; docs/pages/reference/limits.md).
    max_record_bytes: int = DEFAULT_LIMITS.max_record_bytes
    """Largest JSONL line or JSON document, in bytes."""
    max_inflation: int = DEFAULT_LIMITS.max_inflation
    """Largest decompressed/compressed ratio of a gzip stream or a deflated zip member."""
    max_pickle_values: int = DEFAULT_LIMITS.max_pickle_values
    """Most values one pickle may hold, each object counted every time it is referenced."""
    max_pickle_reuse: int = DEFAULT_LIMITS.max_pickle_reuse
    """Most values a pickle may hold per byte of it (past a million), counted at every reference."""
    max_pickle_bytes: int = DEFAULT_LIMITS.max_pickle_bytes
    """Most memory the unpickler may take to build one pickle, in bytes."""
    max_depth: int = DEFAULT_LIMITS.max_depth
    """Deepest nesting of containers in a pickle."""
    max_spans: int = DEFAULT_LIMITS.max_spans
    """Most runs of token versions (spans) in one record."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "extra_fields", tuple(self.extra_fields))
        if self.columns is not None:
            object.__setattr__(self, "columns", tuple(self.columns))
        if self.on_bad_record not in ("fail", "skip"):
            raise ConfigError(
                setting("on_bad_record") + ": expected one of fail, skip "
                f"(found {self.on_bad_record!r})"
            )
        unknown = [name for name in self.columns or () if name not in CANONICAL_COLUMNS]
        if unknown:
            raise ValueError(f"not canonical columns: {', '.join(unknown)}")
        if self.chunk_records < 1:
            raise ValueError(f"chunk_records must be >= 1 (found {self.chunk_records})")
        self.limits  # noqa: B018  # checks them

    @functools.cached_property
    def limits(self) -> Limits:
        """The limits that protect memory, as one value for the readers (made once: the
        readers ask for it at every record)."""
        return Limits(**{name: getattr(self, name) for name in LIMIT_NAMES})

    @classmethod
    def of(cls, options: ReadOptions | None = None, **settings: Any) -> ReadOptions:
        """``options`` (or the defaults) with the given settings changed: the keyword form
        ``load_logs(paths, on_bad_record="skip")`` is a shorthand for this."""
        if settings.get("fields", ...) is None:
            del settings["fields"]
        if isinstance(settings.get("extra_fields"), Sequence):
            settings["extra_fields"] = tuple(settings["extra_fields"])
        return dataclasses.replace(options or cls(), **settings)
