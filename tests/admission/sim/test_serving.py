"""The simulated cluster runs what a real one runs besides jobs: bare Pods (scheduling gates honoured,
the API server's pod update rules), PriorityClasses, Deployments, ReplicaSets and StatefulSets."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from admission.sim.host import SimHost
from admission.sim.operators.replicas import DEPLOYMENTS, PODS, REPLICASETS
from tests.admission.runner import KUBECTL, kubectl

pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not on PATH")


@pytest_asyncio.fixture
async def host(tmp_path: Path) -> AsyncIterator[SimHost]:
    sim = await SimHost.start(tmp_path / "kubeconfig", time_scale=0.05)
    yield sim
    await sim.stop()


def pod(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "vllm/vllm-openai:v0.6.0"}], **spec},
    }


async def until(check: Callable[[], Any], timeout: float = 10.0) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout
    while not (value := check()):
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)
    return value


async def get(host: SimHost, *args: str) -> Any:
    code, out, err = await kubectl(host.kubeconfig, "get", *args, "-o", "json")
    assert code == 0, err
    return json.loads(out)


async def test_a_bare_pod_is_scheduled_and_a_gated_one_waits_for_its_gate(host: SimHost) -> None:
    code, _, err = await kubectl(host.kubeconfig, "create", "-f", "-", stdin=json.dumps(pod("plain")))
    assert code == 0, err
    gated = pod("held", schedulingGates=[{"name": "example.com/hold"}])
    assert (await kubectl(host.kubeconfig, "create", "-f", "-", stdin=json.dumps(gated)))[0] == 0
    plain = await get(host, "pod", "plain")
    assert plain["spec"]["nodeName"] and plain["status"]["phase"] == "Running"
    assert plain["status"]["qosClass"] == "BestEffort"
    held = await get(host, "pod", "held")
    assert "nodeName" not in held["spec"] and held["status"]["phase"] == "Pending"
    assert held["status"]["conditions"][0]["reason"] == "SchedulingGated"
    # a gated pod's node selector may gain entries; a gate may not be added back, nor a selector changed
    code, _, err = await kubectl(
        host.kubeconfig, "patch", "pod", "held", "--type=json", "-p",
        json.dumps([{"op": "add", "path": "/spec/nodeSelector", "value": {"gpu": "a100"}}]),
    )  # fmt: skip
    assert code == 0, err
    code, _, err = await kubectl(
        host.kubeconfig, "patch", "pod", "held", "--type=json", "-p",
        json.dumps([{"op": "replace", "path": "/spec/nodeSelector/gpu", "value": "h100"}]),
    )  # fmt: skip
    assert code != 0 and "only additions to spec.nodeSelector" in err
    code, _, err = await kubectl(
        host.kubeconfig, "patch", "pod", "held", "--type=json", "-p",
        json.dumps([{"op": "remove", "path": "/spec/schedulingGates/0"}]),
    )  # fmt: skip
    assert code == 0, err
    await until(lambda: host.server.store.get(PODS, "default", "held")["spec"].get("nodeName"))
    code, _, err = await kubectl(
        host.kubeconfig, "patch", "pod", "held", "--type=json", "-p",
        json.dumps([{"op": "add", "path": "/spec/schedulingGates", "value": [{"name": "again"}]}]),
    )  # fmt: skip
    assert code != 0 and "only deletion is allowed" in err
    code, _, err = await kubectl(
        host.kubeconfig, "patch", "pod", "plain", "--type=json", "-p",
        json.dumps([{"op": "add", "path": "/spec/nodeSelector", "value": {"gpu": "a100"}}]),
    )  # fmt: skip
    assert code != 0 and "nodeSelector" in err


async def test_priority_classes_set_a_pods_priority_and_unknown_ones_are_refused(host: SimHost) -> None:
    pc = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "inference"},
        "value": 1000,
    }
    assert (await kubectl(host.kubeconfig, "create", "-f", "-", stdin=json.dumps(pc)))[0] == 0
    listed = await get(host, "priorityclasses")
    assert {"inference", "system-cluster-critical"} <= {i["metadata"]["name"] for i in listed["items"]}
    code, _, err = await kubectl(
        host.kubeconfig, "create", "-f", "-", stdin=json.dumps(pod("served", priorityClassName="inference"))
    )
    assert code == 0, err
    assert (await get(host, "pod", "served"))["spec"]["priority"] == 1000
    code, _, err = await kubectl(
        host.kubeconfig, "create", "-f", "-", stdin=json.dumps(pod("typo", priorityClassName="inferense"))
    )
    assert code != 0 and "no PriorityClass with name inferense was found" in err


def deployment(name: str, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "vllm/vllm-openai:v0.6.0"}]},
            },
        },
    }


def live_pods(host: SimHost, prefix: str) -> list[dict[str, Any]]:
    pods = host.server.store.list(PODS, "default")[0]
    return [p for p in pods if p["metadata"]["name"].startswith(prefix) and not p["metadata"].get("deletionTimestamp")]


async def test_a_deployment_runs_its_replicas_through_a_replicaset_and_scales(host: SimHost) -> None:
    code, _, err = await kubectl(host.kubeconfig, "apply", "-f", "-", stdin=json.dumps(deployment("vllm", 3)))
    assert code == 0, err
    await until(lambda: len([p for p in live_pods(host, "vllm-") if p["status"]["phase"] == "Running"]) == 3)
    rs = (await get(host, "replicasets"))["items"]
    assert len(rs) == 1 and rs[0]["metadata"]["ownerReferences"][0]["kind"] == "Deployment"
    assert all(
        p["metadata"]["ownerReferences"][0]["name"] == rs[0]["metadata"]["name"] for p in live_pods(host, "vllm-")
    )
    await until(
        lambda: (host.server.store.get(DEPLOYMENTS, "default", "vllm").get("status") or {}).get("readyReplicas") == 3
    )
    assert (await kubectl(host.kubeconfig, "scale", "deployment", "vllm", "--replicas=1"))[0] == 0
    await until(lambda: len(live_pods(host, "vllm-")) == 1)
    # a pod deleted by hand is replaced
    victim = live_pods(host, "vllm-")[0]["metadata"]["name"]
    assert (await kubectl(host.kubeconfig, "delete", "pod", victim, "--wait=false"))[0] == 0
    await until(lambda: [p for p in live_pods(host, "vllm-") if p["metadata"]["name"] != victim])
    assert (await kubectl(host.kubeconfig, "delete", "deployment", "vllm"))[0] == 0
    await until(lambda: not live_pods(host, "vllm-") and not host.server.store.list(REPLICASETS, "default")[0])


async def test_a_statefulset_creates_its_pods_in_order(host: SimHost) -> None:
    sts = deployment("db", 3)
    sts["kind"] = "StatefulSet"
    sts["spec"]["serviceName"] = "db"
    sts["spec"]["template"]["spec"]["schedulingGates"] = [{"name": "example.com/hold"}]
    code, _, err = await kubectl(host.kubeconfig, "apply", "-f", "-", stdin=json.dumps(sts))
    assert code == 0, err
    await until(lambda: live_pods(host, "db-"))
    await asyncio.sleep(0.3)
    assert [p["metadata"]["name"] for p in live_pods(host, "db-")] == ["db-0"]  # OrderedReady: db-0 is not ready
    sts["spec"]["podManagementPolicy"] = "Parallel"
    sts["metadata"]["name"] = "cache"
    sts["spec"]["selector"] = {"matchLabels": {"app": "cache"}}
    sts["spec"]["template"]["metadata"]["labels"] = {"app": "cache"}
    assert (await kubectl(host.kubeconfig, "apply", "-f", "-", stdin=json.dumps(sts)))[0] == 0
    await until(
        lambda: sorted(p["metadata"]["name"] for p in live_pods(host, "cache-")) == ["cache-0", "cache-1", "cache-2"]
    )


async def test_a_selected_watch_sees_objects_enter_and_leave_its_selection(host: SimHost) -> None:
    """As the real server's watch cache: a label selector filters a watch, and an object whose labels
    stop (start) matching is sent as DELETED (ADDED) to that watch."""
    from admission.kube import client as kube_client
    from admission.kube.client import Kube
    from admission.kube.informer import Informer

    seen: list[tuple[str, str]] = []
    kube = Kube(await kube_client.connect(host.kubeconfig))
    ref = kube_client.ResourceRef("v1", "Pod", "pods")
    informer = Informer(
        kube, ref, lambda kind, obj: seen.append((kind, obj["metadata"]["name"])), label_selector="pick=yes"
    )
    task = asyncio.create_task(informer.run())
    try:
        await until(informer.synced.is_set)
        for name, labels in (("in", {"pick": "yes"}), ("out", {"pick": "no"})):
            body = pod(name)
            body["metadata"]["labels"] = labels
            assert (await kubectl(host.kubeconfig, "create", "-f", "-", stdin=json.dumps(body)))[0] == 0
        await until(lambda: ("ADDED", "in") in seen)
        assert (await kubectl(host.kubeconfig, "label", "pod", "out", "pick=yes", "--overwrite"))[0] == 0
        await until(lambda: ("ADDED", "out") in seen)
        assert (await kubectl(host.kubeconfig, "label", "pod", "in", "pick-"))[0] == 0
        await until(lambda: ("DELETED", "in") in seen)
        assert not any(name == "out" for kind, name in seen[: seen.index(("ADDED", "out"))])
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await kube.close()
