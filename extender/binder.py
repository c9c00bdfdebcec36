"""What happens after the ledger booked a pod's GPUs. The Kubernetes binder lives in kube/."""

from __future__ import annotations

from typing import Protocol

from extender.ledger.rules import Reservation
from extender.protocol import BindingArgs, Pod


class BindError(Exception):
    """Binding failed; the reservation is rolled back and the scheduler retries."""


class Binder(Protocol):
    # True when bind() makes the pod bound somewhere else (the API server): a booking whose
    # confirm failed then stays, since the pod holds the GPUs whatever the ledger says.
    binds_pods: bool

    async def bind(self, args: BindingArgs, reservation: Reservation) -> None: ...

    async def fetch_pod(self, namespace: str, name: str) -> Pod | None:
        """The pod from the API, when the extender has no filter-time copy (e.g. restarted)."""
        ...


class LedgerOnlyBinder:
    """No cluster: the booking in the ledger is the whole of binding."""

    binds_pods = False

    async def bind(self, args: BindingArgs, reservation: Reservation) -> None:
        return None

    async def fetch_pod(self, namespace: str, name: str) -> Pod | None:
        return None
