"""slime's rollout dumps (`rollout_data/<id>.pt`) and train dumps (`train_data/<id>.pt`)."""

NAMES = ("pt",)
"""The ``--format`` names of this folder's formats (its ``format.FORMATS``, in order),
known without importing the readers."""
