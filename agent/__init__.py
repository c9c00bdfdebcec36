"""sparse node agent: discovers the node's GPUs and publishes them to the Kubernetes API.

Layout: ``discovery`` (pure: GPU records, model names, the node patches), ``nvml`` and ``fake``
(the two GPU sources), ``kube`` (kubernetes-asyncio I/O), ``metrics`` (Prometheus), ``cli``.
"""
