"""The RayClusters KubeRay makes for autoscaling RayJobs and RayServices, as the controller watches them
(``admission.controller.watch.ray_clusters``): the job's counts follow its cluster's workers, and a
view is never read back from a version older than the one the controller holds."""

from __future__ import annotations

import copy
from typing import Any

from admission.controller.watch.changes import Changes
from admission.controller.watch.cluster_watch import ClusterWatch
from admission.controller.watch.jobcache import JobCache
from admission.jobs import BY_KIND, INTEGRATIONS

CONTAINER = {"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}
RAYJOB = BY_KIND[("ray.io/v1", "RayJob")]
RAYCLUSTER = BY_KIND[("ray.io/v1", "RayCluster")]


def _rayjob(version: str, replicas: int = 1) -> dict[str, Any]:
    cluster = {
        "enableInTreeAutoscaling": True,
        "headGroupSpec": {"template": {"spec": {"containers": [CONTAINER]}}},
        "workerGroupSpecs": [
            {"groupName": "w", "replicas": replicas, "template": {"spec": {"containers": [CONTAINER]}}}
        ],
    }
    meta = {"name": "tune", "namespace": "ml", "uid": "rj", "resourceVersion": version, "generation": 1,
            "labels": {"kueue.x-k8s.io/queue-name": "q"}, "annotations": {"kueue.x-k8s.io/elastic-job": "true"}}  # fmt: skip
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": meta,
            "spec": {"shutdownAfterJobFinishes": True, "rayClusterSpec": cluster},
            "status": {"rayClusterName": "tune-abcde"}}  # fmt: skip


def _cluster(generation: int, replicas: int) -> dict[str, Any]:
    spec = copy.deepcopy(_rayjob("1")["spec"]["rayClusterSpec"])
    spec["workerGroupSpecs"][0]["replicas"] = replicas
    owner = {"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "tune", "uid": "rj", "controller": True}
    meta = {"name": "tune-abcde", "namespace": "ml", "uid": "rc", "generation": generation,
            "resourceVersion": str(100 + generation), "ownerReferences": [owner],
            "annotations": {"kueue.x-k8s.io/elastic-job": "true"}}  # fmt: skip
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": meta, "spec": spec}


def _workers(watch: ClusterWatch) -> int:
    view = watch.jobs.views["rj"]
    assert view.info is not None
    return next(ps.count for ps in view.info.pod_sets if ps.name == "w")


def test_an_autoscaling_rayjob_counts_its_clusters_workers_and_never_goes_back_a_version() -> None:
    watch = ClusterWatch(None, JobCache(), Changes(), INTEGRATIONS, current_scheduler=lambda: None, optional=list)  # type: ignore[arg-type]
    handlers = {i.ref.kind: informer.handler for i, informer in zip(watch.integrations, watch.informers, strict=False)}
    handlers["RayJob"]("ADDED", _rayjob("1"))
    handlers["RayCluster"]("ADDED", _cluster(1, 1))
    assert _workers(watch) == 1 and watch.jobs.views["rc"].part
    handlers["RayCluster"]("MODIFIED", _cluster(2, 3))  # the autoscaler's write
    assert _workers(watch) == 3 and "rj" in watch.changes.jobs
    # the controller wrote the RayJob (version 2); a cluster change comes before that write's event
    watch.jobs.writing("rj")
    watch.jobs.wrote(watch.jobs.views["rj"], _rayjob("2"))
    handlers["RayCluster"]("MODIFIED", _cluster(3, 2))
    assert watch.jobs.views["rj"].version == "2", "not read back from the older RayJob the tracker holds"
    handlers["RayJob"]("MODIFIED", _rayjob("2"))  # the write's own event: read whole, with the cluster's count
    assert _workers(watch) == 2
