"""JSONL logs of Dressage or slime records (``Sample.to_dict()`` a line), plain or gzipped."""

NAMES = ("jsonl",)
"""The ``--format`` names of this folder's formats (its ``format.FORMATS``, in order),
known without importing the readers."""
