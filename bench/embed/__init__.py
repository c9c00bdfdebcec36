"""Embedding cache microbenchmarks (python -m bench.embed)."""
