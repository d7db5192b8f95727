"""JSONL logs of Dressage or slime records (``Sample.to_dict()`` a line), plain or gzipped."""
