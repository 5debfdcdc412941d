"""Reading pod sets from every integrated job kind."""

from typing import Any

import pytest

from queues import errors
from queues.cycle.scheduler import Scheduler
from queues.kueue import codec
from queues.model import Config, SharedShapes
from queues.podsets import jobs

GPU = "nvidia.com/gpu"


def pod(requests: dict[str, str], **extra: Any) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": requests}}], **extra}}


def replicas(n: int, requests: dict[str, str]) -> dict[str, Any]:
    return {"replicas": n, "template": pod(requests)}


def obj(api_version: str, kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": "j", "namespace": "ns"}, "spec": spec}


@pytest.mark.parametrize(
    ("job", "expected"),
    [
        (
            obj("batch/v1", "Job", {"parallelism": 3, "completions": 2, "template": pod({"cpu": "1", GPU: "2"})}),
            [("main", 2, {"cpu": 1000, GPU: 2000})],
        ),
        (
            obj("batch/v1", "Job", {"template": pod({"cpu": "500m"})}),
            [("main", 1, {"cpu": 500})],
        ),
        (
            obj(
                "kubeflow.org/v1",
                "PyTorchJob",
                {"pytorchReplicaSpecs": {"Worker": replicas(3, {GPU: "8"}), "Master": replicas(1, {GPU: "8"})}},
            ),
            [("master", 1, {GPU: 8000}), ("worker", 3, {GPU: 8000})],
        ),
        (
            obj(
                "kubeflow.org/v1",
                "TFJob",
                {
                    "tfReplicaSpecs": {
                        "PS": replicas(2, {"cpu": "4"}),
                        "Worker": replicas(4, {GPU: "1"}),
                        "Chief": replicas(1, {"cpu": "1"}),
                    }
                },
            ),
            [("chief", 1, {"cpu": 1000}), ("ps", 2, {"cpu": 4000}), ("worker", 4, {GPU: 1000})],
        ),
        (
            obj(
                "kubeflow.org/v2beta1",
                "MPIJob",
                {"mpiReplicaSpecs": {"Launcher": replicas(1, {"cpu": "1"}), "Worker": replicas(2, {GPU: "4"})}},
            ),
            [("launcher", 1, {"cpu": 1000}), ("worker", 2, {GPU: 4000})],
        ),
        (
            obj(
                "jobset.x-k8s.io/v1alpha2",
                "JobSet",
                {
                    "replicatedJobs": [
                        {"name": "driver", "replicas": 1, "template": {"spec": {"template": pod({"cpu": "1"})}}},
                        {
                            "name": "workers",
                            "replicas": 2,
                            "template": {"spec": {"parallelism": 4, "completions": 4, "template": pod({GPU: "1"})}},
                        },
                    ]
                },
            ),
            [("driver", 1, {"cpu": 1000}), ("workers", 8, {GPU: 1000})],
        ),
    ],
    ids=["job", "job-defaults", "pytorch", "tfjob", "mpijob", "jobset"],
)
def test_pod_sets(job: dict[str, Any], expected: list[tuple[str, int, dict[str, int]]]) -> None:
    info = jobs.read_job(job)
    assert [(ps.name, ps.count, dict(ps.requests)) for ps in info.pod_sets] == expected


def test_effective_pod_request_counts_init_sidecars_overhead_and_limits() -> None:
    spec = {
        "containers": [
            {"name": "a", "resources": {"requests": {"cpu": "1"}, "limits": {GPU: "2"}}},
            {"name": "b", "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}},
        ],
        "initContainers": [
            {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}},
            {"name": "big-init", "resources": {"requests": {"cpu": "8", "memory": "512Mi"}}},
        ],
        "overhead": {"cpu": "100m"},
    }
    job = obj("batch/v1", "Job", {"template": {"spec": spec}})
    (ps,) = jobs.read_job(job).pod_sets
    # cpu: max(1 + 2 + 0.5 sidecar, 8 init + 0.5 sidecar) + 0.1 overhead; gpu from limits.
    assert dict(ps.requests) == {"cpu": 8600, "memory": 2**30 * 1000, GPU: 2000}


@pytest.mark.parametrize(
    ("job", "expected"),
    [
        (
            obj("batch/v1", "Job", {"template": pod({"cpu": "abc"})}),
            "spec.template.spec.containers[0].resources.requests.cpu: 'abc' is not a quantity",
        ),
        (obj("batch/v1", "Job", {"template": {"spec": {"containers": []}}}), "spec.template.spec.containers: required"),
        (obj("batch/v1", "Job", {"parallelism": -1, "template": pod({})}), "spec.parallelism: must be a whole number"),
        (
            obj("kubeflow.org/v1", "PyTorchJob", {"pytorchReplicaSpecs": {"Boss": replicas(1, {})}}),
            "spec.pytorchReplicaSpecs.Boss: unknown replica type",
        ),
        (obj("apps/v1", "Deployment", {}), "kind: apps/v1 Deployment is not an integrated job kind"),
        (
            {"apiVersion": "batch/v1", "kind": "Job", "metadata": {}, "spec": {"template": pod({})}},
            "metadata.name: required",
        ),
    ],
    ids=["quantity", "no-containers", "negative", "replica-type", "kind", "name"],
)
def test_bad_jobs_name_the_field(job: dict[str, Any], expected: str) -> None:
    with pytest.raises(errors.Invalid) as info:
        jobs.read_job(job)
    assert any(str(e).startswith(expected) for e in info.value.errors), info.value.errors


def test_queue_and_priority_labels() -> None:
    job = obj("batch/v1", "Job", {"template": pod({})})
    job["metadata"]["labels"] = {jobs.QUEUE_LABEL: "team-a", jobs.PRIORITY_LABEL: "high"}
    info = jobs.read_job(job)
    assert (info.queue_name, info.priority_class, info.key) == ("team-a", "high", "ns/j")


def test_shared_shapes_hold_one_copy_per_template_and_stay_bounded() -> None:
    def pod_sets(gpus: str) -> tuple[jobs.PodSet, ...]:
        obj = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "j", "namespace": "ml"},
            "spec": {
                "template": {
                    "spec": {"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": gpus}}}]}
                }
            },
        }
        return jobs.read_job(obj).pod_sets

    shapes = SharedShapes(limit=2)
    first, shape = shapes.share(pod_sets("1"))
    again, same_shape = shapes.share(pod_sets("1"))  # an equal job, parsed anew
    assert again is first and same_shape is shape
    other, _ = shapes.share(pod_sets("2"))
    assert other is not first and other[0].requests == {"nvidia.com/gpu": 2000}
    shapes.share(pod_sets("4"))  # a third shape: the least recently used ("1") is dropped
    assert len(shapes) == 2
    fresh = pod_sets("1")
    assert shapes.share(fresh)[0] is fresh


def test_a_workload_names_the_class_its_priority_came_from() -> None:
    """Kueue's priorityClassRef (metrics' priority_class): the WorkloadPriorityClass the label names
    if it exists, else the pod template's PriorityClass, else the globalDefault one, else none."""
    wpc = codec.parse({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
                     "metadata": {"name": "urgent"}, "value": 1000})  # fmt: skip
    sched = Scheduler(Config.of([wpc]))
    sched.intake.set_pod_priorities({"batch": (10, False), "everyone": (1, True)})

    def made(labels: dict[str, str], pod_class: str | None = None) -> tuple[str, int]:
        spec: dict[str, Any] = {"containers": [{"name": "c"}]}
        if pod_class is not None:
            spec["priorityClassName"] = pod_class
        job = obj("batch/v1", "Job", {"template": {"spec": spec}})
        job["metadata"]["labels"] = labels
        wl = sched.intake.workload_for(jobs.read_job(job), seq=1, now=0.0)
        return wl.priority_class, wl.priority

    assert made({jobs.PRIORITY_LABEL: "urgent"}, "batch") == ("urgent", 1000)
    assert made({jobs.PRIORITY_LABEL: "missing"}, "batch") == ("batch", 10)
    assert made({}) == ("everyone", 1)
    sched.intake.set_pod_priorities({})
    assert made({}) == ("", 0)
