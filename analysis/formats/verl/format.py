"""verl's rollout dumps as a format: ``{rollout_data_dir}/{global_steps}.jsonl``."""

from __future__ import annotations

from analysis.formats.peers import PeerFormat
from analysis.formats.verl import reader

FORMAT = PeerFormat.of(
    reader,
    described="a verl log",
    users_name="verl",
    file_order=reader.file_order,
    names_files=True,
)

FORMATS = (FORMAT,)
