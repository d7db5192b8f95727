"""NeMo-RL's training dumps as a format: ``train_data_step{N}.jsonl``."""

from __future__ import annotations

from analysis.formats.nemo_rl import reader
from analysis.formats.peers import FIELDS_UNUSED, PeerFormat

FORMAT = PeerFormat(
    name=reader.NAME,
    described="a NeMo-RL log",
    users_name="NeMo-RL",
    fields_unused=FIELDS_UNUSED,
    no_versions=reader.NO_VERSIONS,
    cannot_tell=reader.LIMITS,
    keys=reader.KEYS,
    rows=reader.rows,
    file_order=reader.step_of,
    names_files=True,
)

FORMATS = (FORMAT,)
