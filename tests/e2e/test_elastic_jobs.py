"""An elastic batch Job as a Kueue user runs it (``kueue.x-k8s.io/elastic-job: "true"``): kubectl
against the simulated cluster, the webhook over TLS, a controller replica, PostgreSQL.

Scaled down with ``kubectl patch``, its quota is freed at once and the job waiting for it starts;
scaled up, its running pod goes on while the added one waits behind Kueue's elastic-job scheduling
gate until quota frees; its Workload object and the GPU-hour ledger follow each size. Nothing here
knows Turnstile's internals but the ledger's rows, read as ``turnstile usage`` reads them."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from admission.sim.host import SimHost
from admission.store import database, tables
from tests.admission.controller.world import eventually
from tests.admission.runner import KUBECTL, kubectl, turnstile
from tests.e2e.test_pods import cluster, create, live, running

pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not on PATH")

ELASTIC_GATE = "kueue.x-k8s.io/elastic-job"
GPU_POD = {
    "restartPolicy": "Never",
    "containers": [
        {"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}
    ],
}


def job(name: str, parallelism: int, *, elastic: bool = False) -> dict[str, Any]:
    notes = {ELASTIC_GATE: "true"} if elastic else {}
    meta = {"name": name, "namespace": "ml", "labels": {"kueue.x-k8s.io/queue-name": "team-a"}, "annotations": notes}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
            "spec": {"parallelism": parallelism, "completions": 100, "template": {"spec": GPU_POD}}}  # fmt: skip


def gated_elastic(host: SimHost, prefix: str) -> set[str]:
    return {
        n
        for n, p in live(host, prefix).items()
        if ELASTIC_GATE in [g["name"] for g in p["spec"].get("schedulingGates") or []]
    }


async def _workload(host: SimHost, prefix: str) -> dict[str, Any] | None:
    code, out, err = await kubectl(host.kubeconfig, "get", "workloads", "-n", "ml", "-o", "json")
    assert code == 0, err
    return next((o for o in json.loads(out)["items"] if o["metadata"]["name"].startswith(prefix)), None)


async def _admitted(host: SimHost, prefix: str) -> dict[str, Any] | None:
    """The Workload object once it shows its admission."""
    obj = await _workload(host, prefix)
    return obj if obj is not None and "admission" in (obj.get("status") or {}) else None


async def _count(host: SimHost, prefix: str, n: int) -> dict[str, Any] | None:
    """The Workload object once it shows ``n`` pods admitted."""
    obj = await _workload(host, prefix)
    if obj is None or obj["spec"]["podSets"][0]["count"] != n:
        return None
    usage = obj["status"].get("admission", {}).get("podSetAssignments", [{}])[0].get("resourceUsage", {})
    return obj if usage.get("nvidia.com/gpu") == str(n) else None


async def _pending_event(host: SimHost, job: str) -> str | None:
    code, out, err = await kubectl(host.kubeconfig, "get", "events", "-n", "ml", "-o", "json")
    assert code == 0, err
    return next(
        (
            e["message"]
            for e in json.loads(out)["items"]
            if e["involvedObject"]["name"] == job and e["reason"] == "Pending" and "scaling up" in e["message"]
        ),
        None,
    )


async def _patch(host: SimHost, name: str, parallelism: int) -> None:
    body = json.dumps({"spec": {"parallelism": parallelism}})
    code, _, err = await kubectl(host.kubeconfig, "patch", "job", name, "-n", "ml", "--type=merge", "-p", body)
    assert code == 0, err


async def test_an_elastic_job_scales_down_and_up_without_being_requeued(tmp_path: Path, migrated_url: str) -> None:
    async with cluster(tmp_path, migrated_url) as (host, _kube):  # (team-a: 2 GPUs)
        assert (await create(host, job("train", 2, elastic=True)))[0] == 0
        await eventually(lambda: len(running(host, "train-")) == 2, what="the elastic job's 2 pods running")
        code, out, _ = await kubectl(host.kubeconfig, "get", "job", "train", "-n", "ml", "-o", "json")
        template = json.loads(out)["spec"]["template"]["spec"]
        assert {"name": ELASTIC_GATE} in template["schedulingGates"], "gated at creation, as Kueue's webhook does"
        first = await eventually(lambda: _count(host, "job-train-", 2), what="its Workload at 2 pods")
        assert (await create(host, job("waits", 1)))[0] == 0

        # down: one GPU freed at once, and the waiting job runs in it; train is not requeued
        await _patch(host, "train", 1)
        await eventually(lambda: len(running(host, "waits-")) == 1, what="the waiting job running in the freed GPU")
        down = await eventually(lambda: _count(host, "job-train-", 1), what="its Workload at 1 pod")
        assert down["metadata"]["uid"] == first["metadata"]["uid"], "the same Workload: resized, not requeued"
        assert len(running(host, "train-")) == 1

        # up: the added pod waits behind the gate while the running one goes on
        await _patch(host, "train", 2)
        await eventually(lambda: len(gated_elastic(host, "train-")) == 1, what="the added pod held by the gate")
        assert len(running(host, "train-")) == 1
        waiting = await _workload(host, "job-train-")
        assert waiting is not None and waiting["spec"]["podSets"][0]["count"] == 1, "not grown without quota"
        said = await eventually(lambda: _pending_event(host, "train"), what="a Pending Event saying why it waits")
        assert "scaling up to main: 2 waits for quota" in said and "the running pods go on" in said, said
        code, _, err = await kubectl(host.kubeconfig, "delete", "job", "waits", "-n", "ml")
        assert code == 0, err
        await eventually(
            lambda: len(running(host, "train-")) == 2, timeout=20, what="the growth admitted, its pod started"
        )
        await eventually(lambda: _count(host, "job-train-", 2), what="its Workload at 2 pods again")
        assert not gated_elastic(host, "train-")

        # its history, as `turnstile describe workload` prints it: admitted once, resized twice
        env = {**os.environ, "TURNSTILE_DATABASE_URL": migrated_url, "COLUMNS": "200"}
        described = turnstile("describe", "workload", "ml/train", env=env)
        assert described.returncode == 0, described.stderr
        history = described.stdout[described.stdout.index("History") :]
        assert history.count("Admitted") == 1 and "Evicted" not in history, history
        assert "Resized" in history and "to main: 1" in history and "to main: 2" in history, history

        # the ledger billed each size for the time it held it: 2 GPUs, then 1, then 2
        engine = database.make_engine(migrated_url)
        async with database.transaction(database.sessions(engine)) as s:
            rows = (
                await s.execute(
                    select(tables.UsageInterval.quantity, tables.UsageInterval.ended_at)
                    .where(
                        tables.UsageInterval.workload == "ml/train", tables.UsageInterval.resource == "nvidia.com/gpu"
                    )
                    .order_by(tables.UsageInterval.id)
                )
            ).all()
        await engine.dispose()
        assert [(q, ended is None) for q, ended in rows] == [(2000, False), (1000, False), (2000, True)]


def ray_cluster(name: str) -> dict[str, Any]:
    """An elastic RayCluster with in-tree autoscaling (Kueue's rayclusters.md), its autoscaler's
    sidecar asking for CPU only (the ClusterQueue covers no memory)."""
    worker = {
        "name": "w",
        "image": "rayproject/ray:2.9.0",
        "resources": {"requests": {"cpu": "1"}, "limits": {"nvidia.com/gpu": "1"}},
    }
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name, "namespace": "ml", "labels": {"kueue.x-k8s.io/queue-name": "team-a"},
                     "annotations": {ELASTIC_GATE: "true"}},
        "spec": {
            "enableInTreeAutoscaling": True,
            "autoscalerOptions": {"resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "500m"}}},
            "headGroupSpec": {"template": {"spec": {"containers": [{"name": "h", "image": "rayproject/ray:2.9.0", "resources": {"requests": {"cpu": "1"}}}]}}},
            "workerGroupSpecs": [{"groupName": "gpu", "replicas": 1, "minReplicas": 1, "maxReplicas": 3, "template": {"spec": {"containers": [worker]}}}],
        },
    }  # fmt: skip


async def _workers(host: SimHost, name: str, replicas: int) -> None:
    """What KubeRay's autoscaler writes: the worker group's replicas."""
    body = json.dumps([{"op": "replace", "path": "/spec/workerGroupSpecs/0/replicas", "value": replicas}])
    code, _, err = await kubectl(host.kubeconfig, "patch", "raycluster", name, "-n", "ml", "--type=json", "-p", body)
    assert code == 0, err


async def test_an_autoscaling_ray_cluster_grows_and_shrinks_within_its_quota(tmp_path: Path, migrated_url: str) -> None:
    async with cluster(tmp_path, migrated_url) as (host, _kube):  # (team-a: 2 GPUs)
        assert (await create(host, ray_cluster("tune")))[0] == 0
        await eventually(lambda: len(running(host, "tune-")) == 2, what="its head and one worker running")
        # (Workload objects are projected from PostgreSQL after the decision: under load, its pods may
        # run before the object shows the admission)
        first = await eventually(lambda: _admitted(host, "raycluster-tune-"), what="its Workload admitted")
        usage = {a["name"]: a["resourceUsage"] for a in first["status"]["admission"]["podSetAssignments"]}
        assert usage["head"]["cpu"] == "1500m", "the head is charged for the autoscaler's sidecar too"

        await _workers(host, "tune", 2)  # the autoscaler asks for a second worker: it fits
        await eventually(lambda: len(running(host, "tune-gpu-")) == 2, what="the second worker running")
        await _workers(host, "tune", 3)  # a third: no GPU left, it waits behind the gate
        await eventually(lambda: len(gated_elastic(host, "tune-gpu-")) == 1, what="the third worker held")
        assert len(running(host, "tune-gpu-")) == 2
        await _workers(host, "tune", 1)  # the autoscaler gives two back: the quota follows
        await eventually(lambda: len(live(host, "tune-gpu-")) == 1, what="KubeRay's extra workers gone")
        assert (await create(host, job("after", 1)))[0] == 0
        await eventually(lambda: len(running(host, "after-")) == 1, what="a job running in the GPU given back")


def ray_service(name: str) -> dict[str, Any]:
    """An elastic RayService with in-tree autoscaling (Kueue's rayservices.md and elastic workloads):
    its cluster config is the autoscaling RayCluster's above."""
    config = ray_cluster(name)["spec"]
    meta = {"name": name, "namespace": "ml", "labels": {"kueue.x-k8s.io/queue-name": "team-a"},
            "annotations": {ELASTIC_GATE: "true"}}  # fmt: skip
    spec = {"serveConfigV2": "applications: []", "rayClusterConfig": config}
    return {"apiVersion": "ray.io/v1", "kind": "RayService", "metadata": meta, "spec": spec}


async def test_an_autoscaling_ray_service_follows_the_cluster_its_autoscaler_scales(
    tmp_path: Path, migrated_url: str
) -> None:
    """The Ray autoscaler writes the RayCluster KubeRay made for the service, never the service: the
    service's Workload follows that cluster's worker replicas, resized in place (Kueue's
    ``raycluster.UpdatePodSets``)."""
    async with cluster(tmp_path, migrated_url) as (host, _kube):  # (team-a: 2 GPUs)
        assert (await create(host, ray_service("serve")))[0] == 0
        await eventually(lambda: len(running(host, "serve-raycluster-")) == 2, what="its head and one worker running")
        first = await eventually(lambda: _workload(host, "rayservice-serve-"), what="its Workload")
        assert first is not None
        code, out, err = await kubectl(host.kubeconfig, "get", "rayservice", "serve", "-n", "ml", "-o", "json")
        assert code == 0, err
        made = json.loads(out)["status"]["activeServiceStatus"]["rayClusterName"]

        await _grow_then_hold(host, made, "rayservice-serve-", first)
        await _shrink(host, made, "rayservice-serve-")
        assert (await create(host, job("after", 1)))[0] == 0
        await eventually(lambda: len(running(host, "after-")) == 1, what="a job running in the GPU given back")
        code, out, err = await kubectl(host.kubeconfig, "get", "rayservice", "serve", "-n", "ml", "-o", "json")
        assert code == 0, err
        groups = json.loads(out)["spec"]["rayClusterConfig"]["workerGroupSpecs"]
        assert groups[0]["replicas"] == 1, "the service's own spec is not what scaled"


async def _grow_then_hold(host: SimHost, made: str, prefix: str, first: dict[str, Any]) -> None:
    """The Ray autoscaler (a patch of the cluster KubeRay ``made``) asks for a second worker: it fits,
    and the Workload named ``prefix...`` is resized in place; then for a third: no GPU is left, it is
    held behind the gate while the two run on."""
    await _workers(host, made, 2)
    await eventually(lambda: len(running(host, f"{made}-gpu-")) == 2, what="the second worker running")
    grown = await eventually(lambda: _group_count(host, prefix, 2), what="its Workload at 2 workers")
    assert grown["metadata"]["uid"] == first["metadata"]["uid"], "the same Workload: resized, not requeued"
    await _workers(host, made, 3)
    await eventually(lambda: len(gated_elastic(host, f"{made}-gpu-")) == 1, what="the third worker held")
    assert len(running(host, f"{made}-gpu-")) == 2


async def _shrink(host: SimHost, made: str, prefix: str) -> None:
    """The autoscaler gives two workers back: KubeRay deletes them and the Workload follows."""
    await _workers(host, made, 1)
    await eventually(lambda: len(live(host, f"{made}-gpu-")) == 1, what="KubeRay's extra workers gone")
    await eventually(lambda: _group_count(host, prefix, 1), what="its Workload at 1 worker again")


async def _group_count(host: SimHost, prefix: str, n: int) -> dict[str, Any] | None:
    """The Workload object once its worker pod set ``gpu`` shows ``n`` pods admitted."""
    obj = await _workload(host, prefix)
    counts = {ps["name"]: ps["count"] for ps in (obj or {}).get("spec", {}).get("podSets", [])}
    if obj is None or counts.get("gpu") != n:
        return None
    usage = {a["name"]: a["resourceUsage"] for a in obj["status"].get("admission", {}).get("podSetAssignments", [])}
    return obj if usage.get("gpu", {}).get("nvidia.com/gpu") == str(n) else None


def ray_job(name: str) -> dict[str, Any]:
    """Kueue's ray-job-autoscaling-sample.yaml in shape (an elastic RayJob whose cluster autoscales),
    its worker asking for a GPU and its autoscaler sidecar for CPU only (the ClusterQueue covers no
    memory); KubeRay's submitter as a small pod of its own."""
    config = ray_cluster(name)["spec"]
    config["autoscalerOptions"] = {
        **config["autoscalerOptions"],
        "idleTimeoutSeconds": 30,
        "upscalingMode": "Aggressive",
    }
    meta = {"name": name, "namespace": "ml", "labels": {"kueue.x-k8s.io/queue-name": "team-a"},
            "annotations": {ELASTIC_GATE: "true", "turnstile.dev/sim-runtime": "3600"}}  # fmt: skip
    submitter = {"spec": {"restartPolicy": "Never",
                          "containers": [{"name": "submit", "image": "ray", "resources": {"requests": {"cpu": "100m"}}}]}}  # fmt: skip
    spec = {"shutdownAfterJobFinishes": True, "entrypoint": "python /home/ray/samples/sample_code.py",
            "rayClusterSpec": config, "submitterPodTemplate": submitter}  # fmt: skip
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": meta, "spec": spec}


async def test_an_autoscaling_ray_job_follows_the_cluster_kuberay_made_for_it(
    tmp_path: Path, migrated_url: str
) -> None:
    """Kueue's RayJob autoscaling (rayjobs.md): the Ray autoscaler scales the RayCluster KubeRay made
    for the RayJob; the RayJob's Workload follows that cluster's workers, resized in place; its
    submitter runs throughout, never gated."""
    async with cluster(tmp_path, migrated_url) as (host, _kube):  # (team-a: 2 GPUs)
        assert (await create(host, ray_job("tune")))[0] == 0
        rayjobs = next(r for r in host.server.served if r.plural == "rayjobs")
        made = await eventually(
            lambda: host.server.store.get(rayjobs, "ml", "tune").get("status", {}).get("rayClusterName"),
            what="the RayCluster KubeRay made",
        )
        await eventually(lambda: len(running(host, f"{made}-")) == 2, what="its head and one worker running")
        await eventually(lambda: len(running(host, "tune-main-")) == 1, what="its submitter running")
        first = await eventually(lambda: _group_count(host, "rayjob-tune-", 1), what="its Workload at 1 worker")

        await _grow_then_hold(host, made, "rayjob-tune-", first)
        said = await eventually(lambda: _pending_event(host, "tune"), what="a Pending Event saying why it waits")
        assert "scaling up to head: 1, gpu: 3, submitter: 1 waits for quota" in said, said
        await _shrink(host, made, "rayjob-tune-")
        assert (await create(host, job("after", 1)))[0] == 0
        await eventually(lambda: len(running(host, "after-")) == 1, what="a job running in the GPU given back")
        assert len(running(host, "tune-main-")) == 1 and not gated_elastic(host, "tune-main-"), "the submitter ran on"
