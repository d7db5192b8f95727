"""The pipeline simulator and its fit to a real run."""
