"""Input and output: a reader per log format, discovery of the logs in a folder, the canonical
table built from raw records, and the writers of raw logs, result tables and reports."""
