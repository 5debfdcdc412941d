"""Every integrated job kind, end to end: queued, admitted onto the flavor in every pod template, run, released."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from admission.jobs import BY_KIND
from admission.jobs.base import pointer_get
from admission.store import database, tables
from queues import jobs
from tests.admission.controller.world import CONFIG, eventually, world

GPU_POD = {
    "restartPolicy": "Never",
    "containers": [{"name": "main", "image": "x", "resources": {"requests": {"nvidia.com/gpu": "1"}}}],
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
