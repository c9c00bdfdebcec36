"""Reservation values and the one capacity rule both ledger backends enforce. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import msgspec

from extender.errors import ReservationConflict

STATE_RESERVED = "reserved"  # decided and booked, binding not confirmed yet: expires
STATE_BOUND = "bound"  # the pod is bound: lives until the pod is gone


class Allocation(msgspec.Struct, frozen=True):
    """One container's part of one GPU."""

    gpu: str  # UUID
    container: str
    mem_mib: int
    milli: int


class GpuCapacity(msgspec.Struct, frozen=True):
    mem_mib: int
    milli: int = 1000


class Reservation(msgspec.Struct, frozen=True):
    pod_uid: str
    namespace: str
    name: str
    node: str
    allocations: tuple[Allocation, ...]
    job_class: str = "unknown"
    state: str = STATE_RESERVED
    created_at: float = 0.0
    expires_at: float | None = None  # only while reserved
    whole_gpus: tuple[str, ...] = ()  # UUIDs held exclusively

    @property
    def gpus(self) -> tuple[str, ...]:
        """Distinct GPU UUIDs, in allocation order."""
        return tuple(dict.fromkeys(a.gpu for a in self.allocations))

    def per_gpu(self) -> dict[str, tuple[int, int]]:
        """(mem_mib, milli) booked on each GPU by this reservation."""
        out: dict[str, tuple[int, int]] = {}
        for a in self.allocations:
            mem, milli = out.get(a.gpu, (0, 0))
            out[a.gpu] = (mem + a.mem_mib, milli + a.milli)
        return out

    def bound(self) -> Reservation:
        return msgspec.structs.replace(self, state=STATE_BOUND, expires_at=None)

    def same_booking(self, other: Reservation) -> bool:
        return self.node == other.node and sorted(self.allocations, key=_alloc_key) == sorted(
            other.allocations, key=_alloc_key
        )


def _alloc_key(a: Allocation) -> tuple[str, str]:
    return (a.gpu, a.container)


@dataclass
class Usage:
    """Booked memory and compute per GPU UUID."""

    mem_mib: dict[str, int] = field(default_factory=dict)
    milli: dict[str, int] = field(default_factory=dict)

    def add(self, reservation: Reservation, sign: int = 1) -> None:
        for gpu, (mem, milli) in reservation.per_gpu().items():
            self.mem_mib[gpu] = self.mem_mib.get(gpu, 0) + sign * mem
            self.milli[gpu] = self.milli.get(gpu, 0) + sign * milli
            if self.mem_mib[gpu] == 0 and self.milli[gpu] == 0:
                del self.mem_mib[gpu], self.milli[gpu]

    @classmethod
    def of(cls, reservations: Iterable[Reservation]) -> Usage:
        usage = cls()
        for r in reservations:
            usage.add(r)
        return usage


def validate(reservation: Reservation, capacities: Mapping[str, GpuCapacity]) -> None:
    """Shape checks that do not depend on other reservations."""
    if not reservation.pod_uid or not reservation.allocations:
        raise ReservationConflict("a reservation needs a pod UID and at least one allocation")
    for a in reservation.allocations:
        if a.mem_mib < 0 or a.milli < 0:
            raise ReservationConflict(f"negative amount on {a.gpu}", a.gpu)
        if a.gpu not in capacities:
            raise ReservationConflict(f"GPU {a.gpu} has no known capacity", a.gpu)


def check_fits(
    usage: Usage, reservation: Reservation, capacities: Mapping[str, GpuCapacity]
) -> None:
    """Raise ReservationConflict unless every GPU stays within memory and compute."""
    validate(reservation, capacities)
    for gpu, (mem, milli) in reservation.per_gpu().items():
        cap = capacities[gpu]
        used_mem = usage.mem_mib.get(gpu, 0)
        used_milli = usage.milli.get(gpu, 0)
        if used_mem + mem > cap.mem_mib:
            raise ReservationConflict(
                f"GPU {gpu}: {mem} MiB requested, {cap.mem_mib - used_mem} MiB free", gpu
            )
        if used_milli + milli > cap.milli:
            raise ReservationConflict(
                f"GPU {gpu}: {milli} milli requested, {cap.milli - used_milli} free", gpu
            )


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Reservation)


def to_json(reservation: Reservation) -> bytes:
    return _encoder.encode(reservation)


def from_json(data: bytes | str) -> Reservation:
    return _decoder.decode(data)
