"""verl's rollout dumps (`{rollout_data_dir}/{step}.jsonl`)."""

NAMES = ("verl",)
"""The ``--format`` names of this folder's formats (its ``format.FORMATS``, in order),
known without importing the readers."""
