"""Recommendation architectures outside the training families, to check ``describe`` on.

None of these is in the generator's sweep (``families.py``, ``models.py``): recurrent
sequence models (GRU4Rec; a two-layer LSTM, which runs oneDNN's kernel on the CPU), a cross
network (DCN-v2), a compressed interaction network written with ``einsum`` and ``Conv1d``
(xDeepFM), self-attention over fields (AutoInt), a Transformer over the behaviour sequence
(BST), neural collaborative filtering (NCF, also in bf16, and fine-tuned over frozen pretrained
item tables), an interest-evolution model whose attention-gated GRU is a Python loop over the
steps (DIEN), and bags fed TorchRec's way (flat ids, offsets, per-id weights), with the
optimizers users pick (Adam, Adagrad, single-tensor AdamW, fused Adam, SGD with momentum).
Each entry builds ``(model, example_inputs, optimizer, loss_fn)`` for a batch, as a
``describe`` factory does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812 - PyTorch's spelling
from torch import nn

Factory = Callable[[int], tuple[nn.Module, tuple, Any, Callable | None]]


class Gru4Rec(nn.Module):
    def __init__(self, items: int = 50_000, dim: int = 64, hidden: int = 128) -> None:
        super().__init__()
        self.emb = nn.Embedding(items, dim)
        self.gru = nn.GRU(dim, hidden, batch_first=True)
        self.out = nn.Linear(hidden, items)  # next item over the whole catalogue

    def forward(self, seq: torch.Tensor) -> torch.Tensor:
        states, _ = self.gru(self.emb(seq))
        return self.out(states[:, -1])


class Lstm(nn.Module):
    def __init__(self, items: int = 50_000, dim: int = 64, hidden: int = 128) -> None:
        super().__init__()
        self.emb = nn.Embedding(items, dim)
        self.rnn = nn.LSTM(dim, hidden, num_layers=2, batch_first=True)
        self.head = nn.Linear(hidden, 1)

    def forward(self, seq: torch.Tensor) -> torch.Tensor:
        states, _ = self.rnn(self.emb(seq))
        return self.head(states.mean(1)).squeeze(-1)


class DcnV2(nn.Module):
    def __init__(self, fields: int = 16, rows: int = 100_000, dim: int = 16,
                 layers: int = 3) -> None:
        super().__init__()
        self.embs = nn.ModuleList(nn.EmbeddingBag(rows, dim, mode="sum") for _ in range(fields))
        width = fields * dim + 13
        self.cross = nn.ModuleList(nn.Linear(width, width) for _ in range(layers))
        self.mlp = nn.Sequential(nn.Linear(width, 256), nn.ReLU(), nn.Linear(256, 128),
                                 nn.ReLU())
        self.out = nn.Linear(width + 128, 1)

    def forward(self, dense: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        x0 = torch.cat([dense] + [e(ids[:, i]) for i, e in enumerate(self.embs)], 1)
        x = x0
        for layer in self.cross:
            x = x0 * layer(x) + x
        return self.out(torch.cat([x, self.mlp(x0)], 1)).squeeze(-1)


class XDeepFm(nn.Module):
    def __init__(self, fields: int = 12, rows: int = 100_000, dim: int = 16,
                 maps: tuple[int, ...] = (64, 64)) -> None:
        super().__init__()
        self.embs = nn.ModuleList(nn.Embedding(rows, dim) for _ in range(fields))
        sizes = [fields, *maps]
        self.cin = nn.ModuleList(nn.Conv1d(sizes[i] * fields, sizes[i + 1], 1)
                                 for i in range(len(maps)))
        self.mlp = nn.Sequential(nn.Linear(fields * dim, 200), nn.ReLU(), nn.Linear(200, 1))
        self.linear = nn.Linear(sum(maps), 1)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x0 = torch.stack([e(ids[:, i]) for i, e in enumerate(self.embs)], 1)  # B x F x d
        x, pooled = x0, []
        for conv in self.cin:
            z = torch.einsum("bhd,bmd->bhmd", x, x0).reshape(x0.shape[0], -1, x0.shape[2])
            x = F.relu(conv(z))
            pooled.append(x.sum(2))
        return (self.linear(torch.cat(pooled, 1)) + self.mlp(x0.flatten(1))).squeeze(-1)


class AutoInt(nn.Module):
    def __init__(self, fields: int = 20, rows: int = 100_000, dim: int = 32,
                 layers: int = 3) -> None:
        super().__init__()
        self.embs = nn.ModuleList(nn.Embedding(rows, dim) for _ in range(fields))
        self.att = nn.ModuleList(nn.MultiheadAttention(dim, 2, batch_first=True)
                                 for _ in range(layers))
        self.out = nn.Linear(fields * dim, 1)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = torch.stack([e(ids[:, i]) for i, e in enumerate(self.embs)], 1)
        for att in self.att:
            x = F.relu(x + att(x, x, x, need_weights=False)[0])
        return self.out(x.flatten(1)).squeeze(-1)


class Bst(nn.Module):
    def __init__(self, items: int = 200_000, dim: int = 64, steps: int = 20) -> None:
        super().__init__()
        self.item = nn.Embedding(items, dim)
        self.pos = nn.Embedding(steps + 1, dim)
        layer = nn.TransformerEncoderLayer(dim, 4, 256, dropout=0.1, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 2)
        self.mlp = nn.Sequential(nn.Linear((steps + 1) * dim, 256), nn.LeakyReLU(),
                                 nn.Linear(256, 1))

    def forward(self, seq: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        x = torch.cat([self.item(seq), self.item(target).unsqueeze(1)], 1)
        return self.mlp(self.enc(x + self.pos.weight.unsqueeze(0)).flatten(1)).squeeze(-1)


class Ncf(nn.Module):
    def __init__(self, users: int = 200_000, items: int = 100_000, dim: int = 32) -> None:
        super().__init__()
        self.gmf_user, self.gmf_item = nn.Embedding(users, dim), nn.Embedding(items, dim)
        self.mlp_user, self.mlp_item = nn.Embedding(users, dim), nn.Embedding(items, dim)
        self.mlp = nn.Sequential(nn.Linear(2 * dim, 128), nn.ReLU(), nn.Linear(128, 64),
                                 nn.ReLU(), nn.Linear(64, 32))
        self.out = nn.Linear(dim + 32, 1)

    def forward(self, user: torch.Tensor, item: torch.Tensor) -> torch.Tensor:
        gmf = self.gmf_user(user) * self.gmf_item(item)
        mlp = self.mlp(torch.cat([self.mlp_user(user), self.mlp_item(item)], 1))
        return self.out(torch.cat([gmf, mlp], 1)).squeeze(-1)


class AttentionGatedGru(nn.Module):
    """A GRU cell whose update gate is scaled by the step's attention score (DIEN's AUGRU)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.x, self.h = nn.Linear(dim, 3 * dim), nn.Linear(dim, 3 * dim, bias=False)

    def forward(self, x: torch.Tensor, h: torch.Tensor, att: torch.Tensor) -> torch.Tensor:
        xr, xz, xn = self.x(x).chunk(3, 1)
        hr, hz, hn = self.h(h).chunk(3, 1)
        z = torch.sigmoid(xz + hz) * att
        n = torch.tanh(xn + torch.sigmoid(xr + hr) * hn)
        return (1 - z) * h + z * n


class Dien(nn.Module):
    def __init__(self, items: int = 100_000, dim: int = 32) -> None:
        super().__init__()
        self.item = nn.Embedding(items, dim)
        self.gru = nn.GRU(dim, dim, batch_first=True)
        self.evolve = AttentionGatedGru(dim)
        self.out = nn.Sequential(nn.Linear(2 * dim, 80), nn.Sigmoid(), nn.Linear(80, 1))

    def forward(self, seq: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        interests, _ = self.gru(self.item(seq))
        t = self.item(target)
        att = torch.softmax((interests * t.unsqueeze(1)).sum(-1), 1)
        h = torch.zeros_like(t)
        for step in range(seq.shape[1]):
            h = self.evolve(interests[:, step], h, att[:, step:step + 1])
        return self.out(torch.cat([h, t], 1)).squeeze(-1)


class WeightedBags(nn.Module):
    """Tables fed as TorchRec feeds them: one flat id tensor with offsets per sample and a
    weight per id."""

    def __init__(self, tables: int = 4, rows: int = 200_000, dim: int = 64) -> None:
        super().__init__()
        self.bags = nn.ModuleList(nn.EmbeddingBag(rows, dim, mode="sum") for _ in range(tables))
        self.mlp = nn.Sequential(nn.Linear(13 + tables * dim, 256), nn.ReLU(), nn.Linear(256, 1))

    def forward(self, dense: torch.Tensor, ids: torch.Tensor, offsets: torch.Tensor,
                weights: torch.Tensor) -> torch.Tensor:
        pooled = [bag(ids, offsets, per_sample_weights=weights) for bag in self.bags]
        return self.mlp(torch.cat([dense, *pooled], 1)).squeeze(-1)


def _frozen_items(b: int) -> tuple[nn.Module, tuple, Any, None]:
    """NCF fine-tuned over pretrained item tables that stay frozen: they have no gradient
    and no optimizer state."""
    m = Ncf()
    for table in (m.gmf_item, m.mlp_item):
        table.weight.requires_grad_(False)
    opt = torch.optim.Adam([p for p in m.parameters() if p.requires_grad])
    return m, (_ids(200_000, b), _ids(100_000, b)), opt, None


def _weighted_bags(b: int, ids_per_sample: int = 20) -> tuple[nn.Module, tuple, Any, None]:
    m = WeightedBags()
    n = b * ids_per_sample
    inputs = (torch.randn(b, 13), _ids(200_000, n), torch.arange(0, n, ids_per_sample),
              torch.rand(n))
    return m, inputs, torch.optim.Adam(m.parameters()), None


def _next_item_loss(out: torch.Tensor, seq: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(out, seq[:, 0])


def _ids(high: int, *shape: int) -> torch.Tensor:
    return torch.randint(0, high, shape)


ARCHITECTURES: dict[str, Factory] = {
    "gru4rec": lambda b: (m := Gru4Rec(), (_ids(50_000, b, 20),),
                          torch.optim.Adam(m.parameters()), _next_item_loss),
    "lstm": lambda b: (m := Lstm(), (_ids(50_000, b, 30),),
                       torch.optim.Adagrad(m.parameters()), None),
    "dcn-v2": lambda b: (m := DcnV2(), (torch.randn(b, 13), _ids(100_000, b, 16, 3)),
                         torch.optim.Adam(m.parameters()), None),
    "xdeepfm": lambda b: (m := XDeepFm(), (_ids(100_000, b, 12),),
                          torch.optim.AdamW(m.parameters(), foreach=False), None),
    "autoint": lambda b: (m := AutoInt(), (_ids(100_000, b, 20),),
                          torch.optim.Adam(m.parameters(), fused=True), None),
    "bst": lambda b: (m := Bst(), (_ids(200_000, b, 20), _ids(200_000, b)),
                      torch.optim.Adam(m.parameters()), None),
    "ncf": lambda b: (m := Ncf(), (_ids(200_000, b), _ids(100_000, b)),
                      torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9), None),
    "ncf-bf16": lambda b: (m := Ncf().to(torch.bfloat16), (_ids(200_000, b), _ids(100_000, b)),
                           torch.optim.Adam(m.parameters()), None),
    "ncf-frozen-items": _frozen_items,
    "dien": lambda b: (m := Dien(), (_ids(100_000, b, 30), _ids(100_000, b)),
                       torch.optim.Adam(m.parameters()), None),
    "weighted-bags": _weighted_bags,
}
