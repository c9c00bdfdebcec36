"""Settings of the extender service: named defaults with reasons, one validation pass."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

# Bodies carry full Node objects when nodeCacheCapable is false: 5,000 real Nodes with status
# images and conditions run to ~15-25 KiB each, so 128 MiB leaves room.
DEFAULT_MAX_BODY_MIB = 128
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
    max_body_mib: int = DEFAULT_MAX_BODY_MIB
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
        if self.max_body_mib < 1:
            errors.append("--max-body-mib must be at least 1")
        if self.nodes is None and not self.kube_enabled:
            errors.append(
                "give --nodes (a node-conf.yaml) or a cluster (--kubeconfig/--in-cluster)"
            )
        return errors
