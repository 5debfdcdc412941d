"""Every integrated job kind, end to end: queued, admitted onto the flavor in every pod template, run, released."""

from __future__ import annotations

import asyncio
import copy
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from admission.controller.controller import Controller
from admission.jobs import BY_KIND, INTEGRATIONS
from admission.jobs.base import PodSetInfo
from admission.jobs.job_fields import pointer_get
from admission.kube import client as kube_client
from admission.kube.client import ResourceRef
from admission.kube.informer import Informer
from admission.sim.server import resources
from admission.store import database, tables
from queues.podsets import jobs
from tests.admission.controller.world import CONFIG, JOBS, eventually, job, world

GPU_POD = {
    "restartPolicy": "Never",
    "containers": [{"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
}
META = {
    "namespace": "ml",
    "labels": {jobs.QUEUE_LABEL: "team-a"},
    "annotations": {"turnstile.dev/sim-runtime": "0.3"},
}


def kubeflow(api_version: str, kind: str, field: str, types: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": kind.lower(), **META},
        "spec": {
            "runPolicy": {"suspend": True},
            field: {t: {"replicas": 1, "template": {"spec": GPU_POD}} for t in types},
        },
    }


KINDS = [
    kubeflow("kubeflow.org/v1", "PyTorchJob", "pytorchReplicaSpecs", ["Master", "Worker"]),
    kubeflow("kubeflow.org/v1", "TFJob", "tfReplicaSpecs", ["Chief", "Worker"]),
    kubeflow("kubeflow.org/v2beta1", "MPIJob", "mpiReplicaSpecs", ["Launcher", "Worker"]),
    kubeflow("kubeflow.org/v1", "JAXJob", "jaxReplicaSpecs", ["Worker"]),
    kubeflow("kubeflow.org/v1", "XGBoostJob", "xgbReplicaSpecs", ["Master", "Worker"]),
    kubeflow("kubeflow.org/v1", "PaddleJob", "paddleReplicaSpecs", ["Master", "Worker"]),
    {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "jobset", **META},
        "spec": {
            "suspend": True,
            "replicatedJobs": [
                {"name": "leader", "replicas": 1, "template": {"spec": {"template": {"spec": GPU_POD}}}},
                {"name": "workers", "replicas": 2, "template": {"spec": {"template": {"spec": GPU_POD}}}},
            ],
        },
    },
    {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "rayjob", **META},
        "spec": {
            "suspend": True,
            "entrypoint": "python train.py",
            "shutdownAfterJobFinishes": True,
            "rayClusterSpec": {
                "headGroupSpec": {"template": {"spec": GPU_POD}},
                "workerGroupSpecs": [{"groupName": "GPU-Workers", "replicas": 2, "template": {"spec": GPU_POD}}],
            },
            "submitterPodTemplate": {"spec": GPU_POD},
        },
    },
]


@pytest.mark.parametrize("obj", KINDS, ids=lambda o: o["kind"])
async def test_job_kind_is_admitted_onto_its_flavor_and_released(
    obj: dict[str, Any], tmp_path: Path, migrated_url: str
) -> None:
    integration = BY_KIND[(obj["apiVersion"], obj["kind"])]
    async with world(tmp_path, migrated_url) as w:
        await w.apply(CONFIG)
        w.start_controller("replica-1")
        await w.kube.create(integration.ref, "ml", obj)
        info = jobs.read_job(obj)

        async def started() -> dict[str, Any] | None:
            current = await w.kube.get(integration.ref, "ml", obj["metadata"]["name"])
            return None if integration.is_suspended(current) else current

        running = await eventually(started, what=f"the {obj['kind']} to be unsuspended")
        for ps, pointer in info.template_paths.items():
            spec = pointer_get(running, pointer + "/spec")
            assert spec["nodeSelector"] == {"gpu": "a100"}, ps
            assert {"key": "gpu", "operator": "Equal", "value": "a100", "effect": "NoSchedule"} in spec["tolerations"]

        async def released() -> bool:
            async with database.transaction(w.sessions) as s:
                state = (await s.execute(select(tables.Workload.state))).scalar_one()
                held = (await s.execute(select(tables.Admission))).scalars().all()
            return state == "Finished" and not held

        assert await eventually(released, timeout=15, what="the workload finished and its quota released")


async def test_a_cluster_without_the_operators_crds_schedules_and_takes_a_crd_installed_later(
    tmp_path: Path, migrated_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Most clusters run only some operators. Absent kinds are said once (INFO), never hold back
    readiness or leadership, and a kind whose CRD is installed later is queued at once."""
    caplog.set_level(logging.INFO, logger="admission.kube.informer")
    async with world(tmp_path, migrated_url, crds=()) as w:
        await w.apply(CONFIG)
        controller = w.start_controller("replica-1")
        await eventually(controller.ready, what="the controller ready without any operator's CRD")
        await eventually(lambda: controller.term is not None, what="a term without any operator's CRD")
        await w.create(job("plain", gpus=1))
        await eventually(lambda: w.started(JOBS, "plain"), what="a batch Job admitted")
        absent = sorted(i.ref.kind for i in controller.informers if i.absent)
        custom = [i.ref.kind for i in INTEGRATIONS if not i.built_in]
        assert absent == sorted([*custom, "ClusterTrainingRuntime", "TrainingRuntime"])  # (a TrainJob's runtimes)
        said = [r.getMessage() for r in caplog.records if "not served by this cluster" in r.getMessage()]
        assert len(said) == len(absent) + 1, said  # the custom job kinds and the ProvisioningRequest, once each
        assert all(r.levelname == "INFO" for r in caplog.records if r.name.endswith("informer"))
        assert f"not served by this cluster (install their CRDs): {', '.join(custom)}" in "\n".join(
            controller.readiness.report()
        )

        pytorch = BY_KIND[("kubeflow.org/v1", "PyTorchJob")]
        crd = resources.crd_for(next(r for r in resources.OPERATORS if r.kind == "PyTorchJob"))
        await w.kube.create(kube_client.CRDS, None, crd)
        await eventually(lambda: not _informer(controller, "PyTorchJob").absent, what="the new CRD noticed")
        await w.kube.create(pytorch.ref, "ml", KINDS[0])
        await eventually(lambda: w.started(pytorch.ref, "pytorchjob"), what="the PyTorchJob admitted")
        refused = {status for (_, status) in w.controller_kube.answers if 400 <= status < 500}
        assert refused <= {404}, "nothing refused but the lists of kinds not served"


def _informer(controller: Controller, kind: str) -> Informer:
    return next(i for i in controller.informers if i.ref.kind == kind)


async def test_a_queued_job_that_cannot_be_read_gets_a_warning_event(tmp_path: Path, migrated_url: str) -> None:
    """The webhook refuses such jobs; one created while it was away is not silently left suspended:
    an InvalidJob Warning on the job says what is wrong, once."""
    async with world(tmp_path, migrated_url) as w:
        await w.apply(CONFIG)
        w.start_controller("replica-1")
        bad = json.loads(json.dumps(KINDS[0]))
        bad["metadata"]["name"] = "unreadable"
        bad["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"] = {
            "limits": {"nvidia.com/gpu": "abc"}
        }
        pytorch = BY_KIND[("kubeflow.org/v1", "PyTorchJob")]
        await w.kube.create(pytorch.ref, "ml", bad)

        async def warned() -> list[str]:
            events = await w.kube.request("GET", "/api/v1/namespaces/ml/events")
            return [
                e["message"]
                for e in events["items"]
                if e["involvedObject"]["name"] == "unreadable"
                and e["reason"] == "InvalidJob"
                and e["type"] == "Warning"
            ]

        (message,) = await eventually(warned, what="an InvalidJob warning")
        assert "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].resources.limits.nvidia.com/gpu" in message
        assert "'abc' is not a quantity" in message
        await asyncio.sleep(0.5)
        assert len(await warned()) == 1, "said once"


RAYCLUSTER = {
    "apiVersion": "ray.io/v1",
    "kind": "RayCluster",
    "metadata": {"name": "raycluster", "namespace": "ml", "labels": {jobs.QUEUE_LABEL: "team-a"}},
    "spec": {
        "suspend": True,
        "headGroupSpec": {"template": {"spec": GPU_POD}},
        "workerGroupSpecs": [{"groupName": "workers", "replicas": 1, "numOfHosts": 2, "template": {"spec": GPU_POD}}],
    },
}


def _long_running(obj: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(json.dumps(obj))
    out["metadata"]["annotations"] = {}  # runs until stopped
    return out


@pytest.mark.parametrize("obj", [*KINDS, RAYCLUSTER], ids=lambda o: o["kind"])
async def test_job_kind_is_preempted_requeued_and_billed(
    obj: dict[str, Any], tmp_path: Path, migrated_url: str
) -> None:
    """A running job of each kind gives way to a higher-priority Job that needs all the quota: it is
    suspended (its pods stop), waits, is admitted again when the quota is free, and its GPU time
    is on the ledger; the preemptor starts only once the victim's pods are gone."""
    integration = BY_KIND[(obj["apiVersion"], obj["kind"])]
    name = obj["metadata"]["name"]
    victim = _long_running(obj)
    async with world(tmp_path, migrated_url) as w:
        await w.apply(CONFIG)
        w.start_controller("replica-1")
        await w.kube.create(integration.ref, "ml", victim)
        await eventually(lambda: w.started(integration.ref, name), what=f"the {obj['kind']} admitted")
        await w.create(job("urgent", gpus=8, priority="high"))

        async def suspended_and_stopped() -> bool:
            current = await w.kube.get(integration.ref, "ml", name)
            pods = await w.kube.request("GET", "/api/v1/namespaces/ml/pods")
            own = [p for p in pods["items"] if p["metadata"]["labels"].get("job-name") == name]
            return integration.is_suspended(current) and not own

        await eventually(suspended_and_stopped, timeout=15, what=f"the {obj['kind']} preempted and its pods gone")
        await eventually(lambda: w.started(JOBS, "urgent"), what="the preemptor started")
        await w.kube.delete(JOBS, "ml", "urgent")
        await eventually(lambda: w.started(integration.ref, name), timeout=15, what="the victim admitted again")
        kind, intervals = await w.billed(name)
        assert kind == obj["kind"]
        assert len(intervals) == 2, "two admissions on the ledger: before the preemption and after"
        assert all(resource == "nvidia.com/gpu" for resource, _ in intervals)


def test_a_rayjob_with_kuberays_default_submitter_takes_directives_on_its_other_templates() -> None:
    """The default submitter pod has no template in the RayJob: nothing is written for it, and the
    job counts as carrying its directives when its own templates do."""
    obj = json.loads(json.dumps(KINDS[-1]))
    del obj["spec"]["submitterPodTemplate"]
    obj["metadata"]["uid"] = "u1"
    integration = BY_KIND[("ray.io/v1", "RayJob")]
    view = integration.view(obj)
    assert view.info is not None and [ps.name for ps in view.info.pod_sets] == ["head", "gpu-workers", "submitter"]
    infos = [PodSetInfo(ps.name, {"gpu": "a100"}, []) for ps in view.info.pod_sets]
    ops = integration.patch(view, suspend=False, infos=infos, admission="a1")
    paths = [op["path"] for op in ops]
    assert "/spec/rayClusterSpec/headGroupSpec/template/spec/nodeSelector" in paths
    assert "/spec/rayClusterSpec/workerGroupSpecs/0/template/spec/nodeSelector" in paths
    assert not any("submitter" in p for p in paths)
    applied = json.loads(json.dumps(obj))
    for op in ops:
        if op["path"].endswith("/nodeSelector"):
            pointer_get(applied, op["path"].rsplit("/", 1)[0])["nodeSelector"] = op["value"]
    assert integration.view(applied).carries(infos)


CLUSTER_RUNTIMES = ResourceRef("trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime", "clustertrainingruntimes",
                               namespaced=False)  # fmt: skip
TORCH = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1",
    "kind": "ClusterTrainingRuntime",
    "metadata": {"name": "torch-distributed"},
    "spec": {
        "mlPolicy": {"numNodes": 1},
        "template": {
            "spec": {
                "replicatedJobs": [
                    {
                        "name": "node",
                        "template": {
                            "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                            "spec": {"template": {"spec": {"restartPolicy": "Never",
                                                            "containers": [{"name": "node", "image": "torch"}]}}},
                        },
                    }
                ]
            }
        },
    },
}  # fmt: skip
TRAINJOB = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1",
    "kind": "TrainJob",
    "metadata": {"name": "llm", "namespace": "ml", "labels": {jobs.QUEUE_LABEL: "team-a"}},
    "spec": {
        "suspend": True,
        "runtimeRef": {"name": "torch-distributed"},
        "trainer": {"numNodes": 2, "resourcesPerNode": {"limits": {"nvidia.com/gpu": "2"}}},
    },
}


async def test_a_trainjob_runs_its_runtimes_pods_on_its_flavor_and_gives_way(tmp_path: Path, migrated_url: str) -> None:
    """Read through its ClusterTrainingRuntime (which may come after it): admitted with the flavor's
    node labels and tolerations in Turnstile's runtime patch (so its pods carry them), preempted
    (suspended, the patch emptied), admitted again, on the ledger."""
    trainjob = BY_KIND[("trainer.kubeflow.org/v1alpha1", "TrainJob")]
    async with world(tmp_path, migrated_url) as w:
        await w.apply(CONFIG)
        w.start_controller("replica-1")
        await w.kube.create(trainjob.ref, "ml", TRAINJOB)
        await asyncio.sleep(0.5)
        assert trainjob.is_suspended(await w.kube.get(trainjob.ref, "ml", "llm")), "no runtime yet: not admitted"
        await w.kube.create(CLUSTER_RUNTIMES, None, TORCH)
        await eventually(lambda: w.started(trainjob.ref, "llm"), what="the TrainJob admitted once its runtime came")
        running = await w.kube.get(trainjob.ref, "ml", "llm")
        (patch,) = running["spec"]["runtimePatches"]
        node = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
        assert patch["manager"] == "kueue.x-k8s.io/manager" and node["name"] == "node"
        assert node["template"]["spec"]["template"]["spec"]["nodeSelector"] == {"gpu": "a100"}

        async def pods() -> list[dict[str, Any]]:
            listed = await w.kube.request("GET", "/api/v1/namespaces/ml/pods")
            return [p for p in listed["items"] if p["metadata"]["labels"].get("job-name") == "llm"]

        made = await eventually(lambda: _two(pods()), what="the runtime's two node pods")
        assert all(p["spec"]["nodeSelector"] == {"gpu": "a100"} for p in made)
        await w.create(job("urgent", gpus=8, priority="high"))

        async def given_way() -> bool:
            current = await w.kube.get(trainjob.ref, "ml", "llm")
            entry = current["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
            return trainjob.is_suspended(current) and not entry["replicatedJobs"] and not await pods()

        await eventually(given_way, timeout=15, what="the TrainJob suspended, its patch emptied, its pods gone")
        await w.kube.delete(JOBS, "ml", "urgent")
        await eventually(lambda: w.started(trainjob.ref, "llm"), timeout=15, what="the TrainJob admitted again")
        assert await w.billed("llm") == ("TrainJob", [("nvidia.com/gpu", 4000)] * 2)


async def _two(found: Any) -> list[dict[str, Any]] | None:
    pods: list[dict[str, Any]] = await found
    return pods if len(pods) == 2 else None


def test_a_status_update_reuses_what_was_read_from_the_spec() -> None:
    """The controller's job views: an event that changes neither the spec (metadata.generation) nor
    labels or annotations reuses the parsed pod sets; any of those changing reads them afresh."""
    integration = BY_KIND[("batch/v1", "Job")]
    obj = job("j", gpus=4)
    obj["metadata"].update(uid="u1", generation=1, resourceVersion="1")
    first = integration.view(obj)
    running = copy.deepcopy(obj)
    running["metadata"]["resourceVersion"] = "2"
    running["status"] = {"startTime": "2026-12-04T20:00:00Z", "active": 1}
    second = integration.view(running, previous=first)
    assert second.info is first.info and second.version == "2" and second.started and second.active
    resized = copy.deepcopy(running)
    resized["metadata"].update(generation=2, resourceVersion="3")
    resized["spec"].update(parallelism=3, completions=3)
    third = integration.view(resized, previous=second)
    assert third.info is not None and third.info.pod_sets[0].count == 3
    relabelled = copy.deepcopy(resized)
    relabelled["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "other"
    fourth = integration.view(relabelled, previous=third)
    assert fourth.info is not None and fourth.info.queue_name == "other"
