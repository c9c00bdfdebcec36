"""Solo profiles of running and pending pods, and the pair speeds the learned model gives them.

Pure. A profile is (GPU utilisation %, memory-controller utilisation %, GPU memory MiB) measured
alone. Pods with equal profiles share one entry; the speed of a pair of entries is computed the
first time it is asked for (all pairs a lookup misses in one vectorised model call) and kept, so
scoring a placement is mostly table lookups.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from extender.errors import InvalidDemand
from extender.interference.pairmodel import PairModel

Profile = tuple[float, float, float]


def parse_profile(text: str, what: str = "solo profile") -> Profile:
    """``"<GPU util %>,<memory-controller util %>,<GPU memory MiB>"``; the MiB may be empty."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 3:
        raise InvalidDemand(f"{what} {text[:60]!r}: expected '<GPU util %>,<memory util %>,"
                            "<MiB>', e.g. '45,8,2100'")
    try:
        util, mem_util = float(parts[0]), float(parts[1])
        mib = float(parts[2]) if parts[2] else float("nan")
    except ValueError:
        raise InvalidDemand(f"{what} {text[:60]!r}: values must be numbers") from None
    if not (0 <= util <= 100 and 0 <= mem_util <= 100) or mib < 0:
        raise InvalidDemand(f"{what} {text[:60]!r}: utilisations are 0..100 %, MiB >= 0")
    return (util, mem_util, mib)


class ProfileBook:
    def __init__(self, model: PairModel, capacity: int = 64) -> None:
        self.model = model
        self._ids: dict[Profile, int] = {}
        self._by_uid: dict[str, int] = {}
        self._table = np.zeros((0, 3))
        self._speed = np.full((capacity, capacity), np.nan)  # [a, b] = a's speed next to b

    def __len__(self) -> int:
        return len(self._by_uid)

    @staticmethod
    def key(profile: Sequence[float]) -> Profile:
        util, mem_util, mib = (float(v) for v in profile)
        mib = float("nan") if mib != mib else round(mib / 64.0) * 64.0  # NaN: unknown
        return (round(util, 1), round(mem_util, 1), mib)

    def intern(self, profile: Sequence[float]) -> int:
        key = self.key(profile)
        pid = self._ids.get(key)
        if pid is not None:
            return pid
        pid = len(self._ids)
        if pid >= len(self._speed):
            grown = np.full((2 * len(self._speed),) * 2, np.nan)
            grown[:pid, :pid] = self._speed[:pid, :pid]
            self._speed = grown
        self._table = np.vstack([self._table, np.array(key, dtype=np.float64)])
        self._ids[key] = pid
        return pid

    def add(self, uid: str, profile: Sequence[float]) -> int:
        pid = self.intern(profile)
        self._by_uid[uid] = pid
        return pid

    def remove(self, uid: str) -> None:
        self._by_uid.pop(uid, None)

    def id_of(self, uid: str) -> int:
        """Profile id of a pod, -1 when its profile is unknown."""
        return self._by_uid.get(uid, -1)

    def speed(self, a: np.ndarray | int, b: np.ndarray | int) -> np.ndarray:
        """Speed of profile(s) ``a`` next to profile(s) ``b`` (ids, broadcast)."""
        a, b = np.broadcast_arrays(np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64))
        out = self._speed[a, b]
        missing = np.isnan(out)
        if missing.any():
            ma, mb = a[missing], b[missing]
            values = self.model.predict(self._table[ma], self._table[mb])
            self._speed[ma, mb] = values
            out = self._speed[a, b]
        return out
