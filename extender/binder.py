"""What happens after the ledger booked a pod's GPUs. The Kubernetes binder lives in kube/."""

from __future__ import annotations

from typing import Protocol

from extender.ledger.rules import Reservation
from extender.protocol import BindingArgs, Pod


class BindError(Exception):
    """Binding failed; the reservation is rolled back and the scheduler retries."""


class Binder(Protocol):
    async def bind(self, args: BindingArgs, reservation: Reservation) -> None: ...

    async def fetch_pod(self, namespace: str, name: str) -> Pod | None:
        """The pod from the API, when the extender has no filter-time copy (e.g. restarted)."""
        ...


class LedgerOnlyBinder:
    """No cluster: the booking in the ledger is the whole of binding."""

    async def bind(self, args: BindingArgs, reservation: Reservation) -> None:
        return None

    async def fetch_pod(self, namespace: str, name: str) -> Pod | None:
        return None
