"""Sources of embedding tables for ``sparse-embed load``: PyTorch state dicts and NumPy files.

* ``.pt`` / ``.pth``: a state dict (or a module's); every 2-D floating tensor whose name matches
  ``--match`` becomes a table named after its key (dots -> underscores, ``.weight`` dropped).
  Needs torch; tensors are read memory-mapped when the file allows it.
* ``.npy``: one table named after the file. ``.npz``: one table per array.
Rows go to the store in chunks, so tables larger than memory stream from memory-mapped files.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

CHUNK_ROWS = 65_536


@dataclass
class Source:
    table: str
    array: Any  # anything sliceable to (rows, dim) NumPy arrays

    @property
    def rows(self) -> int:
        return int(self.array.shape[0])

    @property
    def dim(self) -> int:
        return int(self.array.shape[1])

    def chunks(self, size: int = CHUNK_ROWS) -> Iterator[np.ndarray]:
        for start in range(0, self.rows, size):
            yield np.asarray(self.array[start:start + size], dtype=np.float32)


def table_name(key: str) -> str:
    key = re.sub(r"\.weight$", "", key)
    return re.sub(r"[^A-Za-z0-9_\-:.]", "_", key).replace(".", "_")


def from_state_dict(path: Path, match: str = "*") -> list[Source]:
    try:
        import torch
    except ImportError:
        raise SystemExit(f"{path}: reading a PyTorch state dict needs torch "
                         "(pip install 'sparse[torch]'), or export the tables with numpy") from None
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except RuntimeError:  # older serialisation: no mmap
        obj = torch.load(path, map_location="cpu", weights_only=True)
    if hasattr(obj, "state_dict"):
        obj = obj.state_dict()
    if not isinstance(obj, dict):
        raise SystemExit(f"{path}: not a state dict")
    out = []
    for key, value in obj.items():
        if (isinstance(value, torch.Tensor) and value.ndim == 2 and value.is_floating_point()
                and fnmatch.fnmatch(key, match)):
            out.append(Source(table_name(key), value.detach().float().numpy()))
    return out


def from_numpy(path: Path, match: str = "*") -> list[Source]:
    if path.suffix == ".npy":
        arr = np.load(path, mmap_mode="r")
        return [Source(table_name(path.stem), arr)] if arr.ndim == 2 else []
    data = np.load(path, mmap_mode="r")
    return [Source(table_name(k), data[k]) for k in data.files
            if data[k].ndim == 2 and fnmatch.fnmatch(k, match)]


def sources(path: Path, match: str = "*") -> list[Source]:
    if path.suffix in (".pt", ".pth", ".bin"):
        found = from_state_dict(path, match)
    elif path.suffix in (".npy", ".npz"):
        found = from_numpy(path, match)
    else:
        raise SystemExit(f"{path}: expected .pt/.pth (state dict) or .npy/.npz")
    if not found:
        raise SystemExit(f"{path}: no 2-D floating tensor matching {match!r}")
    return found
