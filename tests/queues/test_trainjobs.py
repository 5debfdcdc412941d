"""A TrainJob's pod sets through its training runtime (``queues.podsets.trainjobs``), as Kueue reads them."""

from __future__ import annotations

from typing import Any

import pytest

from queues import errors
from queues.podsets import jobs, trainjobs

GPU = "nvidia.com/gpu"


def container(name: str, **requests: str) -> dict[str, Any]:
    return {"name": name, "image": "x", "resources": {"requests": dict(requests)}}


RUNTIME = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1",
    "kind": "ClusterTrainingRuntime",
    "metadata": {"name": "torch-distributed"},
    "spec": {
        "mlPolicy": {"numNodes": 1, "torch": {"numProcPerNode": "auto"}},
        "template": {
            "spec": {
                "replicatedJobs": [
                    {
                        "name": "dataset-initializer",
                        "template": {
                            "metadata": {"labels": {trainjobs.ANCESTOR: "dataset-initializer"}},
                            "spec": {"template": {"spec": {"containers": [container("init", cpu="2")]}}},
                        },
                    },
                    {
                        "name": "node",
                        "template": {
                            "metadata": {"labels": {trainjobs.ANCESTOR: "trainer"}},
                            "spec": {"template": {"spec": {"containers": [container("node", cpu="4")]}}},
                        },
                    },
                ]
            }
        },
    },
}


def trainjob(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "llm", "namespace": "ml"},
        "spec": {"runtimeRef": {"name": "torch-distributed"}, **spec},
    }


def runtimes(kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
    return RUNTIME if (kind, namespace, name) == ("ClusterTrainingRuntime", None, "torch-distributed") else None


def test_pod_sets_are_the_runtimes_replicated_jobs_with_the_trainer_overrides() -> None:
    job = trainjob(trainer={"numNodes": 4, "resourcesPerNode": {"limits": {GPU: "8"}, "requests": {"cpu": "16"}}})
    info = jobs.read_job(job, runtimes=runtimes)
    assert [(ps.name, ps.count, dict(ps.requests)) for ps in info.pod_sets] == [
        ("dataset-initializer", 1, {"cpu": 2000}),
        ("node", 4, {"cpu": 16000, GPU: 8000}),
    ]
    assert info.template_paths == {}, "its templates are the runtime's: none is written in the TrainJob"


def test_the_runtimes_own_node_count_applies_when_the_trainjob_sets_none() -> None:
    (_, node) = jobs.read_job(trainjob(), runtimes=runtimes).pod_sets
    assert (node.count, dict(node.requests)) == (1, {"cpu": 4000})


@pytest.mark.parametrize(
    ("job", "expected"),
    [
        (trainjob(runtimeRef={"name": "missing"}), "spec.runtimeRef.name: ClusterTrainingRuntime 'missing' does not exist"),
        (trainjob(runtimeRef={"name": "x", "kind": "TrainingRuntime"}), "spec.runtimeRef.name: TrainingRuntime 'x' does not exist in namespace ml"),
        (trainjob(runtimeRef={}), "spec.runtimeRef.name: required"),
        (trainjob(trainer={"numNodes": 0}), "spec.trainer.numNodes: must be a whole number >= 1"),
    ],
)  # fmt: skip
def test_bad_trainjobs_name_the_field(job: dict[str, Any], expected: str) -> None:
    with pytest.raises(errors.Invalid) as info:
        jobs.read_job(job, runtimes=runtimes)
    assert any(str(e).startswith(expected) for e in info.value.errors), info.value.errors


def test_turnstiles_runtime_patch_is_read_and_applied_as_the_trainer_applies_it() -> None:
    entry = trainjobs.patch_entry({"node": ({"gpu": "h100"}, [{"key": "gpu", "operator": "Exists"}], {"a": "b"})})
    job = trainjob(runtimePatches=[{"manager": "someone-else"}, entry])
    assert trainjobs.own_patch(job) == (1, entry)
    assert trainjobs.patched_directives(job)["node"]["nodeSelector"] == {"gpu": "h100"}
    ((_, _, init), (_, _, node)) = jobs.pod_templates(job, runtimes=runtimes)
    assert node["spec"]["nodeSelector"] == {"gpu": "h100"} and node["metadata"]["annotations"] == {"a": "b"}
    assert "nodeSelector" not in init["spec"]
