"""Training and evaluation of the learned pairwise interference model (extender/interference)."""
