"""More recommendation architectures for the sweep, each of a different structure from the
Wide&Deep / DeepFM / DLRM trio (imports torch; only the generator uses this):

* ``din`` — sequence / attention user interest (DIN): a behaviour sequence looked up in the
  item table that the target item shares, target attention over it, user bags, an MLP;
* ``two_tower`` — retrieval: user and item towers, in-batch softmax over ``B x B`` logits;
  the item id table is shared by the user's history bag and the item tower;
* ``mmoe`` — multi-task mixture of experts: shared tables, expert MLPs, one gate and one
  tower per task, a loss per task;
* ``fm`` — a factorisation machine: first-order weights and pairwise interactions only;
* ``sasrec`` — a transformer sequential recommender (SASRec / BERT4Rec): causal encoder over
  item sequences, logits against the (tied) item table at every position;
* ``qr_dlrm`` — compositional (quotient-remainder hashed) embeddings: each feature looks up
  two small tables and multiplies the rows, DLRM-style MLPs and dot interaction;
* ``mixed_dim`` — mixed embedding dimensions per table, projected to a common width.

Every builder returns ``(model, make_batch, loss_fn)`` like :mod:`predictor.generate.models`.
Configs come from :func:`predictor.configs.sweep`; ``bag`` chooses ``nn.EmbeddingBag`` (with
``mode`` ``sum`` or ``mean``) or ``nn.Embedding`` + a reduction, ``sparse_grad`` sparse
gradients.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from predictor.generate.models import Batch, Built, _mlp


class Lookup(nn.Module):
    """One sparse feature: ``nn.EmbeddingBag(mode)`` or ``nn.Embedding`` + the same reduction
    over the ids of a sample (``B x pooling`` ids -> ``B x dim``)."""

    def __init__(self, rows: int, dim: int, cfg: dict[str, Any]):
        super().__init__()
        self.mode = cfg.get("mode", "sum")
        sparse = bool(cfg.get("sparse_grad", False))
        self.bag = bool(cfg.get("bag", True))
        self.emb = (nn.EmbeddingBag(rows, dim, mode=self.mode, sparse=sparse) if self.bag
                    else nn.Embedding(rows, dim, sparse=sparse))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if self.bag:
            return self.emb(ids)
        x = self.emb(ids)
        return x.mean(1) if self.mode == "mean" else x.sum(1)


def _ids(rows: int, b: int, pooling: float) -> torch.Tensor:
    return torch.randint(0, rows, (b, max(1, round(pooling))))


def _bce(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return nn.functional.binary_cross_entropy_with_logits(out, y)


class Din(nn.Module):
    def __init__(self, cfg: dict[str, Any]):
        super().__init__()
        d = cfg["dim"]
        sparse = bool(cfg.get("sparse_grad", False))
        self.items = nn.Embedding(cfg["items"], d, sparse=sparse)  # history and target share it
        self.users = nn.ModuleList(Lookup(r, d, cfg) for r, _ in cfg["user_tables"])
        self.att = _mlp(cfg["att_mlp"] + [1], 4 * d, last_act=False)
        self.top = _mlp(cfg["top_mlp"] + [1], d * (2 + len(cfg["user_tables"])), last_act=False)

    def forward(self, hist: torch.Tensor, target: torch.Tensor, *users: torch.Tensor):
        h = self.items(hist)  # B x L x d
        t = self.items(target).unsqueeze(1).expand_as(h)
        w = torch.softmax(self.att(torch.cat([h, t, h - t, h * t], dim=-1)).squeeze(-1), -1)
        interest = (w.unsqueeze(-1) * h).sum(1)
        u = [m(i) for m, i in zip(self.users, users, strict=True)]
        return self.top(torch.cat([interest, t[:, 0], *u], dim=1))


def build_din(cfg: dict[str, Any], dtype: torch.dtype) -> Built:
    model, b = Din(cfg), cfg["batch_size"]

    def make_batch() -> Batch:
        hist = torch.randint(0, cfg["items"], (b, cfg["seq_len"]))
        target = torch.randint(0, cfg["items"], (b,))
        users = [_ids(r, b, p) for r, p in cfg["user_tables"]]
        return (torch.rand(b, 1, dtype=dtype), hist, target, *users)

    def loss(m: nn.Module, batch: Batch) -> torch.Tensor:
        y, *x = batch
        return _bce(m(*x), y)

    return model, make_batch, loss


class TwoTower(nn.Module):
    def __init__(self, cfg: dict[str, Any]):
        super().__init__()
        d = cfg["dim"]
        self.item_ids = Lookup(cfg["items"], d, cfg)  # shared: history bag and item tower
        self.user_tables = nn.ModuleList(Lookup(r, d, cfg) for r, _ in cfg["user_tables"])
        self.item_tables = nn.ModuleList(Lookup(r, d, cfg) for r, _ in cfg["item_tables"])
        self.user_tower = _mlp(cfg["tower"], d * (1 + len(cfg["user_tables"])), last_act=False)
        self.item_tower = _mlp(cfg["tower"], d * (1 + len(cfg["item_tables"])), last_act=False)

    def forward(self, hist, item, user_ids, item_feats):  # noqa: ANN001, ANN201
        u = self.user_tower(torch.cat(
            [self.item_ids(hist), *[m(i) for m, i in zip(self.user_tables, user_ids,
                                                         strict=True)]], 1))
        v = self.item_tower(torch.cat(
            [self.item_ids(item), *[m(i) for m, i in zip(self.item_tables, item_feats,
                                                         strict=True)]], 1))
        return u @ v.t()  # in-batch negatives


def build_two_tower(cfg: dict[str, Any], dtype: torch.dtype) -> Built:
    model, b = TwoTower(cfg), cfg["batch_size"]
    nu = len(cfg["user_tables"])

    def make_batch() -> Batch:
        return (_ids(cfg["items"], b, cfg["seq_len"]), _ids(cfg["items"], b, 1),
                *[_ids(r, b, p) for r, p in cfg["user_tables"]],
                *[_ids(r, b, p) for r, p in cfg["item_tables"]])

    def loss(m: nn.Module, batch: Batch) -> torch.Tensor:
        hist, item, *rest = batch
        logits = m(hist, item, rest[:nu], rest[nu:])
        return nn.functional.cross_entropy(logits, torch.arange(b, device=logits.device))

    return model, make_batch, loss


class Mmoe(nn.Module):
    def __init__(self, cfg: dict[str, Any]):
        super().__init__()
        d, dense = cfg["dim"], cfg["dense_features"]
        self.tables = nn.ModuleList(Lookup(r, d, cfg) for r, _ in cfg["tables"])
        d_in = dense + d * len(cfg["tables"])
        self.experts = nn.ModuleList(_mlp(cfg["expert"], d_in) for _ in range(cfg["experts"]))
        self.gates = nn.ModuleList(nn.Linear(d_in, cfg["experts"]) for _ in range(cfg["tasks"]))
        self.towers = nn.ModuleList(_mlp(cfg["tower"] + [1], cfg["expert"][-1], last_act=False)
                                    for _ in range(cfg["tasks"]))

    def forward(self, dense: torch.Tensor, *ids: torch.Tensor) -> list[torch.Tensor]:
        x = torch.cat([dense, *[m(i) for m, i in zip(self.tables, ids, strict=True)]], 1)
        e = torch.stack([ex(x) for ex in self.experts], 1)  # B x E x h
        outs = []
        for gate, tower in zip(self.gates, self.towers, strict=True):
            w = torch.softmax(gate(x), -1).unsqueeze(-1)
            outs.append(tower((w * e).sum(1)))
        return outs


def build_mmoe(cfg: dict[str, Any], dtype: torch.dtype) -> Built:
    model, b = Mmoe(cfg), cfg["batch_size"]

    def make_batch() -> Batch:
        return (torch.rand(b, cfg["tasks"], dtype=dtype),
                torch.randn(b, cfg["dense_features"], dtype=dtype),
                *[_ids(r, b, p) for r, p in cfg["tables"]])

    def loss(m: nn.Module, batch: Batch) -> torch.Tensor:
        y, dense, *ids = batch
        return sum(_bce(o, y[:, k:k + 1]) for k, o in enumerate(m(dense, *ids)))

    return model, make_batch, loss


class Fm(nn.Module):
    def __init__(self, cfg: dict[str, Any]):
        super().__init__()
        self.v = nn.ModuleList(Lookup(r, cfg["dim"], cfg) for r, _ in cfg["tables"])
        self.w = nn.ModuleList(Lookup(r, 1, cfg) for r, _ in cfg["tables"])
        self.bias = nn.Parameter(torch.zeros(1))

    def forward(self, *ids: torch.Tensor) -> torch.Tensor:
        v = torch.stack([m(i) for m, i in zip(self.v, ids, strict=True)], 1)  # B x F x d
        first = torch.cat([m(i) for m, i in zip(self.w, ids, strict=True)], 1).sum(1, True)
        s = v.sum(1)
        return self.bias + first + 0.5 * (s * s - (v * v).sum(1)).sum(1, keepdim=True)


def build_fm(cfg: dict[str, Any], dtype: torch.dtype) -> Built:
    model, b = Fm(cfg), cfg["batch_size"]

    def make_batch() -> Batch:
        return (torch.rand(b, 1, dtype=dtype), *[_ids(r, b, p) for r, p in cfg["tables"]])

    def loss(m: nn.Module, batch: Batch) -> torch.Tensor:
        y, *ids = batch
        return _bce(m(*ids), y)

    return model, make_batch, loss


class SasRec(nn.Module):
    def __init__(self, cfg: dict[str, Any]):
        super().__init__()
        d = cfg["dim"]
        self.items = nn.Embedding(cfg["items"], d)
        self.pos = nn.Embedding(cfg["seq_len"], d)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(d, cfg["heads"], 4 * d, dropout=0.1, batch_first=True,
                                       norm_first=cfg.get("pre_ln", False))
            for _ in range(cfg["layers"]))
        self.causal = cfg.get("causal", True)

    def forward(self, seq: torch.Tensor) -> torch.Tensor:
        s = seq.shape[1]
        x = self.items(seq) + self.pos(torch.arange(s, device=seq.device))
        mask = (torch.triu(torch.full((s, s), float("-inf"), device=seq.device,
                                      dtype=x.dtype), 1) if self.causal else None)
        for layer in self.layers:
            x = layer(x, src_mask=mask)
        return x @ self.items.weight.t()  # tied output layer: logits over every item


def build_sasrec(cfg: dict[str, Any], dtype: torch.dtype) -> Built:
    model, b = SasRec(cfg), cfg["batch_size"]

    def make_batch() -> Batch:
        seq = torch.randint(0, cfg["items"], (b, cfg["seq_len"]))
        return seq, torch.randint(0, cfg["items"], (b, cfg["seq_len"]))

    def loss(m: nn.Module, batch: Batch) -> torch.Tensor:
        seq, y = batch
        return nn.functional.cross_entropy(m(seq).flatten(0, 1), y.flatten())

    return model, make_batch, loss


class QrDlrm(nn.Module):
    """DLRM over quotient-remainder compositional embeddings (Shi et al., KDD 2020)."""

    def __init__(self, cfg: dict[str, Any]):
        super().__init__()
        d, m = cfg["dim"], cfg["collisions"]
        self.m = m
        self.q = nn.ModuleList(Lookup(-(-r // m), d, cfg) for r, _ in cfg["tables"])
        self.r = nn.ModuleList(Lookup(m, d, cfg) for _ in cfg["tables"])
        self.bottom = _mlp(cfg["bottom_mlp"] + [d], cfg["dense_features"])
        n = len(cfg["tables"]) + 1
        self.top = _mlp(cfg["top_mlp"] + [1], d + n * (n - 1) // 2, last_act=False)

    def forward(self, dense: torch.Tensor, *ids: torch.Tensor) -> torch.Tensor:
        x = self.bottom(dense)
        embs = [q(i // self.m) * r(i % self.m)
                for q, r, i in zip(self.q, self.r, ids, strict=True)]
        feats = torch.stack([x, *embs], 1)
        inter = torch.bmm(feats, feats.transpose(1, 2))
        n = feats.shape[1]
        li, lj = torch.tril_indices(n, n, offset=-1, device=feats.device)
        return self.top(torch.cat([x, inter[:, li, lj]], 1))


class MixedDim(nn.Module):
    """DLRM with a dimension per table, each projected to the common width."""

    def __init__(self, cfg: dict[str, Any]):
        super().__init__()
        d = cfg["dim"]
        self.tables = nn.ModuleList(Lookup(r, td, cfg) for r, td, _ in cfg["tables"])
        self.proj = nn.ModuleList(nn.Linear(td, d, bias=False) for _, td, _ in cfg["tables"])
        self.bottom = _mlp(cfg["bottom_mlp"] + [d], cfg["dense_features"])
        n = len(cfg["tables"]) + 1
        self.top = _mlp(cfg["top_mlp"] + [1], d + n * (n - 1) // 2, last_act=False)

    def forward(self, dense: torch.Tensor, *ids: torch.Tensor) -> torch.Tensor:
        x = self.bottom(dense)
        embs = [p(t(i)) for t, p, i in zip(self.tables, self.proj, ids, strict=True)]
        feats = torch.stack([x, *embs], 1)
        inter = torch.bmm(feats, feats.transpose(1, 2))
        n = feats.shape[1]
        li, lj = torch.tril_indices(n, n, offset=-1, device=feats.device)
        return self.top(torch.cat([x, inter[:, li, lj]], 1))


def _dense_ids_builder(cls: type[nn.Module]):  # noqa: ANN202
    def build(cfg: dict[str, Any], dtype: torch.dtype) -> Built:
        model, b = cls(cfg), cfg["batch_size"]

        def make_batch() -> Batch:
            return (torch.rand(b, 1, dtype=dtype),
                    torch.randn(b, cfg["dense_features"], dtype=dtype),
                    *[_ids(t[0], b, t[-1]) for t in cfg["tables"]])

        def loss(m: nn.Module, batch: Batch) -> torch.Tensor:
            y, dense, *ids = batch
            return _bce(m(dense, *ids), y)

        return model, make_batch, loss

    return build


BUILDERS = {
    "din": build_din, "two_tower": build_two_tower, "mmoe": build_mmoe, "fm": build_fm,
    "sasrec": build_sasrec, "qr_dlrm": _dense_ids_builder(QrDlrm),
    "mixed_dim": _dense_ids_builder(MixedDim),
}
