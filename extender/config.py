"""Settings of the extender service: named defaults with reasons, one validation pass."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

# Bodies carry full Node objects when nodeCacheCapable is false: 5,000 real Nodes with status
# images and conditions run to ~15-25 KiB each, so 128 MiB leaves room.
DEFAULT_MAX_BODY_MIB = 128
# With nodeCacheCapable (the chart's setting) a body is a Pod and node names: 15,000 names of
# 253 characters and the largest Pod etcd stores (1.5 MiB) fit in 8 MiB.
DEFAULT_MAX_BODY_MIB_NAMES = 8
# A reservation made at bind whose Binding never lands (crash between the two) is given back
# after this; bind itself takes well under a second.
DEFAULT_RESERVATION_TTL_S = 120.0


@dataclass
class Settings:
    host: str = "127.0.0.1"
    port: int = 8888
    prefix: str = "/scheduler"
    nodes: Path | None = None  # node-conf.yaml; None = inventory from Node annotations only
    store: str = "memory"  # "memory" or a redis:// URL (replicas share it)
    predictions: str | None = None  # redis:// URL of predicted demands (defaults to store's)
    policy: str = "sparse"
    interference: Path | None = None
    reservation_ttl_s: float = DEFAULT_RESERVATION_TTL_S
    max_body_mib: int | None = None  # None: sized to the mode (node_cache_capable)
    # The scheduler's nodeCacheCapable: True = requests carry node names only.
    node_cache_capable: bool = True
    # Let a request's Nodes.items (their sparse.io/gpu-inventory annotation) change the GPU
    # inventory. Off: only the node-conf file, Node objects read from the API server and the
    # agent are trusted (docs/security.md).
    trust_request_inventory: bool = False
    metrics_port: int | None = None  # set: /metrics and /inspect only there
    inspect: bool = True  # serve /inspect (pod names and UIDs)
    max_in_flight: int = 64  # verb requests worked on at once; more wait
    queue_timeout_s: float = 2.0  # the longest a request waits for a slot
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_client_ca: Path | None = None  # set = mutual TLS: clients must present a cert it signed
    kubeconfig: Path | None = None
    in_cluster: bool = False
    expire_interval_s: float = 10.0
    # Pods the watch follows: those of the scheduler profile that calls this extender.
    pod_selector: str = "spec.schedulerName=sparse-scheduler"
    success_events: bool = False  # a Normal event per bound pod (the scheduler posts one too)
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def body_limit_mib(self) -> int:
        if self.max_body_mib is not None:
            return self.max_body_mib
        return DEFAULT_MAX_BODY_MIB_NAMES if self.node_cache_capable else DEFAULT_MAX_BODY_MIB

    @property
    def kube_enabled(self) -> bool:
        return self.in_cluster or self.kubeconfig is not None

    def validate(self) -> list[str]:
        """Every problem at once, so a user fixes them in one go."""
        errors = []
        if not self.prefix.startswith("/"):
            errors.append(f"--prefix must start with '/', got {self.prefix!r}")
        if not 0 < self.port < 65536:
            errors.append(f"--port must be 1..65535, got {self.port}")
        if self.store != "memory" and not self.store.startswith(("redis://", "rediss://",
                                                                 "unix://")):
            errors.append(f"--store must be 'memory' or a redis:// URL, got {self.store!r}")
        if (self.tls_cert is None) != (self.tls_key is None):
            errors.append("--tls-cert and --tls-key go together")
        if self.tls_client_ca is not None and self.tls_cert is None:
            errors.append("--tls-client-ca needs --tls-cert and --tls-key")
        for label, path in (("--nodes", self.nodes), ("--tls-cert", self.tls_cert),
                            ("--tls-key", self.tls_key), ("--tls-client-ca", self.tls_client_ca),
                            ("--interference", self.interference),
                            ("--kubeconfig", self.kubeconfig)):
            if path is not None and not Path(path).is_file():
                errors.append(f"{label}: {path} is not a file")
        if self.reservation_ttl_s <= 0:
            errors.append("--reservation-ttl must be positive")
        if self.max_body_mib is not None and self.max_body_mib < 1:
            errors.append("--max-body-mib must be at least 1")
        if self.metrics_port is not None and (not 0 < self.metrics_port < 65536
                                              or self.metrics_port == self.port):
            errors.append(f"--metrics-port must be 1..65535 and differ from --port,"
                          f" got {self.metrics_port}")
        if self.max_in_flight < 1:
            errors.append("--max-in-flight must be at least 1")
        if not 0 < self.queue_timeout_s < 5:
            errors.append("--queue-timeout must be above 0 and below the scheduler's 5 s"
                          " httpTimeout")
        if self.nodes is None and not self.kube_enabled:
            errors.append(
                "give --nodes (a node-conf.yaml) or a cluster (--kubeconfig/--in-cluster)"
            )
        return errors
