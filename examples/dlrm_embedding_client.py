"""A small DLRM-style model trained on synthetic click data whose sparse features are Zipf(1.05)
ids, with every embedding row served through the node cache (``embed.EmbeddingClient``).

    python examples/dlrm_embedding_client.py --store redis://127.0.0.1:6379/0 \
        [--cache unix:///var/run/sparse-embed/redis.sock] [--steps 50] [--load]

``--load`` first writes random tables into the store (as ``sparse-embed load`` would from a
checkpoint). The model (Naumov et al., 2019): a bottom MLP over dense features, one embedding
per sparse feature, pairwise dot-product interactions, a top MLP, binary cross-entropy. The
embedding tables live in the store and are read-only here (the dense layers are trained over
pretrained tables); the client prefetches the next batch's rows while the step computes.
PyTorch when installed; otherwise the same model in NumPy with hand-written gradients.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from embed.client import HAVE_TORCH, EmbeddingClient
from embed.layout import TableMeta
from embed.store import EmbeddingStore

TABLES = {"user": 200_000, "item": 500_000, "ad": 50_000}
DIM, DENSE, HIDDEN = 16, 8, 32


def zipf_ids(rng: np.random.Generator, rows: int, size: int, alpha: float = 1.05) -> np.ndarray:
    ranks = np.arange(1, rows + 1, dtype=np.float64) ** -alpha
    cdf = np.cumsum(ranks) / ranks.sum()
    return np.minimum(np.searchsorted(cdf, rng.random(size)), rows - 1)


def batches(rng: np.random.Generator, batch: int, steps: int, tables: dict[str, int]):
    """Synthetic clicks: the label depends on the dense features and on hot ids."""
    first = next(iter(tables))
    for _ in range(steps + 1):  # one extra: the prefetch of the last step's successor
        dense = rng.standard_normal((batch, DENSE)).astype(np.float32)
        ids = {t: zipf_ids(rng, n, batch) for t, n in tables.items()}
        logit = dense[:, 0] - 0.5 * dense[:, 1] + (ids[first] < 100) * 1.5 - 0.5
        label = (rng.random(batch) < 1 / (1 + np.exp(-logit))).astype(np.float32)
        yield dense, ids, label


def load_tables(store: EmbeddingStore, seed: int, tables: dict[str, int] = TABLES) -> None:
    rng = np.random.default_rng(seed)
    for name, rows in tables.items():
        data = (rng.standard_normal((rows, DIM)) * 0.1).astype(np.float32)
        store.write_table(TableMeta(name, rows, DIM), [data])


class NumpyDLRM:
    """bottom: dense -> HIDDEN -> DIM (ReLU); interaction: pairwise dots of the DIM-vectors;
    top: [bottom, dots] -> HIDDEN -> 1."""

    def __init__(self, seed: int, n_sparse: int) -> None:
        rng = np.random.default_rng(seed)
        self.n = n_sparse + 1
        pairs = self.n * (self.n - 1) // 2
        self.iu = np.triu_indices(self.n, 1)

        def init(i, o):
            return (rng.standard_normal((i, o)) * np.sqrt(2 / i)).astype(np.float32)

        self.p = {"b1": init(DENSE, HIDDEN), "b2": init(HIDDEN, DIM),
                  "t1": init(DIM + pairs, HIDDEN), "t2": init(HIDDEN, 1)}

    def step(self, dense: np.ndarray, emb: list[np.ndarray], label: np.ndarray, lr: float
             ) -> float:
        p = self.p
        h1 = np.maximum(dense @ p["b1"], 0)
        x = np.maximum(h1 @ p["b2"], 0)
        vecs = np.stack([x, *emb], axis=1)  # (B, n, DIM)
        gram = vecs @ vecs.transpose(0, 2, 1)
        z = np.concatenate([x, gram[:, self.iu[0], self.iu[1]]], axis=1)
        h2 = np.maximum(z @ p["t1"], 0)
        out = (h2 @ p["t2"])[:, 0]
        prob = 1 / (1 + np.exp(-out))
        loss = float(-np.mean(label * np.log(prob + 1e-7) + (1 - label) * np.log(1 - prob
                                                                                  + 1e-7)))
        g_out = ((prob - label) / len(label))[:, None]
        grads = {"t2": h2.T @ g_out}
        g_h2 = (g_out @ p["t2"].T) * (h2 > 0)
        grads["t1"] = z.T @ g_h2
        g_z = g_h2 @ p["t1"].T
        g_gram = np.zeros_like(gram)
        g_gram[:, self.iu[0], self.iu[1]] = g_z[:, DIM:]
        g_vecs = (g_gram + g_gram.transpose(0, 2, 1)) @ vecs
        g_x = (g_z[:, :DIM] + g_vecs[:, 0]) * (x > 0)
        grads["b2"] = h1.T @ g_x
        grads["b1"] = dense.T @ ((g_x @ p["b2"].T) * (h1 > 0))
        for k, g in grads.items():
            p[k] -= lr * g.astype(np.float32)
        return loss


def torch_model(n_sparse: int):
    import torch

    nn = torch.nn
    n = n_sparse + 1

    class DLRM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bottom = nn.Sequential(nn.Linear(DENSE, HIDDEN), nn.ReLU(),
                                        nn.Linear(HIDDEN, DIM), nn.ReLU())
            self.top = nn.Sequential(nn.Linear(DIM + n * (n - 1) // 2, HIDDEN), nn.ReLU(),
                                     nn.Linear(HIDDEN, 1))
            self.iu = torch.triu_indices(n, n, 1)

        def forward(self, dense, emb):
            x = self.bottom(dense)
            vecs = torch.stack([x, *emb], dim=1)
            gram = vecs @ vecs.transpose(1, 2)
            return self.top(torch.cat([x, gram[:, self.iu[0], self.iu[1]]], dim=1))[:, 0]

    return DLRM()


def train(store_url: str, cache_url: str | None, steps: int, batch: int, seed: int = 0,
          lr: float = 1.0, tables: dict[str, int] = TABLES, use_torch: bool | None = None,
          clients_out: list | None = None) -> list[float]:
    use_torch = HAVE_TORCH if use_torch is None else use_torch
    if use_torch:
        import torch
    clients = {t: EmbeddingClient(t, cache_url=cache_url, store_url=store_url,
                                  as_tensor=use_torch) for t in tables}
    if clients_out is not None:
        clients_out.extend(clients.values())
    rng = np.random.default_rng(seed + 1)
    data = list(batches(rng, batch, steps, tables))
    losses = []
    if use_torch:
        torch.manual_seed(seed)
        model = torch_model(len(tables))
        opt = torch.optim.SGD(model.parameters(), lr=lr)
    else:
        model = NumpyDLRM(seed, len(tables))
    try:
        for i in range(steps):
            dense, ids, label = data[i]
            nxt = data[i + 1][1]
            emb = [clients[t].lookup(ids[t], next_ids=nxt[t]) for t in tables]
            if use_torch:
                logits = model(torch.from_numpy(dense), emb)
                loss = torch.nn.functional.binary_cross_entropy_with_logits(
                    logits, torch.from_numpy(label))
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(loss.item())
            else:
                losses.append(model.step(dense, emb, label, lr))
    finally:
        for c in clients.values():
            c.close()
    return losses


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", required=True)
    ap.add_argument("--cache", default=None)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--load", action="store_true", help="write random tables first")
    args = ap.parse_args()
    if args.load:
        load_tables(EmbeddingStore.from_url(args.store), 0)
    t0 = time.perf_counter()
    losses = train(args.store, args.cache, args.steps, args.batch)
    print(f"{'torch' if HAVE_TORCH else 'numpy'}: {args.steps} steps in "
          f"{time.perf_counter() - t0:.1f} s, loss {losses[0]:.3f} -> "
          f"{np.mean(losses[-5:]):.3f}")


if __name__ == "__main__":
    main()
