"""The newer job kinds as a user meets them: kubectl against the simulated cluster, the webhook over
TLS, a controller replica, PostgreSQL. A RayJob and a partially admitted Job are suspended at creation
and started onto their flavor; bad ones are refused naming the field; a CronJob's Jobs are queued by
the labels of its jobTemplate, whether its controller or ``kubectl create job --from`` makes them; a
SparkApplication's pods are its app's, never queued as plain pods."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path
from typing import Any

import pytest

from admission.sim.host import SimHost
from admission.sim.operators.cronjobs import CRONJOBS, JOBS
from tests.admission.controller.world import eventually
from tests.admission.runner import KUBECTL, kubectl, turnstile
from tests.e2e.test_pods import cluster, create, gated, live, running

pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not on PATH")

QUEUE = {"kueue.x-k8s.io/queue-name": "team-a"}
GPU_POD = {
    "restartPolicy": "Never",
    "containers": [
        {"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}
    ],
}


def rayjob(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": name, "namespace": "ml", "labels": QUEUE, "annotations": {"turnstile.dev/sim-runtime": "1"}},
        "spec": {
            "entrypoint": "python tune.py",
            "shutdownAfterJobFinishes": True,
            "rayClusterSpec": {
                "headGroupSpec": {"template": {"spec": {"containers": [{"name": "head", "image": "ray", "resources": {"requests": {"cpu": "2"}}}]}}},
                "workerGroupSpecs": [{"groupName": "gpu", "replicas": 1, "template": {"spec": GPU_POD}}],
            },
            # (KubeRay's default submitter asks for memory, which this ClusterQueue does not cover)
            "submitterPodTemplate": {"spec": {"restartPolicy": "Never", "containers": [{"name": "submit", "image": "ray", "resources": {"requests": {"cpu": "500m"}}}]}},
            **spec,
        },
    }  # fmt: skip


def batch_job(name: str, parallelism: int, minimum: str | None = None) -> dict[str, Any]:
    notes = {"kueue.x-k8s.io/job-min-parallelism": minimum} if minimum is not None else {}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "ml", "labels": QUEUE, "annotations": notes},
        "spec": {"parallelism": parallelism, "completions": parallelism, "template": {"spec": GPU_POD}},
    }


def _get(host: SimHost, res: Any, name: str) -> dict[str, Any]:
    return host.server.store.get(res, "ml", name)


async def test_a_rayjob_and_a_partial_job_through_kubectl(tmp_path: Path, migrated_url: str) -> None:
    async with cluster(tmp_path, migrated_url) as (host, _kube):
        rayjobs = next(r for r in host.server.served if r.plural == "rayjobs")
        code, _, err = await create(host, rayjob("tune"))
        assert code == 0, err
        started = await eventually(
            lambda: (j := _get(host, rayjobs, "tune"))["spec"].get("suspend") is False and j, what="the RayJob started"
        )
        worker = started["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
        assert worker["nodeSelector"] == {"gpu": "a100"}
        # as KubeRay: a RayCluster owned by the RayJob, then a submitter Job of its name, neither queued
        made = await eventually(
            lambda: _get(host, rayjobs, "tune").get("status", {}).get("rayClusterName"), what="its RayCluster"
        )
        clusters = next(r for r in host.server.served if r.plural == "rayclusters")
        owners = [o["kind"] for o in _get(host, clusters, made)["metadata"]["ownerReferences"]]
        assert owners == ["RayJob"] and made.startswith("tune-")
        await eventually(lambda: _get(host, JOBS, "tune"), what="its submitter Job")
        await eventually(lambda: running(host, f"{made}-gpu-") or None, what="its cluster's workers running")
        workers = [p for n, p in live(host, f"{made}-gpu-").items()]
        assert workers and all(p["spec"]["nodeSelector"] == {"gpu": "a100"} for p in workers)
        await eventually(
            lambda: _get(host, rayjobs, "tune").get("status", {}).get("jobDeploymentStatus") == "Complete",
            timeout=20,
            what="the RayJob complete",
        )
        code, out, err = await kubectl(host.kubeconfig, "get", "workloads", "-n", "ml", "-o", "name")
        assert code == 0 and out.split() == [w for w in out.split() if "rayjob-tune-" in w], out
        code, out, err = await kubectl(host.kubeconfig, "get", "rayclusters", "-n", "ml", "-o", "name")
        assert code == 0 and made not in out, "shutdownAfterJobFinishes: KubeRay deleted the cluster"
        # HTTPMode: KubeRay submits to the cluster itself, no submitter Job; the job runs its runtime there
        code, _, err = await create(host, rayjob("http", submissionMode="HTTPMode"))
        assert code == 0, err
        await eventually(
            lambda: _get(host, rayjobs, "http").get("status", {}).get("jobDeploymentStatus") == "Complete",
            timeout=20,
            what="the HTTPMode RayJob complete",
        )
        code, out, err = await kubectl(host.kubeconfig, "get", "jobs", "-n", "ml", "-o", "name")
        assert code == 0 and "job.batch/http" not in out.split(), out
        # the queue holds 2 GPUs: a 4-pod sweep that may run with 1 starts with what is free
        code, _, err = await create(host, batch_job("sweep", 4, "1"))
        assert code == 0, err
        sweep = await eventually(
            lambda: (j := _get(host, JOBS, "sweep"))["spec"].get("suspend") is False and j, what="the sweep started"
        )
        assert sweep["spec"]["parallelism"] == 2
        env = {**os.environ, "TURNSTILE_DATABASE_URL": migrated_url}
        ran = turnstile("usage", "--by", "namespace", "-o", "json", env=env)
        assert ran.returncode == 0, ran.stderr
        assert any(r["resource"] == "nvidia.com/gpu" and r["hours"] > 0 for r in json.loads(ran.stdout)["rows"])


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (batch_job("bad", 4, "4"), "must be less than the Job's parallelism 4"),
        (batch_job("bad", 4, "lots"), "must be a whole number of pods, not 'lots'"),
        (rayjob("bad", shutdownAfterJobFinishes=False), "spec.shutdownAfterJobFinishes: must be true"),
    ],
    ids=["min-not-below", "min-nan", "ray-shutdown"],
)
async def test_bad_jobs_are_refused_by_kubectl_naming_the_field(
    obj: dict[str, Any], expected: str, tmp_path: Path, migrated_url: str
) -> None:
    async with cluster(tmp_path, migrated_url) as (host, _kube):
        code, _, err = await create(host, obj)
        assert code != 0 and expected in err, err


async def test_a_cronjobs_jobs_are_queued_by_its_template_labels(tmp_path: Path, migrated_url: str) -> None:
    cron = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "nightly", "namespace": "ml"},
        "spec": {
            "schedule": "* * * * *",
            "jobTemplate": {"metadata": {"labels": QUEUE}, "spec": {"template": {"spec": GPU_POD}}},
        },
    }
    async with cluster(tmp_path, migrated_url) as (host, _kube):
        code, _, err = await create(host, cron)
        assert code == 0, err
        # the user's way to run it now: the same Job the CronJob controller makes, queued alike
        code, _, err = await kubectl(host.kubeconfig, "create", "job", "now", "--from=cronjob/nightly", "-n", "ml")
        assert code == 0, err
        manual = await eventually(
            lambda: (j := _get(host, JOBS, "now"))["spec"].get("suspend") is False and j, what="the manual run admitted"
        )
        assert manual["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
        assert manual["spec"]["template"]["spec"]["nodeSelector"] == {"gpu": "a100"}
        # its last run was two minutes ago: the controller runs it for the current minute
        ago = (dt.datetime.now(dt.UTC) - dt.timedelta(minutes=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
        current = host.server.store.get(CRONJOBS, "ml", "nightly")
        current["status"] = {"lastScheduleTime": ago}
        host.server.store.replace(CRONJOBS, "ml", "nightly", current, subresource="status")

        def scheduled() -> dict[str, Any] | None:
            made = [
                j
                for j in host.server.store.list(JOBS, "ml")[0]
                if j["metadata"]["name"].startswith("nightly-") and j["spec"].get("suspend") is False
            ]
            return made[0] if made else None

        job = await eventually(scheduled, timeout=15, what="the scheduled Job created, queued and admitted")
        assert job["metadata"]["ownerReferences"][0]["kind"] == "CronJob"
        assert "turnstile.dev/admission" in job["metadata"]["annotations"], "started by Turnstile, not created running"


async def test_a_trainjob_through_kubectl_and_one_naming_a_runtime_that_does_not_exist(
    tmp_path: Path, migrated_url: str
) -> None:
    runtime = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": "torch-distributed"},
        "spec": {"template": {"spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": GPU_POD}}}}]}}},
    }  # fmt: skip

    def trainjob(name: str, runtime_name: str) -> dict[str, Any]:
        return {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": {"name": name, "namespace": "ml", "labels": QUEUE},
            "spec": {"runtimeRef": {"name": runtime_name}, "trainer": {"numNodes": 2}},
        }

    async with cluster(tmp_path, migrated_url) as (host, _kube):
        code, _, err = await create(host, trainjob("typo", "torch-distibuted"))
        assert code != 0, "a TrainJob that could never be read is refused, not left waiting"
        assert "spec.runtimeRef.name: ClusterTrainingRuntime 'torch-distibuted' does not exist" in err, err
        code, _, err = await create(host, runtime)
        assert code == 0, err
        trainjobs = next(r for r in host.server.served if r.plural == "trainjobs")

        async def created() -> bool:  # (the replica's informer hears of the runtime a moment after it is made)
            return (await create(host, trainjob("llm", "torch-distributed")))[0] == 0

        await eventually(created, what="the TrainJob accepted once the webhook's replica knows its runtime")
        started = await eventually(
            lambda: (j := _get(host, trainjobs, "llm"))["spec"].get("suspend") is False and j,
            what="the TrainJob started",
        )
        assert started["spec"]["runtimePatches"][0]["manager"] == "kueue.x-k8s.io/manager"


def spark_app(name: str, gpus: int, **spec: Any) -> dict[str, Any]:
    """Kueue's sample SparkApplication, its executors asking a GPU each (no memory: not covered here)."""
    return {
        "apiVersion": "sparkoperator.k8s.io/v1beta2",
        "kind": "SparkApplication",
        "metadata": {"name": name, "namespace": "ml", "labels": QUEUE},
        "spec": {
            "type": "Scala",
            "mode": "cluster",
            "sparkVersion": "4.0.0",
            "image": "spark:4.0.0",
            "mainClass": "org.apache.spark.examples.SparkPi",
            "mainApplicationFile": "local:///opt/spark/examples/jars/spark-examples.jar",
            "driver": {"coreRequest": "1", "serviceAccount": "spark"},
            "executor": {"instances": gpus, "coreRequest": "1", "gpu": {"name": "nvidia.com/gpu", "quantity": 1}},
            **spec,
        },
    }


async def test_spark_applications_through_kubectl(tmp_path: Path, migrated_url: str) -> None:
    """Suspended at creation and started onto the flavor; its executors (owned by the driver pod and
    labelled with the app's queue, as the operator makes them) run ungated, never queued as plain
    pods; a second app waits for the GPUs; client mode and dynamic allocation are refused."""
    async with cluster(tmp_path, migrated_url) as (host, _kube):
        code, _, err = await create(host, spark_app("pi", 2, mode="client", dynamicAllocation={"enabled": True}))
        assert code != 0 and "spec.mode: only cluster mode is queued" in err, err
        assert "spec.dynamicAllocation.enabled" in err, err
        for name in ("pi", "pi-2"):
            code, _, err = await create(host, spark_app(name, 2))
            assert code == 0, err
        apps = next(r for r in host.server.served if r.plural == "sparkapplications")
        started = await eventually(
            lambda: (a := _get(host, apps, "pi"))["spec"].get("suspend") is False and a, what="the app started"
        )
        assert started["spec"]["executor"]["nodeSelector"] == {"gpu": "a100"}
        await eventually(lambda: len(running(host, "pi-")) == 3, what="its driver and two executors running")
        assert not gated(host), "a Spark app's pods are its app's, not plain pods held by the queue"
        owners = {n: p["metadata"]["ownerReferences"][0]["kind"] for n, p in live(host, "pi-").items()}
        assert sorted(owners.values()) == ["Pod", "Pod", "SparkApplication"], owners
        assert _get(host, apps, "pi-2")["spec"]["suspend"] is True, "no GPU left for the second app"
        env = {**os.environ, "TURNSTILE_DATABASE_URL": migrated_url}

        def waiting() -> Any:  # (what describe reads is written by the leader's step after the app is read)
            said = turnstile("describe", "workload", "ml/pi-2", env=env)
            return said if said.returncode == 0 and "WaitingForQuota" in said.stdout else None

        said = await eventually(waiting, timeout=20, what="describe to say why the second app waits")
        assert "SparkApplication" in said.stdout and "insufficient unused quota for nvidia.com/gpu" in said.stdout


def appwrapper(name: str, component: dict[str, Any], pod_sets: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"template": component}
    if pod_sets is not None:
        entry["podSets"] = pod_sets
    return {
        "apiVersion": "workload.codeflare.dev/v1beta2",
        "kind": "AppWrapper",
        "metadata": {"name": name, "namespace": "ml", "labels": QUEUE},
        "spec": {"components": [entry]},
    }


async def test_an_appwrapper_through_kubectl(tmp_path: Path, migrated_url: str) -> None:
    """Kueue's Deployment sample, its Deployment and pods labelled for the queue too: the AppWrapper is
    suspended at creation and admitted as one workload; the Deployment it wraps is made by its
    controller and its pods run ungated (a queued parent's part is never queued itself); one whose
    component cannot be read is refused naming the field."""
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "nginx", "labels": {"app": "nginx", **QUEUE}},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "nginx"}},
            "template": {
                "metadata": {"labels": {"app": "nginx", **QUEUE}},
                "spec": GPU_POD | {"restartPolicy": "Always"},
            },
        },
    }
    async with cluster(tmp_path, migrated_url) as (host, _kube):
        thing = {"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "t"}, "spec": {}}
        code, _, err = await create(host, appwrapper("bad", thing))
        assert code != 0 and "spec.components[0].podSets: required for a Thing" in err, err
        code, _, err = await create(
            host, appwrapper("web", deployment, [{"path": "template.spec.template", "replicas": 2}])
        )
        assert code == 0, err
        wrappers = next(r for r in host.server.served if r.plural == "appwrappers")
        started = await eventually(
            lambda: (a := _get(host, wrappers, "web"))["spec"].get("suspend") is False and a,
            what="the AppWrapper started",
        )
        assert started["spec"]["components"][0]["podSetInfos"][0]["nodeSelector"] == {"gpu": "a100"}
        await eventually(lambda: len(running(host, "nginx-")) == 2, what="the wrapped Deployment's two pods running")
        assert not gated(host), "an AppWrapper's pods are its, not plain pods held by the queue"
        assert all(p["spec"]["nodeSelector"] == {"gpu": "a100"} for p in live(host, "nginx-").values())
        env = {**os.environ, "TURNSTILE_DATABASE_URL": migrated_url}
        listed = turnstile("get", "workloads", "-A", "-o", "json", env=env)
        assert listed.returncode == 0, listed.stderr
        names = [w["metadata"]["name"] for w in json.loads(listed.stdout)["items"]]
        assert len(names) == 1 and names[0].startswith("appwrapper-web-"), names  # (not the Deployment's too)


def rayservice(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {"name": name, "namespace": "ml", "labels": QUEUE},
        "spec": {
            "serveConfigV2": "applications: []",
            "rayClusterConfig": {
                "headGroupSpec": {"template": {"spec": {"containers": [{"name": "head", "image": "ray", "resources": {"requests": {"cpu": "1"}}}]}}},
                "workerGroupSpecs": [{"groupName": "gpu", "replicas": 2, "template": {"spec": GPU_POD | {"restartPolicy": "Always"}}}],
            },
        },
    }  # fmt: skip


async def test_a_rayservice_through_kubectl(tmp_path: Path, migrated_url: str) -> None:
    """Suspended at creation (``spec.rayClusterConfig.suspend``) and admitted onto the flavor; the
    RayCluster KubeRay makes for it (labelled for the queue too) is its, not a workload of its own;
    a second service waits for the GPUs until the first is deleted; one that autoscales is refused."""
    async with cluster(tmp_path, migrated_url) as (host, _kube):
        scaled = rayservice("scaled")
        scaled["spec"]["rayClusterConfig"]["enableInTreeAutoscaling"] = True
        code, _, err = await create(host, scaled)
        assert code != 0 and "spec.rayClusterConfig.enableInTreeAutoscaling" in err, err
        for name in ("serve", "serve-2"):
            code, _, err = await create(host, rayservice(name))
            assert code == 0, err
        services = next(r for r in host.server.served if r.plural == "rayservices")

        def admitted(name: str) -> Any:
            svc = _get(host, services, name)
            return svc["spec"]["rayClusterConfig"].get("suspend") is False and svc

        started = await eventually(lambda: admitted("serve"), what="the RayService admitted")
        worker = started["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["template"]["spec"]
        assert worker["nodeSelector"] == {"gpu": "a100"}
        await eventually(lambda: len(running(host, "serve-raycluster-")) == 3, what="its cluster's head and workers")
        await eventually(lambda: _get(host, services, "serve")["status"]["conditions"][0]["status"] == "True",
                         what="the service Ready")  # fmt: skip
        assert _get(host, services, "serve-2")["spec"]["rayClusterConfig"]["suspend"] is True, "no GPU left"
        env = {**os.environ, "TURNSTILE_DATABASE_URL": migrated_url}

        def workloads() -> list[str] | None:  # (a pending one is listed once the leader's step has read it)
            listed = turnstile("get", "workloads", "-A", "-o", "json", env=env)
            names = sorted(w["metadata"]["name"].rsplit("-", 1)[0] for w in json.loads(listed.stdout)["items"])
            return names if len(names) >= 2 else None

        names = await eventually(workloads, timeout=20, what="both services' workloads listed")
        assert names == ["rayservice-serve", "rayservice-serve-2"], names  # (not their RayClusters too)
        code, _, err = await kubectl(host.kubeconfig, "delete", "rayservice", "serve", "-n", "ml")
        assert code == 0, err
        await eventually(lambda: admitted("serve-2"), timeout=20, what="the second service admitted")
