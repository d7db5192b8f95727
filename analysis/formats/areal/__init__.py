"""AReaL's rollout dumps (`rollout/{tail_version}/{task_id}.jsonl`)."""

NAMES = ("areal",)
"""The ``--format`` names of this folder's formats (its ``format.FORMATS``, in order),
known without importing the readers."""
