"""Reservations of GPU memory and compute per GPU UUID.

``rules`` is pure (values and checks); ``store`` is the async contract; ``memory`` (default,
one process) and ``redis`` (atomic Lua scripts, shared by replicas) implement it and pass the
same contract tests.
"""

from extender.ledger.rules import Allocation, GpuCapacity, Reservation
from extender.ledger.store import LedgerStore

__all__ = ["Allocation", "GpuCapacity", "LedgerStore", "Reservation"]
