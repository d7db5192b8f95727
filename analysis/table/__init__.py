"""The canonical table every format reads into: its schema, version labels, the limits and options of reading."""
