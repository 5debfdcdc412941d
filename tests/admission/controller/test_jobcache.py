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


def test_a_parts_pods_count_as_its_parents_while_they_stop_even_once_the_part_is_gone() -> None:
    """KubeRay deletes a stopped RayJob's submitter Job before its pod has stopped (and the default
    submitter pod carries no workload annotation): the enactor still finds that pod as the RayJob's."""
    from admission.controller.enactor import _runs_for

    cache = JobCache()
    cache.observe(BY_KIND[("ray.io/v1", "RayJob")], "ADDED", _rayjob())
    cache.observe(BY_KIND[("batch/v1", "Job")], "ADDED", _submitter())
    cache.observe(BY_KIND[("batch/v1", "Job")], "DELETED", _submitter())
    assert cache.parts == {"rj": {"sub"}}
    pod = {"metadata": {"name": "tune-x", "ownerReferences": [{"kind": "Job", "uid": "sub", "controller": True}]},
           "status": {"phase": "Running"}}  # fmt: skip
    assert _runs_for(pod, "ml/tune", {"rj", *cache.parts["rj"]})
    assert not _runs_for(pod, "ml/tune", {"rj"})
    cache.observe(BY_KIND[("ray.io/v1", "RayJob")], "DELETED", _rayjob())
    assert cache.parts == {}


def _job(version: str, *, suspend: bool) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "train", "namespace": "ml", "uid": "j", "resourceVersion": version, "generation": 1,
                         "labels": {"kueue.x-k8s.io/queue-name": "q"}},
            "spec": {"suspend": suspend, "template": {"spec": {"restartPolicy": "Never", "containers": [CONTAINER]}}}}  # fmt: skip


def test_the_echo_of_our_own_write_keeps_the_view_read_from_its_answer() -> None:
    """The watch event of the version a write produced is the object its answer was: it is not read
    again (a third of a busy controller's job events); a newer version is."""
    job = BY_KIND[("batch/v1", "Job")]
    cache = JobCache()
    cache.observe(job, "ADDED", _job("1", suspend=True))
    cache.writing("j")
    cache.wrote(cache.views["j"], _job("2", suspend=False))
    written = cache.views["j"]
    assert not written.suspended and written.version == "2"
    assert cache.observe(job, "MODIFIED", _job("1", suspend=True)) is False, "older than our write: skipped"
    assert cache.observe(job, "MODIFIED", _job("2", suspend=False)), "the echo still marks the job changed"
    assert cache.views["j"] is written, "the echo is not read again"
    newer = _job("3", suspend=False)
    newer["status"] = {"startTime": "2026-12-07T00:00:00Z", "active": 1}
    assert cache.observe(job, "MODIFIED", newer)
    assert cache.views["j"] is not written and cache.views["j"].started and cache.views["j"].version == "3"
