"""Embedding store loader, node-level embedding cache and the training client (see README)."""

from embed.client import EmbeddingClient

__all__ = ["EmbeddingClient"]
