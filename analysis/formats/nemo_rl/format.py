"""NeMo-RL's training dumps as a format: ``train_data_step{N}.jsonl``."""

from __future__ import annotations

from analysis.formats.nemo_rl import reader
from analysis.formats.peers import PeerFormat

FORMAT = PeerFormat.of(
    reader,
    described="a NeMo-RL log",
    users_name="NeMo-RL",
    file_order=reader.step_of,
    names_files=True,
)

FORMATS = (FORMAT,)
