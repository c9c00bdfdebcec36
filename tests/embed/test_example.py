"""The DLRM example trains through the embedding client: its loss falls and its rows come from
the node cache after the first touches (NumPy path always; PyTorch path where installed)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest
from builders import free_port

from embed.client import HAVE_TORCH
from embed.store import EmbeddingStore

pytestmark = pytest.mark.redis
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "dlrm_embedding_client.py"
TABLES = {"user": 3000, "item": 5000, "ad": 500}


def example():
    spec = importlib.util.spec_from_file_location("dlrm_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("use_torch", [False, True])
def test_dlrm_trains_through_the_cache(redis_server, redis_url, use_torch):
    if use_torch and not (HAVE_TORCH and os.environ.get("SPARSE_TORCH_TESTS")):
        pytest.skip("PyTorch path: set SPARSE_TORCH_TESTS=1 (importing torch takes seconds)")
    ex = example()
    ex.load_tables(EmbeddingStore.from_url(redis_url), 0, TABLES)
    clients = []
    losses = ex.train(redis_url, redis_server.url.replace("/0", "/3"), 60, 256, tables=TABLES,
                      use_torch=use_torch, clients_out=clients)
    assert np.mean(losses[-10:]) < np.mean(losses[:10]) - 0.02
    hits = sum(c.metrics.hits for c in clients)
    misses = sum(c.metrics.misses for c in clients)
    assert hits > 3 * misses  # Zipf ids: most rows come from the node cache


def test_client_falls_back_to_the_store_when_the_cache_is_gone(redis_url):
    ex = example()
    ex.load_tables(EmbeddingStore.from_url(redis_url), 0, TABLES)
    clients = []
    losses = ex.train(redis_url, f"redis://127.0.0.1:{free_port()}/0", 3, 64, tables=TABLES,
                      use_torch=False, clients_out=clients)
    assert len(losses) == 3 and all(np.isfinite(losses))
    assert all(not c.reader.cache_up for c in clients)
