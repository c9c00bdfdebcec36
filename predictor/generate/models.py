"""Real PyTorch models for the dataset sweep (imports torch; only the generator uses this).

Every builder takes a config dict (one sweep row) and returns ``(model, make_batch, loss_fn)``:
``make_batch()`` builds a synthetic batch on the current default device, ``loss_fn(model,
batch)`` returns a scalar loss. No data sets are downloaded.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

Batch = tuple[torch.Tensor, ...]
Built = tuple[nn.Module, Callable[[], Batch], Callable[[nn.Module, Batch], torch.Tensor]]


def _mlp(widths: list[int], d_in: int, last_act: bool = True) -> nn.Sequential:
    layers: list[nn.Module] = []
    prev = d_in
    for i, w in enumerate(widths):
        layers.append(nn.Linear(prev, w))
        if last_act or i < len(widths) - 1:
            layers.append(nn.ReLU())
        prev = w
    return nn.Sequential(*layers)


class RecModel(nn.Module):
    """Wide&Deep, DeepFM or DLRM over ``nn.EmbeddingBag`` tables (mode=sum)."""

    def __init__(self, cfg: dict[str, Any]):
        super().__init__()
        self.kind = cfg["family"]
        tables = cfg["tables"]  # list of (rows, dim, pooling)
        sparse = bool(cfg.get("sparse_grad", False))
        self.embs = nn.ModuleList(
            nn.EmbeddingBag(r, d, mode="sum", sparse=sparse) for r, d, _ in tables
        )
        dense = cfg["dense_features"]
        dims = [d for _, d, _ in tables]
        if self.kind == "wide_deep":
            # wide part: one weight per id of every table (a 1-dim embedding), plus dense linear
            self.wide = nn.ModuleList(
                nn.EmbeddingBag(r, 1, mode="sum", sparse=sparse) for r, _, _ in tables
            )
            self.wide_dense = nn.Linear(dense, 1)
            self.deep = _mlp(cfg["top_mlp"] + [1], dense + sum(dims), last_act=False)
        elif self.kind == "deepfm":
            self.first = nn.ModuleList(
                nn.EmbeddingBag(r, 1, mode="sum", sparse=sparse) for r, _, _ in tables
            )
            self.dense_proj = nn.Linear(dense, dims[0])
            self.deep = _mlp(cfg["top_mlp"] + [1], dims[0] * (len(tables) + 1), last_act=False)
        elif self.kind == "dlrm":
            self.bottom = _mlp(cfg["bottom_mlp"] + [dims[0]], dense)
            n = len(tables) + 1
            self.top = _mlp(cfg["top_mlp"] + [1], dims[0] + n * (n - 1) // 2, last_act=False)
        else:
            raise ValueError(self.kind)

    def forward(self, dense: torch.Tensor, ids: list[torch.Tensor]) -> torch.Tensor:
        pooled = [e(i) for e, i in zip(self.embs, ids, strict=True)]
        if self.kind == "wide_deep":
            wide = sum(w(i) for w, i in zip(self.wide, ids, strict=True)) + self.wide_dense(dense)
            return wide + self.deep(torch.cat([dense, *pooled], dim=1))
        if self.kind == "deepfm":
            fields = torch.stack([self.dense_proj(dense), *pooled], dim=1)  # B x F x d
            first = sum(w(i) for w, i in zip(self.first, ids, strict=True))
            s = fields.sum(dim=1)
            fm = 0.5 * (s * s - (fields * fields).sum(dim=1)).sum(dim=1, keepdim=True)
            return first + fm + self.deep(fields.flatten(1))
        x = self.bottom(dense)
        feats = torch.stack([x, *pooled], dim=1)
        inter = torch.bmm(feats, feats.transpose(1, 2))
        n = feats.shape[1]
        li, lj = torch.tril_indices(n, n, offset=-1, device=feats.device)
        return self.top(torch.cat([x, inter[:, li, lj]], dim=1))


def build_rec(cfg: dict[str, Any], dtype: torch.dtype) -> Built:
    model = RecModel(cfg)
    b = cfg["batch_size"]

    def make_batch() -> Batch:
        dense = torch.randn(b, cfg["dense_features"], dtype=dtype)
        ids = [torch.randint(0, r, (b, max(1, round(p)))) for r, _, p in cfg["tables"]]
        y = torch.rand(b, 1, dtype=dtype)
        return (dense, y, *ids)

    def loss(m: nn.Module, batch: Batch) -> torch.Tensor:
        dense, y, *ids = batch
        return nn.functional.binary_cross_entropy_with_logits(m(dense, list(ids)), y)

    return model, make_batch, loss


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.short = (
            nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
            if stride != 1 or cin != cout else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.b1(self.c1(x)))
        return self.relu(self.b2(self.c2(out)) + self.short(x))


class Bottleneck(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        mid = cout // 4
        self.body = nn.Sequential(
            nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU(inplace=True),
            nn.Conv2d(mid, mid, 3, stride, 1, bias=False), nn.BatchNorm2d(mid),
            nn.ReLU(inplace=True),
            nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout),
        )
        self.relu = nn.ReLU(inplace=True)
        self.short = (
            nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
            if stride != 1 or cin != cout else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.body(x) + self.short(x))


def build_resnet(cfg: dict[str, Any], dtype: torch.dtype) -> Built:
    w, blocks, bottleneck = cfg["width"], cfg["blocks"], cfg["bottleneck"]
    block = Bottleneck if bottleneck else BasicBlock
    exp = 4 if bottleneck else 1
    layers: list[nn.Module] = [
        nn.Conv2d(3, w, 7 if cfg["image"] >= 128 else 3, 2 if cfg["image"] >= 128 else 1,
                  3 if cfg["image"] >= 128 else 1, bias=False),
        nn.BatchNorm2d(w), nn.ReLU(inplace=True),
    ]
    if cfg["image"] >= 128:
        layers.append(nn.MaxPool2d(3, 2, 1))
    cin = w
    for stage, n in enumerate(blocks):
        cout = w * (2**stage) * exp
        for i in range(n):
            layers.append(block(cin, cout, 2 if (i == 0 and stage > 0) else 1))
            cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, cfg["classes"])]
    model = nn.Sequential(*layers)
    return model, _image_batch(cfg, dtype), _ce_loss


def _image_batch(cfg: dict[str, Any], dtype: torch.dtype) -> Callable[[], Batch]:
    def make_batch() -> Batch:
        b, s = cfg["batch_size"], cfg["image"]
        return torch.randn(b, 3, s, s, dtype=dtype), torch.randint(0, cfg["classes"], (b,))

    return make_batch


def _ce_loss(m: nn.Module, batch: Batch) -> torch.Tensor:
    x, y = batch
    return nn.functional.cross_entropy(m(x), y)


class BertLayer(nn.Module):
    """Post-LN BERT encoder layer with explicit attention (matmul + softmax + dropout)."""

    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln1 = nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.ln2 = nn.LayerNorm(d)
        self.drop = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = self.drop(torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, -1))
        y = (att @ v).transpose(1, 2).reshape(b, s, d)
        x = self.ln1(x + self.drop(self.proj(y)))
        return self.ln2(x + self.drop(self.ff(x)))


class Bert(nn.Module):
    def __init__(self, cfg: dict[str, Any]):
        super().__init__()
        d = cfg["d_model"]
        self.tok = nn.Embedding(cfg["vocab"], d)
        self.pos = nn.Embedding(cfg["seq_len"], d)
        self.layers = nn.Sequential(*[BertLayer(d, cfg["heads"]) for _ in range(cfg["layers"])])
        self.head = nn.Linear(d, cfg["vocab"])  # MLM head over all positions

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device)
        return self.head(self.layers(self.tok(ids) + self.pos(pos)))


def build_bert(cfg: dict[str, Any], dtype: torch.dtype) -> Built:
    model = Bert(cfg)

    def make_batch() -> Batch:
        ids = torch.randint(0, cfg["vocab"], (cfg["batch_size"], cfg["seq_len"]))
        return ids, ids.clone()

    def loss(m: nn.Module, batch: Batch) -> torch.Tensor:
        ids, y = batch
        return nn.functional.cross_entropy(m(ids).flatten(0, 1), y.flatten())

    return model, make_batch, loss


def _cbl(cin: int, cout: int, k: int, s: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, k, s, k // 2, bias=False), nn.BatchNorm2d(cout),
        nn.LeakyReLU(0.1, inplace=True),
    )


class _Res(nn.Module):
    def __init__(self, c: int):
        super().__init__()
        self.body = nn.Sequential(_cbl(c, c // 2, 1, 1), _cbl(c // 2, c, 3, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


class Yolo(nn.Module):
    """Darknet-style backbone with three detection heads (YOLOv3-like, no NMS)."""

    def __init__(self, cfg: dict[str, Any]):
        super().__init__()
        w, depth = cfg["width"], cfg["depth"]
        out = 3 * (5 + cfg["classes"])
        chans = [w, 2 * w, 4 * w, 8 * w, 16 * w, 32 * w]
        self.stem = _cbl(3, chans[0], 3, 1)
        self.stages = nn.ModuleList()
        for i in range(1, 6):
            self.stages.append(
                nn.Sequential(_cbl(chans[i - 1], chans[i], 3, 2),
                              *[_Res(chans[i]) for _ in range(depth)])
            )
        self.heads = nn.ModuleList(
            nn.Sequential(_cbl(chans[i], chans[i] // 2, 1, 1), nn.Conv2d(chans[i] // 2, out, 1))
            for i in (3, 4, 5)
        )

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        x = self.stem(x)
        feats = []
        for st in self.stages:
            x = st(x)
            feats.append(x)
        return [h(f) for h, f in zip(self.heads, feats[2:], strict=True)]


def build_yolo(cfg: dict[str, Any], dtype: torch.dtype) -> Built:
    model = Yolo(cfg)

    def make_batch() -> Batch:
        b, s = cfg["batch_size"], cfg["image"]
        return (torch.randn(b, 3, s, s, dtype=dtype),)

    def loss(m: nn.Module, batch: Batch) -> torch.Tensor:
        # synthetic target: squared error against zeros, same cost structure as a YOLO loss
        return sum((o.float() ** 2).mean() for o in m(batch[0]))

    return model, make_batch, loss


_BUILDERS: dict[str, Callable[[dict[str, Any], torch.dtype], Built]] = {
    "wide_deep": build_rec, "deepfm": build_rec, "dlrm": build_rec,
    "resnet": build_resnet, "bert": build_bert, "yolo": build_yolo,
}


def _builder(family: str) -> Callable[[dict[str, Any], torch.dtype], Built]:
    if family in _BUILDERS:
        return _BUILDERS[family]
    from predictor.generate import families

    return families.BUILDERS[family]


def build(cfg: dict[str, Any], dtype: torch.dtype) -> Built:
    """Build with parameters created directly in ``dtype`` (no ``.to()``: FakeTensorMode cannot
    swap parameters)."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        return _builder(cfg["family"])(cfg, dtype)
    finally:
        torch.set_default_dtype(old)


def count_layers(model: nn.Module) -> int:
    """Convolution and linear layers: the annotation's ``layers``, as a user would count it."""
    return sum(1 for m in model.modules() if isinstance(m, nn.Linear | nn.modules.conv._ConvNd))


def make_optimizer(name: str, model: nn.Module, impl: str | None = None) -> Any:
    """The optimizer ``name`` over ``model``'s parameters; ``impl`` is PyTorch's
    implementation: ``foreach`` (default, as on CUDA), ``single`` (a loop over tensors) or
    ``fused`` (one kernel; Adam/AdamW/SGD/Adagrad)."""
    from predictor.generate.measure import Optimizers

    impl = impl or "foreach"
    kw: dict[str, Any] = {"foreach": impl == "foreach"}
    if impl == "fused":
        kw = {"fused": True}
    ps = [p for p in model.parameters() if p.requires_grad]
    if name == "sgd":
        return torch.optim.SGD(ps, lr=0.01, **kw)
    if name == "momentum":
        return torch.optim.SGD(ps, lr=0.01, momentum=0.9, **kw)
    if name == "adagrad":
        return torch.optim.Adagrad(ps, lr=0.01, **kw)
    if name == "adam":
        return torch.optim.Adam(ps, lr=1e-3, **kw)
    if name == "adamw":
        return torch.optim.AdamW(ps, lr=1e-3, **kw)
    if name == "rmsprop":
        return torch.optim.RMSprop(ps, lr=1e-3, foreach=impl == "foreach")
    if name == "sparse_adam":
        # SparseAdam for the (sparse-gradient) tables, Adam for the dense part
        sparse = [p for m in model.modules() if isinstance(m, nn.Embedding | nn.EmbeddingBag)
                  and m.sparse for p in m.parameters()]
        ids = {id(p) for p in sparse}
        dense = [p for p in ps if id(p) not in ids]
        return Optimizers([torch.optim.SparseAdam(sparse, lr=1e-3),
                           torch.optim.Adam(dense, lr=1e-3, **kw)])
    raise ValueError(f"optimizer {name!r} is not built by the generator")
