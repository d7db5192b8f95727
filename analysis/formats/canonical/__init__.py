"""The canonical table written by `convert`: Parquet and Arrow IPC files or folders of parts."""

NAMES = ("parquet", "ipc")
"""The ``--format`` names of this folder's formats (its ``format.FORMATS``, in order),
known without importing the readers."""
