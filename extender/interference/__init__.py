"""Pairwise interference between job classes sharing a GPU. Pure (the CSV read is the only I/O)."""

from extender.interference.matrix import InterferenceMatrix, default_matrix

__all__ = ["InterferenceMatrix", "default_matrix"]
