"""NeMo-RL's training dumps (`train_data_step{N}.jsonl`)."""

NAMES = ("nemo-rl",)
"""The ``--format`` names of this folder's formats (its ``format.FORMATS``, in order),
known without importing the readers."""
