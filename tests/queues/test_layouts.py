"""Pod sets of the Ray (RayCluster, RayJob, RayService), newer Kubeflow and partially admitted kinds (``queues.podsets.layouts``), as Kueue reads them."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from queues import errors
from queues.podsets import jobs

GPU = "nvidia.com/gpu"


def pod(requests: dict[str, str]) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": requests}}]}}


def obj(api_version: str, kind: str, spec: dict[str, Any], **annotations: str) -> dict[str, Any]:
    meta = {"name": "j", "namespace": "ns", "annotations": annotations}
    return {"apiVersion": api_version, "kind": kind, "metadata": meta, "spec": spec}


def ray_cluster(**extra: Any) -> dict[str, Any]:
    return {
        "headGroupSpec": {"template": pod({"cpu": "2"})},
        "workerGroupSpecs": [
            {"groupName": "GPU-Group", "replicas": 2, "numOfHosts": 2, "template": pod({GPU: "4"})},
            {"groupName": "cpu", "template": pod({"cpu": "8"})},
        ],
        **extra,
    }


def pod_sets(job: dict[str, Any]) -> list[tuple[str, int, dict[str, int]]]:
    return [(ps.name, ps.count, dict(ps.requests)) for ps in jobs.read_job(job).pod_sets]


def test_ray_cluster_head_and_worker_groups_replicas_times_hosts() -> None:
    assert pod_sets(obj("ray.io/v1", "RayCluster", ray_cluster())) == [
        ("head", 1, {"cpu": 2000}),
        ("gpu-group", 4, {GPU: 4000}),
        ("cpu", 1, {"cpu": 8000}),
    ]


def test_ray_job_adds_kuberays_default_submitter_unless_http_mode() -> None:
    spec = {"shutdownAfterJobFinishes": True, "rayClusterSpec": ray_cluster()}
    job = obj("ray.io/v1", "RayJob", spec)
    found = pod_sets(job)
    assert found[-1] == ("submitter", 1, {"cpu": 500, "memory": 200 * 2**20 * 1000})
    info = jobs.read_job(job)
    assert "submitter" not in info.template_paths, "KubeRay's default submitter has no template to write to"
    assert info.template_paths["gpu-group"] == "/spec/rayClusterSpec/workerGroupSpecs/0/template"
    own = obj("ray.io/v1", "RayJob", {**spec, "submitterPodTemplate": pod({"cpu": "1"})})
    assert pod_sets(own)[-1] == ("submitter", 1, {"cpu": 1000})
    assert jobs.read_job(own).template_paths["submitter"] == "/spec/submitterPodTemplate"
    http = obj("ray.io/v1", "RayJob", {**spec, "submissionMode": "HTTPMode"})
    assert [name for name, _, _ in pod_sets(http)] == ["head", "gpu-group", "cpu"]


def test_ray_service_is_its_cluster_configs_pod_sets_and_autoscales_only_when_elastic() -> None:
    service = obj("ray.io/v1", "RayService", {"serveConfigV2": "applications: []", "rayClusterConfig": ray_cluster()})
    assert pod_sets(service) == pod_sets(obj("ray.io/v1", "RayCluster", ray_cluster()))
    assert jobs.read_job(service).template_paths["cpu"] == "/spec/rayClusterConfig/workerGroupSpecs/1/template"
    assert jobs.KINDS[("ray.io/v1", "RayService")].suspend_path == ("spec", "rayClusterConfig", "suspend")
    autoscaled = obj("ray.io/v1", "RayService", {"rayClusterConfig": ray_cluster(enableInTreeAutoscaling=True)})
    with pytest.raises(errors.Invalid) as info:
        jobs.read_job(autoscaled)
    assert [e.path for e in info.value.errors] == ["spec.rayClusterConfig.enableInTreeAutoscaling"]


@pytest.mark.parametrize(
    ("kind", "field", "types"),
    [("JAXJob", "jaxReplicaSpecs", ["Worker"]), ("XGBoostJob", "xgbReplicaSpecs", ["Worker", "Master"]),
     ("PaddleJob", "paddleReplicaSpecs", ["Worker", "Master"])],
)  # fmt: skip
def test_newer_kubeflow_kinds(kind: str, field: str, types: list[str]) -> None:
    spec = {field: {t: {"replicas": 2, "template": pod({GPU: "1"})} for t in types}}
    found = pod_sets(obj("kubeflow.org/v1", kind, spec))
    assert [name for name, _, _ in found] == sorted(t.lower() for t in types)  # master before worker
    assert all(count == 2 for _, count, _ in found)


@pytest.mark.parametrize(
    ("job", "expected"),
    [
        (
            obj("ray.io/v1", "RayJob", {"rayClusterSpec": ray_cluster()}),
            "spec.shutdownAfterJobFinishes: must be true for a queued RayJob",
        ),
        (
            obj("ray.io/v1", "RayCluster", ray_cluster(enableInTreeAutoscaling=True)),
            "spec.enableInTreeAutoscaling: a queued Ray cluster can autoscale only as an elastic job",
        ),
        (
            obj("ray.io/v1", "RayJob", {"shutdownAfterJobFinishes": True, "clusterSelector": {"a": "b"},
                                        "rayClusterSpec": ray_cluster()}),
            "spec.clusterSelector: a queued RayJob cannot run on an existing RayCluster",
        ),
        (
            obj("ray.io/v1", "RayCluster", {"headGroupSpec": {"template": pod({})},
                                            "workerGroupSpecs": [{"groupName": "Head", "template": pod({})}]}),
            "spec.workerGroupSpecs[0].groupName: 'Head' names another pod set",
        ),
        (
            obj("ray.io/v1", "RayCluster", {"headGroupSpec": {"template": pod({})}, "workerGroupSpecs": [
                {"groupName": f"g{i}", "template": pod({"cpu": "1"})} for i in range(1000)]}),
            "spec: the job has 1001 pod sets",
        ),
        (
            obj("batch/v1", "Job", {"parallelism": 4, "template": pod({})}, **{jobs.MIN_PARALLELISM: "five"}),
            f"metadata.annotations[{jobs.MIN_PARALLELISM}]: must be a whole number of pods, not 'five'",
        ),
        (
            obj("batch/v1", "Job", {"parallelism": 4, "template": pod({})}, **{jobs.MIN_PARALLELISM: "5"}),
            f"metadata.annotations[{jobs.MIN_PARALLELISM}]: must be between 1 and the Job's parallelism 4",
        ),
        (
            obj("batch/v1", "Job", {"parallelism": 4, "template": pod({})}, **{jobs.MIN_PARALLELISM: "0"}),
            f"metadata.annotations[{jobs.MIN_PARALLELISM}]: must be between 1",
        ),
    ],
    ids=["ray-shutdown", "ray-autoscaling", "ray-selector", "ray-group-name", "too-many-pod-sets", "min-nan",
         "min-above", "min-zero"],
)  # fmt: skip
def test_bad_jobs_name_the_field_and_the_fix(job: dict[str, Any], expected: str) -> None:
    with pytest.raises(errors.Invalid) as info:
        jobs.read_job(job)
    assert any(str(e).startswith(expected) for e in info.value.errors), info.value.errors


def test_a_ray_worker_group_of_a_thousand_replicas_is_one_pod_set() -> None:
    """1,000 workers are one pod set of 1,000 pods: whether they fit is the quota's business
    (ExceedsMaxQuota), not a malformed job."""
    cluster = ray_cluster()
    cluster["workerGroupSpecs"][0]["replicas"] = 1000
    assert pod_sets(obj("ray.io/v1", "RayCluster", cluster))[1][:2] == ("gpu-group", 2000)


def test_min_parallelism_marks_the_main_pod_set() -> None:
    job = obj("batch/v1", "Job", {"parallelism": 8, "completions": 8, "template": pod({GPU: "1"})},
              **{jobs.MIN_PARALLELISM: "3"})  # fmt: skip
    (ps,) = jobs.read_job(job).pod_sets
    assert (ps.count, ps.min_count) == (8, 3)
    (plain,) = jobs.read_job(obj("batch/v1", "Job", {"parallelism": 8, "template": pod({})})).pod_sets
    assert plain.min_count is None


def test_an_elastic_ray_cluster_autoscales_and_its_head_is_charged_for_the_autoscaler() -> None:
    """Kueue's rayclusters.md: in-tree autoscaling only on an elastic RayCluster; KubeRay adds the
    autoscaler sidecar to the head (500m CPU, 512Mi unless autoscalerOptions.resources says)."""
    elastic = {"kueue.x-k8s.io/elastic-job": "true"}
    info = jobs.read_job(obj("ray.io/v1", "RayCluster", ray_cluster(enableInTreeAutoscaling=True), **elastic))
    assert info.elastic
    head = next(ps for ps in info.pod_sets if ps.name == "head")
    assert dict(head.requests) == {"cpu": 2500, "memory": 512 * 2**20 * 1000}
    sized = ray_cluster(enableInTreeAutoscaling=True, autoscalerOptions={"resources": {"requests": {"cpu": "1"}}})
    head = jobs.read_job(obj("ray.io/v1", "RayCluster", sized, **elastic)).pod_sets[0]
    assert dict(head.requests) == {"cpu": 3000}
    assert pod_sets(obj("ray.io/v1", "RayCluster", ray_cluster(), **elastic))[0] == ("head", 1, {"cpu": 2000})
    job = obj("ray.io/v1", "RayJob", {"shutdownAfterJobFinishes": True,
                                      "rayClusterSpec": ray_cluster(enableInTreeAutoscaling=True)})  # fmt: skip
    with pytest.raises(errors.Invalid, match=r"rayClusterSpec.enableInTreeAutoscaling: .* only as an elastic job"):
        jobs.read_job(job)


# Kueue's site/static/examples/jobs/ray-job-autoscaling-sample.yaml (comments and the runtime env left out)
KUEUE_AUTOSCALING_RAYJOB = """
apiVersion: ray.io/v1
kind: RayJob
metadata:
  name: rayjob-autoscaling-sample
  labels:
    kueue.x-k8s.io/queue-name: user-queue
  annotations:
    kueue.x-k8s.io/elastic-job: "true"
spec:
  shutdownAfterJobFinishes: true
  entrypoint: python /home/ray/samples/sample_code.py
  rayClusterSpec:
    rayVersion: '2.9.0'
    autoscalerOptions:
      idleTimeoutSeconds: 30
      upscalingMode: Aggressive
    enableInTreeAutoscaling: true
    headGroupSpec:
      rayStartParams:
        dashboard-host: '0.0.0.0'
      template:
        spec:
          containers:
            - name: ray-head
              image: rayproject/ray:2.9.0
              resources: {limits: {cpu: "1"}, requests: {cpu: "1"}}
    workerGroupSpecs:
      - replicas: 1
        minReplicas: 1
        maxReplicas: 5
        groupName: small-group
        rayStartParams: {}
        template:
          spec:
            containers:
              - name: ray-worker
                image: rayproject/ray:2.9.0
                resources: {limits: {cpu: "1"}, requests: {cpu: "1"}}
"""


def test_kueues_autoscaling_rayjob_sample_is_elastic_and_counts_its_clusters_workers() -> None:
    """Kueue's rayjobs.md (autoscaling): the sample is read as Kueue reads it (the head charged for
    KubeRay's autoscaler sidecar, KubeRay's default submitter), and once KubeRay made its cluster
    (``status.rayClusterName``) the worker counts are that cluster's, where the autoscaler writes."""
    job = yaml.safe_load(KUEUE_AUTOSCALING_RAYJOB)
    info = jobs.read_job(job)
    assert info.elastic
    assert [(ps.name, ps.count, dict(ps.requests)) for ps in info.pod_sets] == [
        ("head", 1, {"cpu": 1500, "memory": 512 * 2**20 * 1000}),
        ("small-group", 1, {"cpu": 1000}),
        ("submitter", 1, {"cpu": 500, "memory": 200 * 2**20 * 1000}),
    ]
    job["status"] = {"rayClusterName": "rayjob-autoscaling-sample-x7k2p"}
    made = {"spec": {**job["spec"]["rayClusterSpec"],
                     "workerGroupSpecs": [{**job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0], "replicas": 4}]}}  # fmt: skip

    def lookup(kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        return made if (kind, name) == ("RayCluster", "rayjob-autoscaling-sample-x7k2p") else None

    counts = {ps.name: ps.count for ps in jobs.read_job(job, runtimes=lookup).pod_sets}
    assert counts == {"head": 1, "small-group": 4, "submitter": 1}


def test_an_autoscaling_ray_service_counts_the_workers_of_the_cluster_kuberay_made() -> None:
    """Kueue's ``raycluster.UpdatePodSets``: the Ray autoscaler scales the RayCluster KubeRay made for
    the service (its ``status.activeServiceStatus.rayClusterName``), so the counts are that cluster's
    (a group it leaves unset, or does not have, keeps the service's own)."""
    elastic = {"kueue.x-k8s.io/elastic-job": "true"}
    config = ray_cluster(enableInTreeAutoscaling=True)
    service = obj("ray.io/v1", "RayService", {"rayClusterConfig": config}, **elastic)
    service["status"] = {"activeServiceStatus": {"rayClusterName": "j-raycluster"}}
    made = {"spec": {**config, "workerGroupSpecs": [{**config["workerGroupSpecs"][0], "replicas": 3},
                                                     {"groupName": "cpu", "template": pod({})}]}}  # fmt: skip
    asked: list[tuple[str, str | None, str]] = []

    def lookup(kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        asked.append((kind, namespace, name))
        return made if (kind, namespace, name) == ("RayCluster", "ns", "j-raycluster") else None

    counts = {ps.name: ps.count for ps in jobs.read_job(service, runtimes=lookup).pod_sets}
    assert counts == {"head": 1, "gpu-group": 6, "cpu": 1} and asked == [("RayCluster", "ns", "j-raycluster")]
    assert {ps.name: ps.count for ps in jobs.read_job(service).pod_sets}["gpu-group"] == 4, "no lookup: its own"
    fixed = obj("ray.io/v1", "RayService", {"rayClusterConfig": ray_cluster()}, **elastic)
    fixed["status"] = service["status"]
    assert {ps.name: ps.count for ps in jobs.read_job(fixed, runtimes=lookup).pod_sets}["gpu-group"] == 4, (
        "a service that does not autoscale is its own spec"
    )
    plain = obj("ray.io/v1", "RayService", {"rayClusterConfig": config})
    with pytest.raises(errors.Invalid, match=r"only as an elastic job"):
        jobs.read_job(plain)
