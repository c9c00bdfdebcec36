"""Pure JSONPatch computation of the mutating webhook."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from webhook.patch import (
    ENV_MPS_MEM,
    ENV_MPS_THREADS,
    ENV_VISIBLE,
    InvalidPod,
    PatchConfig,
    compute_patch,
    visible_devices_env,
)

CFG = PatchConfig()


def pod(*containers: dict[str, Any], init: list[dict[str, Any]] | None = None,
        scheduler: str | None = "default-scheduler") -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers)}
    if init is not None:
        spec["initContainers"] = init
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}


def c(name: str = "main", limits: dict[str, str] | None = None, env: list | None = None,
      requests: dict[str, str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "image": "x"}
    res = {}
    if limits is not None:
        res["limits"] = limits
    if requests is not None:
        res["requests"] = requests
    if res:
        out["resources"] = res
    if env is not None:
        out["env"] = env
    return out


def apply(doc: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """A tiny RFC 6902 applier (add/replace on objects and arrays) to check the ops' effect."""
    doc = copy.deepcopy(doc)
    for op in ops:
        parts = op["path"].lstrip("/").split("/")
        target = doc
        for p in parts[:-1]:
            target = target[int(p)] if isinstance(target, list) else target[p]
        last = parts[-1]
        if isinstance(target, list):
            if last == "-":
                assert op["op"] == "add"
                target.append(op["value"])
            else:
                target[int(last)] = op["value"]
        else:
            assert op["op"] == "add" or last in target
            target[last] = op["value"]
    return doc


SHARE = {"sparse.io/gpu-milli": "500", "sparse.io/gpu-mem": "4096"}


def test_non_gpu_pod_is_untouched() -> None:
    assert compute_patch(pod(c(limits={"cpu": "1"})), CFG) == []
    assert compute_patch(pod(c()), CFG) == []
    # whole GPUs only are the default scheduler's business unless configured
    assert compute_patch(pod(c(limits={"nvidia.com/gpu": "1"})), CFG) == []


def test_gpu_pod_gets_scheduler_and_visible_devices_everywhere() -> None:
    p = pod(c("main", limits=SHARE), c("sidecar"), init=[c("init")])
    out = apply(p, compute_patch(p, CFG))
    assert out["spec"]["schedulerName"] == "sparse-scheduler"
    for k in ("containers", "initContainers"):
        for container in out["spec"][k]:
            assert container["env"] == [visible_devices_env()]
    ref = visible_devices_env()["valueFrom"]["fieldRef"]["fieldPath"]
    assert ref == "metadata.annotations['sparse.io/gpu-uuids']"


def test_requests_only_and_init_only_count() -> None:
    p = pod(c(requests={"sparse.io/gpu-mem": "1024"}))
    assert compute_patch(p, CFG)
    p = pod(c(), init=[c("i", limits={"sparse.io/gpu-milli": "100"})])
    assert compute_patch(p, CFG)


def test_missing_scheduler_name_is_added_and_explicit_other_is_kept() -> None:
    p = pod(c(limits=SHARE), scheduler=None)
    ops = compute_patch(p, CFG)
    assert {"op": "add", "path": "/spec/schedulerName", "value": "sparse-scheduler"} in ops
    p = pod(c(limits=SHARE), scheduler="volcano")
    assert apply(p, compute_patch(p, CFG))["spec"]["schedulerName"] == "volcano"


def test_user_visible_devices_is_replaced_and_other_env_kept() -> None:
    env = [{"name": "A", "value": "1"}, {"name": ENV_VISIBLE, "value": "all"}]
    p = pod(c(limits=SHARE, env=env))
    out = apply(p, compute_patch(p, CFG))
    assert out["spec"]["containers"][0]["env"] == [{"name": "A", "value": "1"},
                                                   visible_devices_env()]


def test_existing_env_gets_appended() -> None:
    p = pod(c(limits=SHARE, env=[{"name": "A", "value": "1"}]))
    ops = compute_patch(p, CFG)
    assert any(op["path"] == "/spec/containers/0/env/-" for op in ops)


def test_idempotent_on_reinvocation() -> None:
    p = pod(c(limits=SHARE), c("b", env=[]))
    once = apply(p, compute_patch(p, CFG))
    assert compute_patch(once, CFG) == []


def test_whole_gpus_when_configured() -> None:
    p = pod(c(limits={"nvidia.com/gpu": "2"}))
    cfg = PatchConfig(whole_gpus=True, mps=True)
    out = apply(p, compute_patch(p, cfg))
    assert out["spec"]["schedulerName"] == "sparse-scheduler"
    assert out["spec"]["containers"][0]["env"] == [visible_devices_env()]  # no MPS for whole GPUs


def test_mps_limits() -> None:
    p = pod(c(limits={"sparse.io/gpu-milli": "333", "sparse.io/gpu-mem": "8Ki"}), c("side"))
    out = apply(p, compute_patch(p, PatchConfig(mps=True)))
    main, side = out["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in main["env"]}
    assert env[ENV_MPS_THREADS] == "34"
    assert env[ENV_MPS_MEM] == "0=8192M"
    assert [e["name"] for e in side["env"]] == [ENV_VISIBLE]


def test_mps_off_by_default() -> None:
    p = pod(c(limits=SHARE))
    names = [e["name"] for e in apply(p, compute_patch(p, CFG))["spec"]["containers"][0]["env"]]
    assert names == [ENV_VISIBLE]


@pytest.mark.parametrize(
    "bad",
    [
        None,
        "pod",
        {"spec": "x"},
        {"spec": {"containers": "x"}},
        {"spec": {"containers": ["x"]}},
        {"spec": {"containers": [{"name": "a", "resources": []}]}},
        {"spec": {"containers": [{"name": "a", "resources": {"limits": []}}]}},
        {"spec": {"containers": [{"resources": {"limits": {"sparse.io/gpu-mem": "lots"}}}]}},
        {"spec": {"containers": [{"resources": {"limits": {"sparse.io/gpu-mem": "1e400"}}}]}},
        {"spec": {"containers": [{"resources": {"limits": {"sparse.io/gpu-mem": "1"}},
                                  "env": {"A": "1"}}]}},
        {"spec": {"containers": [{}] * 10_000}},
    ],
)
def test_malformed_pods_raise_invalid_pod(bad: Any) -> None:
    with pytest.raises(InvalidPod):
        compute_patch(bad, CFG)
