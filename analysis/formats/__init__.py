"""Reading: one folder per log format, found through one registry, and the loader that reads any of them into the canonical table."""
