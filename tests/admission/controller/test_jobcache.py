"""The controller's job cache (``admission.controller.watch.jobcache``): which job a workload key names."""

from __future__ import annotations

from typing import Any

from admission.controller.watch.jobcache import JobCache
from admission.jobs import BY_KIND

CONTAINER = {"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}


def _rayjob() -> dict[str, Any]:
    cluster = {"headGroupSpec": {"template": {"spec": {"containers": [CONTAINER]}}}}
    return {"apiVersion": "ray.io/v1", "kind": "RayJob",
            "metadata": {"name": "tune", "namespace": "ml", "uid": "rj", "labels": {"kueue.x-k8s.io/queue-name": "q"}},
            "spec": {"shutdownAfterJobFinishes": True, "rayClusterSpec": cluster}}  # fmt: skip


def _submitter() -> dict[str, Any]:
    """KubeRay's submitter Job: named as its RayJob, which controls it."""
    owner = {"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "tune", "uid": "rj", "controller": True}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "tune", "namespace": "ml", "uid": "sub", "ownerReferences": [owner]},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [CONTAINER]}}}}  # fmt: skip


def test_a_part_named_as_its_parent_never_takes_the_parents_workload_key() -> None:
    for order in ((_rayjob, _submitter), (_submitter, _rayjob)):
        cache = JobCache()
        for make in order:
            obj = make()
            cache.observe(BY_KIND[(obj["apiVersion"], obj["kind"])], "ADDED", obj)
        found = cache.view("ml/tune")
        assert found is not None and found.uid == "rj", order
        assert cache.views["sub"].part, "the submitter is known, as a part"
        cache.observe(BY_KIND[("batch/v1", "Job")], "DELETED", _submitter())
        assert cache.view("ml/tune") is not None and cache.view("ml/tune").uid == "rj"  # type: ignore[union-attr]
