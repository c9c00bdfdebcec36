"""What a verb decided, for observers (metrics, Kubernetes events)."""

from __future__ import annotations

from dataclasses import dataclass

from extender.ledger.rules import Reservation


@dataclass
class Outcome:
    """Observers (metrics, Kubernetes events) hear about decisions through this."""

    verb: str  # filter, bind, or wait (a reader held back for a warm node)
    namespace: str
    name: str
    uid: str
    ok: bool
    message: str = ""
    reservation: Reservation | None = None
    interference: float | None = None  # throughput lost with the share GPU's residents

    @property
    def pod(self) -> str:
        return f"{self.namespace}/{self.name}"
