"""Kubernetes adapter (kubernetes-asyncio): API client, binder, watches, ledger rebuild, events.

Nothing here decides placement; it feeds the Scheduler (``extender.service``) with Nodes and
Pods and carries its decisions to the API server.
"""
