"""``python -m cli``: the command line, as the ``dressage-replay`` script runs it."""

from __future__ import annotations

from cli import console

console()
