"""Output: atomic publication of files, result writers, raw-log writers and the convert pipeline."""
