"""Untrusted pickles and torch.save files, read without running their code and within memory bounds."""
