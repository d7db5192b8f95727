"""The canonical table written by `convert`: Parquet and Arrow IPC files or folders of parts."""
