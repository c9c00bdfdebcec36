"""sparse extender: kube-scheduler HTTP extender for interference-aware GPU sharing.

Rings (inner to outer):
  pure core   protocol, inventory, demand, quantity, ledger.rules, placement, interference
  adapters    ledger.memory, ledger.redis, kube, http, demandsource
  entry       cli, service (the async seam that awaits stores and calls the core)
"""

__version__ = "0.1.0"
