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
DEFAULT_REDIS_SOCKET_TIMEOUT_S = 1.0
DEFAULT_BIND_TIMEOUT_S = 3.0
STORE_SCHEMES = ("redis://", "rediss://", "unix://", "sentinel://")


@dataclass
class Settings:
    host: str = "127.0.0.1"
    port: int = 8888
    prefix: str = "/scheduler"
    nodes: Path | None = None  # node-conf.yaml; None = inventory from Node annotations only
    # "memory" (lost at exit: tests), "sqlite" (durable file under state_dir; the CLI's
    # default), or a redis:// / sentinel:// URL (replicas share it)
    store: str = "memory"
    state_dir: Path | None = None  # sqlite: None = $XDG_STATE_HOME/sparse
    redis_password_file: Path | None = None  # else $SPARSE_REDIS_PASSWORD, else none
    # Below the scheduler's extender httpTimeout (5 s as shipped): a frozen Redis fails a
    # request in about a second instead of hanging it past the scheduler's patience.
    redis_socket_timeout_s: float = DEFAULT_REDIS_SOCKET_TIMEOUT_S
    redis_connect_timeout_s: float = 0.5
    redis_pool_size: int = 64  # connections per replica; more concurrent requests wait
    redis_pool_wait_s: float = 1.0
    # Replicas that must hold a change before it is acknowledged (WAIT): 1 with Sentinel, so
    # a failover cannot lose an acknowledged booking nor a cut-off master acknowledge one.
    redis_min_replicas: int = 0
    bind_timeout_s: float = DEFAULT_BIND_TIMEOUT_S  # the Binding call is abandoned after this
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
    # Set: filter answers only the nodes within this many score points (0-10) of the best,
    # for a scheduler config without prioritizeVerb (one round trip per pod).
    filter_best_within: float | None = None
    # With filter_best_within: only the single best node (kube-scheduler then skips scoring).
    filter_best_single: bool = False
    success_events: bool = False  # a Normal event per bound pod (the scheduler posts one too)
    # Start the share price worker before ready (``serve``), so its imports (about a second of
    # CPU) are not paid inside the first burst; off, it starts with the first solve.
    start_price_worker: bool = False
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
        if self.store not in ("memory", "sqlite") and not self.store.startswith(STORE_SCHEMES):
            errors.append("--store must be 'sqlite', 'memory', a redis:// URL or"
                          f" sentinel://host:port[,host:port]/<master>[/db], got {self.store!r}")
        if self.store.startswith("sentinel://"):
            from extender.ledger.connect import parse_sentinel_url

            try:
                parse_sentinel_url(self.store)
            except ValueError as exc:
                errors.append(f"--store: {exc}")
        for label, seconds in (("--redis-socket-timeout", self.redis_socket_timeout_s),
                               ("--redis-connect-timeout", self.redis_connect_timeout_s),
                               ("--redis-pool-wait", self.redis_pool_wait_s),
                               ("--bind-timeout", self.bind_timeout_s)):
            if not seconds > 0:
                errors.append(f"{label} must be positive, got {seconds}")
        if self.redis_min_replicas < 0:
            errors.append("--redis-min-replicas must be 0 or more")
        if self.redis_pool_size < 1:
            errors.append("--redis-pool-size must be at least 1")
        if self.redis_password_file is not None and not Path(self.redis_password_file).is_file():
            errors.append(f"--redis-password-file: {self.redis_password_file} is not a file")
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
        if self.filter_best_within is not None and not 0 <= self.filter_best_within <= 10:
            errors.append("--filter-best-within must be 0..10 score points, got"
                          f" {self.filter_best_within:g}")
        if self.filter_best_single and self.filter_best_within is None:
            errors.append("--filter-best-single needs --filter-best-within (a scheduler config"
                          " without prioritizeVerb)")
        if self.nodes is None and not self.kube_enabled:
            errors.append(
                "give --nodes (a node-conf.yaml) or a cluster (--kubeconfig/--in-cluster)"
            )
        return errors
