"""kube-scheduler HTTP extender wire types (k8s.io/kube-scheduler/extender/v1) and codecs.

Pure: bytes in, typed values out, and back. The scheduler sends Go field names (PascalCase,
no json tags); the pre-staging API used lowercase tags, which are accepted on input too.
Responses are always PascalCase. Full Node objects (``nodeCacheCapable: false``) are kept as
raw JSON so a filter reply can echo them without re-encoding.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any

import msgspec

from extender.errors import InvalidRequest

# The Pod's structs (and the per-node answer rows) are kept out of the cyclic garbage
# collector (``gc=False``): they hold only strings, numbers, dicts and lists of each other, so
# they can never be part of a reference cycle, and the extender keeps thousands of pending
# Pods until bind: each full collection walked all of them, a stall of every request.
Quantity = str | int | float
NodeName = Annotated[str, msgspec.Meta(min_length=1, max_length=253)]
# Far above the 5,000 nodes Kubernetes supports (15,000 in the largest clusters): a request
# naming more is hostile, and bounding it bounds the work one request can cost.
MAX_NODES_PER_REQUEST = 50_000
MAX_VICTIMS_PER_NODE = 10_000
# The API server's own limits on a Pod: names of DNS subdomains (253), namespaces of DNS
# labels (63), 256 KiB of annotations in all. Kept here so that what the extender remembers
# per pod (its demand, until bind) stays small whatever a caller sends.
MAX_NAME = 253
MAX_NAMESPACE = 63
MAX_UID = 128
MAX_CONTAINERS = 256
MAX_ANNOTATION_BYTES = 256 * 1024


class ObjectMeta(msgspec.Struct, omit_defaults=True, gc=False):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    annotations: dict[str, str] | None = None
    labels: dict[str, str] | None = None


def epoch_seconds(timestamp: str | None) -> float | None:
    """A Kubernetes timestamp (RFC 3339: ``creationTimestamp``, a condition's
    ``lastTransitionTime``) in epoch seconds, a zone-less one read as UTC (as the API server
    writes them); None when absent or not RFC 3339."""
    if not timestamp:
        return None
    try:
        when = dt.datetime.fromisoformat(timestamp)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.timestamp()


class PodMeta(ObjectMeta, omit_defaults=True, gc=False):
    """A pod's metadata: also when it was created (RFC 3339, the API server's clock), which
    bounds waits the same on every replica and across restarts. Nodes' is not decoded."""

    creationTimestamp: str | None = None  # noqa: N815 - Kubernetes spelling


class ResourceRequirements(msgspec.Struct, omit_defaults=True, gc=False):
    requests: dict[str, Quantity] | None = None
    limits: dict[str, Quantity] | None = None


class Container(msgspec.Struct, omit_defaults=True, gc=False):
    name: str = ""
    resources: ResourceRequirements | None = None


class PodSpec(msgspec.Struct, omit_defaults=True, gc=False):
    containers: list[Container] = []
    initContainers: list[Container] | None = None  # noqa: N815 - Kubernetes spelling
    nodeName: str | None = None  # noqa: N815
    schedulerName: str | None = None  # noqa: N815


class PodStatus(msgspec.Struct, omit_defaults=True, gc=False):
    phase: str | None = None


class Pod(msgspec.Struct, omit_defaults=True, gc=False):
    metadata: PodMeta = msgspec.field(default_factory=PodMeta)
    spec: PodSpec = msgspec.field(default_factory=PodSpec)
    status: PodStatus | None = None


class Allocatable(msgspec.Struct, omit_defaults=True, gc=False):
    """A Node's allocatable CPU and memory; its other resources are skipped when decoding."""

    cpu: Quantity | None = None
    memory: Quantity | None = None


class NodeStatusLite(msgspec.Struct, omit_defaults=True):
    allocatable: Allocatable | None = None


class NodeLite(msgspec.Struct, gc=False):
    """The part of a Node object the extender reads; everything else is skipped."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    status: NodeStatusLite | None = None


class _RawNodeList(msgspec.Struct):
    items: list[msgspec.Raw] | None = None


# --- requests --------------------------------------------------------------------------------


class _ExtenderArgsWire(msgspec.Struct):
    Pod: Pod | None = None
    Nodes: _RawNodeList | None = None
    NodeNames: list[NodeName] | None = None
    pod: Pod | None = None
    nodes: _RawNodeList | None = None
    nodenames: list[NodeName] | None = None
    nodeNames: list[NodeName] | None = None  # noqa: N815


class ExtenderArgs(msgspec.Struct):
    """Body of filter and prioritize. Exactly one of ``node_names``/``nodes`` is set."""

    pod: Pod
    node_names: list[str]
    nodes: list[NodeLite] | None  # set when the scheduler sent full Node objects
    raw_nodes: list[msgspec.Raw] | None


class _MetaPod(msgspec.Struct):
    UID: str | None = None
    uid: str | None = None


class _VictimMeta(msgspec.Struct):
    uid: str | None = None


class _VictimPod(msgspec.Struct):
    """A victim: {UID} (MetaVictims), {uid} (old tags) or a full Pod (metadata.uid)."""

    UID: str | None = None
    uid: str | None = None
    metadata: _VictimMeta | None = None


class _VictimsWire(msgspec.Struct):
    Pods: list[_VictimPod] | None = None
    pods: list[_VictimPod] | None = None
    NumPDBViolations: int = 0
    numPDBViolations: int = 0  # noqa: N815


class _PreemptionArgsWire(msgspec.Struct):
    Pod: Pod | None = None
    pod: Pod | None = None
    NodeNameToVictims: dict[str, _VictimsWire] | None = None
    nodeNameToVictims: dict[str, _VictimsWire] | None = None  # noqa: N815
    NodeNameToMetaVictims: dict[str, _VictimsWire] | None = None
    nodeNameToMetaVictims: dict[str, _VictimsWire] | None = None  # noqa: N815


class Victims(msgspec.Struct):
    pod_uids: list[str]
    num_pdb_violations: int


class PreemptionArgs(msgspec.Struct):
    pod: Pod
    victims: dict[str, Victims]


class _BindingArgsWire(msgspec.Struct):
    PodName: str | None = None
    PodNamespace: str | None = None
    PodUID: str | None = None
    Node: str | None = None
    podName: str | None = None  # noqa: N815
    podNamespace: str | None = None  # noqa: N815
    podUID: str | None = None  # noqa: N815
    node: str | None = None


class BindingArgs(msgspec.Struct):
    pod_name: str
    pod_namespace: str
    pod_uid: str
    node: str


# --- responses -------------------------------------------------------------------------------


class _NodeListOut(msgspec.Struct):
    items: list[msgspec.Raw]


class FilterResult(msgspec.Struct):
    NodeNames: list[str] | None = None
    Nodes: _NodeListOut | None = None
    FailedNodes: dict[str, str] = {}
    FailedAndUnresolvableNodes: dict[str, str] = {}
    Error: str = ""


class HostPriority(msgspec.Struct, gc=False):
    Host: str
    Score: int


class BindingResult(msgspec.Struct):
    Error: str = ""


class MetaPod(msgspec.Struct):
    UID: str


class MetaVictims(msgspec.Struct):
    Pods: list[MetaPod]
    NumPDBViolations: int = 0


class PreemptionResult(msgspec.Struct):
    NodeNameToMetaVictims: dict[str, MetaVictims] = {}


# --- codecs ----------------------------------------------------------------------------------

_args_decoder = msgspec.json.Decoder(_ExtenderArgsWire)
_node_decoder = msgspec.json.Decoder(NodeLite)
_preempt_decoder = msgspec.json.Decoder(_PreemptionArgsWire)
_bind_decoder = msgspec.json.Decoder(_BindingArgsWire)
_pod_decoder = msgspec.json.Decoder(_MetaPod)
_full_pod_decoder = msgspec.json.Decoder(Pod)
_encoder = msgspec.json.Encoder()


def _decode(decoder: msgspec.json.Decoder, body: bytes, what: str) -> Any:
    if not body:
        raise InvalidRequest(f"{what}: empty request body")
    try:
        return decoder.decode(body)
    except msgspec.DecodeError as exc:  # ValidationError is a subclass
        raise InvalidRequest(f"{what}: {exc}") from exc
    except RecursionError as exc:  # msgspec's depth guard: hostile, not an internal error
        raise InvalidRequest(f"{what}: JSON nested too deeply") from exc


def _unique_names(names: list[str], what: str) -> list[str]:
    """The scheduler never repeats a node; a repeated name is dropped (the answer stays a
    subset of the request), and the count of distinct names is bounded."""
    if len(set(names)) == len(names) <= MAX_NODES_PER_REQUEST:  # the normal case
        return names
    unique = list(dict.fromkeys(names))
    if len(unique) > MAX_NODES_PER_REQUEST:
        raise InvalidRequest(
            f"{what}: {len(unique)} nodes in one request; at most {MAX_NODES_PER_REQUEST}")
    return unique if len(unique) != len(names) else names


def _first(*values: Any) -> Any:
    return next((v for v in values if v is not None), None)


def _check_pod(pod: Pod | None, what: str) -> Pod:
    if pod is None:
        raise InvalidRequest(f"{what}: missing Pod")
    meta = pod.metadata
    if not meta.uid or not meta.name:
        raise InvalidRequest(f"{what}: Pod.metadata.name and Pod.metadata.uid are required")
    if (len(meta.name) > MAX_NAME or len(meta.namespace) > MAX_NAMESPACE
            or len(meta.uid) > MAX_UID):
        raise InvalidRequest(f"{what}: Pod name, namespace or uid longer than Kubernetes allows")
    containers = [*pod.spec.containers, *(pod.spec.initContainers or [])]
    if len(containers) > MAX_CONTAINERS or any(len(c.name) > MAX_NAME for c in containers):
        raise InvalidRequest(f"{what}: more than {MAX_CONTAINERS} containers, or a container"
                             f" name longer than {MAX_NAME} characters")
    annotations = meta.annotations or {}
    if sum(len(k) + len(v) for k, v in annotations.items()) > MAX_ANNOTATION_BYTES:
        raise InvalidRequest(f"{what}: Pod annotations exceed {MAX_ANNOTATION_BYTES // 1024} KiB")
    return pod


def decode_extender_args(body: bytes, what: str = "ExtenderArgs") -> ExtenderArgs:
    wire: _ExtenderArgsWire = _decode(_args_decoder, body, what)
    pod = _check_pod(_first(wire.Pod, wire.pod), what)
    names = _first(wire.NodeNames, wire.nodenames, wire.nodeNames)
    node_list = _first(wire.Nodes, wire.nodes)
    if names is not None:
        return ExtenderArgs(pod=pod, node_names=_unique_names(names, what), nodes=None,
                            raw_nodes=None)
    if node_list is not None:
        raws = node_list.items or []
        if len(raws) > MAX_NODES_PER_REQUEST:
            raise InvalidRequest(
                f"{what}: {len(raws)} nodes in one request; at most {MAX_NODES_PER_REQUEST}")
        try:
            nodes = [_node_decoder.decode(raw) for raw in raws]
        except msgspec.DecodeError as exc:
            raise InvalidRequest(f"{what}: Nodes.items: {exc}") from exc
        except RecursionError as exc:
            raise InvalidRequest(f"{what}: Nodes.items: JSON nested too deeply") from exc
        if any(not n.metadata.name or len(n.metadata.name) > 253 for n in nodes):
            raise InvalidRequest(f"{what}: a Node in Nodes.items has no valid metadata.name")
        if len({n.metadata.name for n in nodes}) != len(nodes):  # keep the first of each
            seen: set[str] = set()
            keep = [i for i, n in enumerate(nodes)
                    if not (n.metadata.name in seen or seen.add(n.metadata.name))]
            nodes, raws = [nodes[i] for i in keep], [raws[i] for i in keep]
        return ExtenderArgs(
            pod=pod, node_names=[n.metadata.name for n in nodes], nodes=nodes, raw_nodes=raws
        )
    raise InvalidRequest(f"{what}: neither NodeNames nor Nodes is set")


def decode_binding_args(body: bytes) -> BindingArgs:
    wire: _BindingArgsWire = _decode(_bind_decoder, body, "ExtenderBindingArgs")
    args = BindingArgs(
        pod_name=_first(wire.PodName, wire.podName) or "",
        pod_namespace=_first(wire.PodNamespace, wire.podNamespace) or "",
        pod_uid=_first(wire.PodUID, wire.podUID) or "",
        node=_first(wire.Node, wire.node) or "",
    )
    missing = [k for k in ("pod_name", "pod_uid", "node") if not getattr(args, k)]
    if missing:
        raise InvalidRequest(f"ExtenderBindingArgs: missing {', '.join(missing)}")
    if (len(args.pod_name) > MAX_NAME or len(args.pod_namespace) > MAX_NAMESPACE
            or len(args.pod_uid) > MAX_UID or len(args.node) > MAX_NAME):
        raise InvalidRequest("ExtenderBindingArgs: a name or uid longer than Kubernetes allows")
    return args


def _victim_uid(entry: _VictimPod) -> str:
    uid = entry.UID or entry.uid or (entry.metadata.uid if entry.metadata else None)
    if uid:
        return uid
    raise InvalidRequest("ExtenderPreemptionArgs: a victim pod has no UID")


def decode_preemption_args(body: bytes) -> PreemptionArgs:
    wire: _PreemptionArgsWire = _decode(_preempt_decoder, body, "ExtenderPreemptionArgs")
    pod = _check_pod(_first(wire.Pod, wire.pod), "ExtenderPreemptionArgs")
    by_node = _first(
        wire.NodeNameToMetaVictims,
        wire.nodeNameToMetaVictims,
        wire.NodeNameToVictims,
        wire.nodeNameToVictims,
    )
    if by_node is not None and len(by_node) > MAX_NODES_PER_REQUEST:
        raise InvalidRequest(f"ExtenderPreemptionArgs: more than {MAX_NODES_PER_REQUEST} nodes")
    victims = {}
    for node, v in (by_node or {}).items():
        pods = _first(v.Pods, v.pods) or []
        if not node or len(node) > 253 or len(pods) > MAX_VICTIMS_PER_NODE:
            raise InvalidRequest(f"ExtenderPreemptionArgs: node {node[:80]!r} or its victims"
                                 f" out of bounds (name of 1-253 characters,"
                                 f" at most {MAX_VICTIMS_PER_NODE} victims)")
        victims[node] = Victims(
            pod_uids=[_victim_uid(p) for p in pods],
            num_pdb_violations=max(0, min(v.NumPDBViolations or v.numPDBViolations, 2**31)),
        )
    return PreemptionArgs(pod=pod, victims=victims)


def decode_pod(body: bytes) -> Pod:
    return _decode(_full_pod_decoder, body, "Pod")


def pod_from_dict(obj: dict[str, Any]) -> Pod:
    """Convert an API object (e.g. from a watch) into the same Pod type the protocol uses."""
    try:
        return msgspec.convert(obj, Pod)
    except msgspec.ValidationError as exc:
        raise InvalidRequest(f"Pod: {exc}") from exc


def encode(value: Any) -> bytes:
    return _encoder.encode(value)


def filter_result(
    passed: list[str],
    failed: dict[str, str],
    unresolvable: dict[str, str],
    args: ExtenderArgs | None = None,
    error: str = "",
) -> FilterResult:
    """Answer in the form the request used: names, or the same raw Node objects."""
    if args is not None and args.raw_nodes is not None:
        keep = set(passed)
        items = [
            raw
            for raw, node in zip(args.raw_nodes, args.nodes or [], strict=True)
            if node.metadata.name in keep
        ]
        return FilterResult(
            Nodes=_NodeListOut(items=items),
            FailedNodes=failed,
            FailedAndUnresolvableNodes=unresolvable,
            Error=error,
        )
    return FilterResult(
        NodeNames=passed, FailedNodes=failed, FailedAndUnresolvableNodes=unresolvable, Error=error
    )


def decode_verb(verb: str, body: bytes | bytearray
                ) -> ExtenderArgs | BindingArgs | PreemptionArgs:
    """The request body of one verb, typed (also run in a worker process for big bodies)."""
    if verb in ("filter", "prioritize"):
        return decode_extender_args(body, f"ExtenderArgs ({verb})")
    if verb == "bind":
        return decode_binding_args(body)
    if verb == "preempt":
        return decode_preemption_args(body)
    raise ValueError(f"unknown verb {verb!r}")
