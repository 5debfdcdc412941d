"""The simulated cluster runs jobs like a real one: pods, scheduling on nodes, completion, suspension."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest_asyncio

from admission.sim.operators.cluster import NODES, PODS, Cluster
from admission.sim.server import resources
from admission.sim.server.object_store import ObjectStore
from admission.sim.server.objects import Resource

JOBS = next(r for r in resources.ALL if r.plural == "jobs")
PYTORCH = next(r for r in resources.ALL if r.plural == "pytorchjobs")


@pytest_asyncio.fixture
async def cluster() -> AsyncIterator[tuple[ObjectStore, Cluster]]:
    store = ObjectStore()
    store.create(resources.NAMESPACES, "", {"metadata": {"name": "ml"}}, namespaces=resources.NAMESPACES)
    sim = Cluster(store, time_scale=0.01)
    await sim.start()
    yield store, sim
    await sim.stop()


def job(
    name: str,
    *,
    suspend: bool,
    parallelism: int = 2,
    gpus: str = "4",
    runtime: str | None = "5",
    selector: dict[str, str] | None = None,
) -> dict[str, Any]:
    annotations = {"turnstile.dev/sim-runtime": runtime} if runtime else {}
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": gpus}}}],
    }
    if selector:
        spec["nodeSelector"] = selector
    return {
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "suspend": suspend,
            "parallelism": parallelism,
            "completions": parallelism,
            "template": {"spec": spec},
        },
    }


async def until(check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


def conditions(store: ObjectStore, res: Resource, name: str) -> dict[str, str]:
    obj = store.get(res, "ml", name)
    return {c["type"]: c["status"] for c in (obj.get("status") or {}).get("conditions", [])}


def pods(store: ObjectStore) -> list[dict[str, Any]]:
    return store.list(PODS, "ml")[0]


async def test_a_suspended_job_has_no_pods_until_resumed_then_completes(
    cluster: tuple[ObjectStore, Cluster],
) -> None:
    store, _ = cluster
    store.create(JOBS, "ml", job("train", suspend=True), namespaces=resources.NAMESPACES)
    await asyncio.sleep(0.05)
    assert pods(store) == []
    obj = store.get(JOBS, "ml", "train")
    obj["spec"]["suspend"] = False
    store.replace(JOBS, "ml", "train", obj)
    await until(lambda: len(pods(store)) == 2)
    assert {p["metadata"]["name"] for p in pods(store)} == {"train-main-0", "train-main-1"}
    await until(lambda: conditions(store, JOBS, "train").get("Complete") == "True")
    assert conditions(store, JOBS, "train")["Suspended"] == "False"  # it was suspended, then resumed
    done = store.get(JOBS, "ml", "train")["status"]
    assert (done["succeeded"], done["active"]) == (2, 0) and "startTime" in done and "completionTime" in done


async def test_suspending_deletes_pods(cluster: tuple[ObjectStore, Cluster]) -> None:
    store, _ = cluster
    store.create(JOBS, "ml", job("long", suspend=False, runtime=None), namespaces=resources.NAMESPACES)
    await until(lambda: len(pods(store)) == 2 and all(p["status"]["phase"] == "Running" for p in pods(store)))
    obj = store.get(JOBS, "ml", "long")
    obj["spec"]["suspend"] = True
    store.replace(JOBS, "ml", "long", obj)
    await until(lambda: pods(store) == [])
    assert conditions(store, JOBS, "long")["Suspended"] == "True"


async def test_pods_bind_to_nodes_by_selector_taints_and_capacity(cluster: tuple[ObjectStore, Cluster]) -> None:
    store, _ = cluster
    store.create(
        NODES,
        "",
        {"metadata": {"name": "a100-1", "labels": {"gpu": "a100"}}, "status": {"capacity": {"nvidia.com/gpu": "8"}}},
        namespaces=resources.NAMESPACES,
    )
    store.create(
        NODES,
        "",
        {
            "metadata": {"name": "h100-1", "labels": {"gpu": "h100"}},
            "spec": {"taints": [{"key": "gpu", "value": "h100", "effect": "NoSchedule"}]},
            "status": {"capacity": {"nvidia.com/gpu": "8"}},
        },
        namespaces=resources.NAMESPACES,
    )
    # Three 4-GPU pods for an 8-GPU A100 node: two run, one waits; the tainted H100 node is not used.
    store.create(
        JOBS,
        "ml",
        job("big", suspend=False, parallelism=3, runtime=None, selector={"gpu": "a100"}),
        namespaces=resources.NAMESPACES,
    )
    await until(lambda: len(pods(store)) == 3 and sum(p["status"]["phase"] == "Running" for p in pods(store)) == 2)
    waiting = [p for p in pods(store) if p["status"]["phase"] == "Pending"]
    assert len(waiting) == 1
    await until(
        lambda: any(
            c["reason"] == "Unschedulable"
            for c in store.get(PODS, "ml", waiting[0]["metadata"]["name"])["status"].get("conditions", [])
        )
    )
    assert {p["spec"].get("nodeName") for p in pods(store) if p["status"]["phase"] == "Running"} == {"a100-1"}
    # Capacity arrives (as from the autoscaler): the pod that could not be placed is tried again and binds.
    store.create(
        NODES,
        "",
        {"metadata": {"name": "a100-2", "labels": {"gpu": "a100"}}, "status": {"capacity": {"nvidia.com/gpu": "8"}}},
        namespaces=resources.NAMESPACES,
    )
    name = waiting[0]["metadata"]["name"]
    await until(lambda: store.get(PODS, "ml", name)["status"]["phase"] == "Running")
    assert store.get(PODS, "ml", name)["spec"]["nodeName"] == "a100-2"


async def test_a_node_holds_no_more_pods_than_its_allocatable_pods(cluster: tuple[ObjectStore, Cluster]) -> None:
    """The kube-scheduler counts each pod against ``allocatable.pods`` (NodeResourcesFit): a node
    with 16 GPUs but 2 pod slots runs 2 one-GPU pods; the third waits."""
    store, _ = cluster
    node = {"metadata": {"name": "n1"}, "status": {"allocatable": {"nvidia.com/gpu": "16", "pods": "2"}}}
    store.create(NODES, "", node, namespaces=resources.NAMESPACES)
    store.create(JOBS, "ml", job("tiny", suspend=False, parallelism=3, gpus="1", runtime=None),
                 namespaces=resources.NAMESPACES)  # fmt: skip
    await until(lambda: len(pods(store)) == 3 and sum(p["status"]["phase"] == "Running" for p in pods(store)) == 2)
    await asyncio.sleep(0.1)
    assert sum(p["status"]["phase"] == "Running" for p in pods(store)) == 2


def test_label_index_follows_creates_relabels_and_deletes() -> None:
    store = ObjectStore()
    store.create(resources.NAMESPACES, "", {"metadata": {"name": "ml"}}, namespaces=resources.NAMESPACES)
    store.index_label("team")
    store.create(PODS, "ml", {"metadata": {"name": "a", "labels": {"team": "x"}}}, namespaces=resources.NAMESPACES)
    store.create(PODS, "ml", {"metadata": {"name": "b", "labels": {"team": "x"}}}, namespaces=resources.NAMESPACES)
    store.create(JOBS, "ml", job("c", suspend=True, runtime=None), namespaces=resources.NAMESPACES)
    assert sorted(p["metadata"]["name"] for p in store.labelled(PODS, "team", "x")) == ["a", "b"]
    assert store.labelled(JOBS, "team", "x") == []  # per resource
    relabelled = store.get(PODS, "ml", "a")
    relabelled["metadata"]["labels"] = {"team": "y"}
    store.replace(PODS, "ml", "a", relabelled)
    assert [p["metadata"]["name"] for p in store.labelled(PODS, "team", "x")] == ["b"]
    assert [p["metadata"]["name"] for p in store.labelled(PODS, "team", "y")] == ["a"]
    store.delete(PODS, "ml", "b")
    assert store.labelled(PODS, "team", "x") == []
    assert "x" not in store.label_index["team"]  # no empty entries left behind


async def test_kubeflow_jobs_get_pods_per_replica_type(cluster: tuple[ObjectStore, Cluster]) -> None:
    store, _ = cluster
    template = {"spec": {"containers": [{"name": "pytorch", "image": "x"}]}}
    store.create(
        PYTORCH,
        "ml",
        {
            "metadata": {"name": "pt", "annotations": {"turnstile.dev/sim-runtime": "2"}},
            "spec": {
                "runPolicy": {"suspend": False},
                "pytorchReplicaSpecs": {
                    "Master": {"replicas": 1, "template": template},
                    "Worker": {"replicas": 2, "template": template},
                },
            },
        },
        namespaces=resources.NAMESPACES,
    )
    await until(lambda: len(pods(store)) == 3)
    assert {p["metadata"]["name"] for p in pods(store)} == {"pt-master-0", "pt-worker-0", "pt-worker-1"}
    await until(lambda: conditions(store, PYTORCH, "pt").get("Succeeded") == "True")
    assert "Suspended" not in conditions(store, PYTORCH, "pt")  # never suspended: no such condition


def test_watch_history_keeps_each_event_as_it_was() -> None:
    # Events share the stored objects (no copy per event): no later write may change an earlier event.
    store = ObjectStore()
    store.create(resources.NAMESPACES, "", {"metadata": {"name": "ml"}}, namespaces=resources.NAMESPACES)
    body = {"metadata": {"name": "p", "labels": {"a": "1"}, "finalizers": ["x"]}}
    store.create(PODS, "ml", body, namespaces=resources.NAMESPACES)
    changed = store.get(PODS, "ml", "p")
    changed["metadata"]["labels"] = {"a": "2"}
    store.replace(PODS, "ml", "p", changed)
    store.delete(PODS, "ml", "p")  # finalizer: marked for deletion
    gone = store.get(PODS, "ml", "p")
    gone["metadata"]["finalizers"] = []
    store.replace(PODS, "ml", "p", gone)  # finalizer removed: deleted
    events = store.events_since(PODS, None, 0)
    seen = [
        (
            e.type,
            e.obj["metadata"]["labels"]["a"],
            e.obj["metadata"]["resourceVersion"],
            "deletionTimestamp" in e.obj["metadata"],
        )
        for e in events
    ]
    assert [s[0] for s in seen] == ["ADDED", "MODIFIED", "MODIFIED", "DELETED"]
    assert [s[1] for s in seen] == ["1", "2", "2", "2"]
    assert [s[3] for s in seen] == [False, False, True, True]
    assert [int(s[2]) for s in seen] == [e.rv for e in events]  # each keeps its own resourceVersion


async def test_the_default_runtime_ends_batch_pods_not_servers() -> None:
    """``sim up --default-runtime`` stands for a batch pod's work: a pod that restarts always (a
    Deployment's, a bare ``kubectl run`` pod's) never succeeds, as on a real cluster."""
    store = ObjectStore()
    store.create(resources.NAMESPACES, "", {"metadata": {"name": "ml"}}, namespaces=resources.NAMESPACES)
    sim = Cluster(store, time_scale=0.01, default_runtime=5)
    await sim.start()
    try:
        for name, policy in (("server", "Always"), ("batch", "Never")):
            body = {
                "metadata": {"name": name},
                "spec": {"restartPolicy": policy, "containers": [{"name": "c", "image": "x"}]},
                "status": {"phase": "Pending"},
            }
            store.create(PODS, "ml", body, namespaces=resources.NAMESPACES)

        def phase(name: str) -> str:
            return str((store.get(PODS, "ml", name).get("status") or {}).get("phase"))

        await until(lambda: phase("batch") == "Succeeded")
        await asyncio.sleep(0.1)  # twice the default runtime
        assert phase("server") == "Running"
    finally:
        await sim.stop()
