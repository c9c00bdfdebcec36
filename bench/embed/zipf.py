"""Bounded Zipf ids: rank r in 1..n drawn with probability r^-alpha / H(n, alpha), mapped to ids
by a fixed bijection (hot rows are spread over the table, as hashed feature ids are)."""

from __future__ import annotations

import math

import numpy as np


class ZipfIds:
    def __init__(self, n: int, alpha: float = 1.05, seed: int = 0) -> None:
        self.n = n
        self.alpha = alpha
        weights = np.arange(1, n + 1, dtype=np.float64) ** -alpha
        self.cdf = np.cumsum(weights)
        self.cdf /= self.cdf[-1]
        rng = np.random.default_rng(seed)
        a = int(rng.integers(n // 3, n)) | 1
        while math.gcd(a, n) != 1:
            a += 2
        self.a, self.b = a, int(rng.integers(0, n))

    def ranks(self, size: int, rng: np.random.Generator) -> np.ndarray:
        return np.minimum(np.searchsorted(self.cdf, rng.random(size)), self.n - 1)

    def ids_of(self, ranks: np.ndarray) -> np.ndarray:
        return (ranks.astype(np.int64) * self.a + self.b) % self.n

    def ranks_of(self, ids: np.ndarray) -> np.ndarray:
        """0-based popularity rank of each id (the bijection's inverse)."""
        inv = pow(self.a, -1, self.n)
        return ((np.asarray(ids, dtype=np.int64) - self.b) % self.n * inv) % self.n

    def sample(self, size: int, rng: np.random.Generator) -> np.ndarray:
        return self.ids_of(self.ranks(size, rng))

    def top_share(self, k: int) -> float:
        """Probability mass of the k most popular ids (a static cache's hit ratio)."""
        return float(self.cdf[min(k, self.n) - 1]) if k > 0 else 0.0
