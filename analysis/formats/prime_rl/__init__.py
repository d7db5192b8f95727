"""prime-rl's episode logs (`rollouts/step_N/train/all/traces.jsonl`)."""

NAMES = ("prime-rl",)
"""The ``--format`` names of this folder's formats (its ``format.FORMATS``, in order),
known without importing the readers."""
