"""``python -m cli.main``, as before ``python -m cli``; ``from cli.main import app`` too."""

from __future__ import annotations

from cli.app import app, main

__all__ = ["app", "main"]

if __name__ == "__main__":
    main()
