"""One module per command; :mod:`cli.app` registers them in the order of the help."""
