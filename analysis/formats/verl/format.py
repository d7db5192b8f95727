"""verl's rollout dumps as a format: ``{rollout_data_dir}/{global_steps}.jsonl``."""

from __future__ import annotations

from analysis.formats.peers import FIELDS_UNUSED, PeerFormat
from analysis.formats.verl import reader

FORMAT = PeerFormat(
    name=reader.NAME,
    described="a verl log",
    users_name="verl",
    fields_unused=FIELDS_UNUSED,
    no_versions=reader.NO_VERSIONS,
    cannot_tell=reader.LIMITS,
    keys=reader.KEYS,
    rows=reader.rows,
    file_order=reader.file_order,
    names_files=True,
)

FORMATS = (FORMAT,)
