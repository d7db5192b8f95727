"""Dressage's own files: artifact folders (`traj_payload/`, `traj_err/`) and whole run folders."""

NAMES = ("artifacts",)
"""The ``--format`` names of this folder's formats (its ``format.FORMATS``, in order),
known without importing the readers."""
