from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from extender import protocol
from extender.errors import InvalidRequest

WIRE = Path(__file__).parent / "fixtures" / "wire"


def load(name: str) -> bytes:
    return (WIRE / name).read_bytes()


def test_pascal_and_lowercase_args_agree():
    upper = protocol.decode_extender_args(load("filter_nodenames.json"))
    lower = protocol.decode_extender_args(load("filter_lowercase.json"))
    assert upper.pod == lower.pod
    assert upper.node_names == ["gpu-a", "gpu-b", "cpu-1"]
    assert lower.node_names == ["gpu-a", "gpu-b"]
    assert upper.nodes is None and upper.raw_nodes is None


def test_full_nodes_are_echoed_verbatim():
    args = protocol.decode_extender_args(load("filter_nodes.json"))
    assert args.node_names == ["gpu-a", "gpu-b"]
    result = protocol.filter_result(["gpu-b"], {"gpu-a": "busy"}, {}, args)
    body = json.loads(protocol.encode(result))
    original = json.loads(load("filter_nodes.json"))["Nodes"]["items"][1]
    assert body["Nodes"]["items"] == [original]
    assert body["FailedNodes"] == {"gpu-a": "busy"}


def test_filter_result_keys_are_pascal_case():
    body = json.loads(protocol.encode(protocol.filter_result(["a"], {}, {"b": "x"})))
    assert set(body) == {"NodeNames", "Nodes", "FailedNodes", "FailedAndUnresolvableNodes",
                         "Error"}


def test_binding_args():
    args = protocol.decode_binding_args(load("bind.json"))
    assert (args.pod_name, args.pod_namespace, args.node) == ("rec-train-0", "ml", "gpu-a")
    with pytest.raises(InvalidRequest, match="missing"):
        protocol.decode_binding_args(b'{"PodName": "x"}')


@pytest.mark.parametrize("name", ["preempt_meta.json", "preempt_full.json",
                                  "preempt_lowercase.json"])
def test_preemption_args_all_forms(name):
    args = protocol.decode_preemption_args(load(name))
    assert args.victims["gpu-b"].pod_uids == ["victim-1"]


def test_priorities_are_integers():
    body = protocol.encode([protocol.HostPriority(Host="a", Score=7)])
    assert body == b'[{"Host":"a","Score":7}]'


@pytest.mark.parametrize("body", [
    b"", b"{", b"[]", b"null", b'{"Pod": 5}', b'{"Pod": {"metadata": {"name": "x"}}}',
    b'{"Pod": {"metadata": {"name": "x", "uid": "u"}}}',  # no nodes
    b'{"Pod": {"metadata": {"name": "x", "uid": "u"}}, "NodeNames": [""]}',
    b'{"Pod": {"metadata": {"name": "x", "uid": "u", "annotations": {"a": {"deep": 1}}}},'
    b' "NodeNames": ["n"]}',
    b'{"Pod": {"metadata": {"name": "x", "uid": "u"}}, "Nodes": {"items": [{"metadata": {}}]}}',
    b"[" * 10000,
])
def test_malformed_args_raise_invalid_request(body):
    with pytest.raises(InvalidRequest):
        protocol.decode_extender_args(body)


def test_pod_from_dict_matches_wire_decoding():
    raw = json.loads(load("filter_nodenames.json"))["Pod"]
    assert protocol.pod_from_dict(raw) == msgspec.json.decode(
        json.dumps(raw).encode(), type=protocol.Pod)
