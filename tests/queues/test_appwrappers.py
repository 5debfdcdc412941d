"""An AppWrapper's pod sets, as Kueue reads them (its components' pod sets, named ``<appwrapper>-<k>``),
what cannot be read, said at its field, and how its controller merges ``podSetInfos`` into a component."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from queues import errors
from queues.podsets import appwrappers, jobs, layouts

CPU = {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}]}
# Kueue's site/static/examples/appwrapper/pytorch-sample.yaml and deployment-sample.yaml, trimmed
PYTORCH: dict[str, Any] = {
    "apiVersion": "workload.codeflare.dev/v1beta2",
    "kind": "AppWrapper",
    "metadata": {"name": "sample-appwrapper-pytorch-job", "labels": {"kueue.x-k8s.io/queue-name": "user-queue"}},
    "spec": {
        "components": [
            {
                "template": {
                    "apiVersion": "kubeflow.org/v1",
                    "kind": "PyTorchJob",
                    "metadata": {"name": "pytorch-simple"},
                    "spec": {
                        "pytorchReplicaSpecs": {
                            "Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": {"spec": CPU}},
                            "Worker": {"replicas": 1, "restartPolicy": "OnFailure", "template": {"spec": CPU}},
                        }
                    },
                }
            }
        ]
    },
}
DEPLOYMENT: dict[str, Any] = {
    "apiVersion": "workload.codeflare.dev/v1beta2",
    "kind": "AppWrapper",
    "metadata": {"name": "sample-appwrapper-deployment", "labels": {"kueue.x-k8s.io/queue-name": "user-queue"}},
    "spec": {
        "components": [
            {
                "podSets": [{"path": "template.spec.template", "replicas": 3}],
                "template": {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "metadata": {"name": "nginx-deployment", "labels": {"app": "nginx"}},
                    "spec": {
                        "replicas": 3,
                        "selector": {"matchLabels": {"app": "nginx"}},
                        "template": {"metadata": {"labels": {"app": "nginx"}}, "spec": CPU},
                    },
                },
            }
        ]
    },
}


def test_kueues_samples_are_their_components_pod_sets_named_as_kueue_names_them() -> None:
    info = jobs.read_job(PYTORCH)
    assert [(ps.name, ps.count, dict(ps.requests)) for ps in info.pod_sets] == [
        ("sample-appwrapper-pytorch-job-0", 1, {"cpu": 1000}),
        ("sample-appwrapper-pytorch-job-1", 1, {"cpu": 1000}),
    ]
    assert dict(info.template_paths) == {}, "an AppWrapper's templates are its controller's to write"
    info = jobs.read_job(DEPLOYMENT)
    assert [(ps.name, ps.count, dict(ps.requests)) for ps in info.pod_sets] == [
        ("sample-appwrapper-deployment-0", 3, {"cpu": 1000})
    ]


def test_pod_sets_are_numbered_over_all_components_and_declared_paths_take_indices() -> None:
    aw = copy.deepcopy(PYTORCH)
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js"},
        "spec": {"replicatedJobs": [{"name": "w", "replicas": 2, "template": {"spec": {"template": {"spec": CPU}}}}]},
    }
    aw["spec"]["components"].append(
        {
            "podSets": [{"path": "template.spec.replicatedJobs[0].template.spec.template", "replicas": 2}],
            "template": jobset,
        }
    )
    aw["spec"]["components"].append(
        {"template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": CPU}}
    )
    names = [(ps.name, ps.count) for ps in jobs.read_job(aw).pod_sets]
    assert names == [("sample-appwrapper-pytorch-job-0", 1), ("sample-appwrapper-pytorch-job-1", 1),
                     ("sample-appwrapper-pytorch-job-2", 2), ("sample-appwrapper-pytorch-job-3", 1)]  # fmt: skip
    by_name = dict(layouts.appwrapper_pod_sets(aw))
    assert (by_name["sample-appwrapper-pytorch-job-2"].component, by_name["sample-appwrapper-pytorch-job-2"].index) == (
        1,
        0,
    )
    assert by_name["sample-appwrapper-pytorch-job-1"].path == "spec.pytorchReplicaSpecs.Worker.template"


@pytest.mark.parametrize(
    ("component", "field", "says"),
    [
        ({"template": {"kind": "Job"}}, "spec.components[0].template", "apiVersion and kind"),
        (
            {"template": {"apiVersion": "example.com/v1", "kind": "Thing", "spec": {}}},
            "spec.components[0].podSets",
            "say where its pod templates are",
        ),
        (
            {"podSets": [{"path": "template.spec.nothing"}], "template": DEPLOYMENT["spec"]["components"][0]["template"]},
            "spec.components[0].podSets[0].path",
            "is not a pod template",
        ),
        (
            {"podSets": [{"path": "template.spec.template", "replicas": -1}], "template": DEPLOYMENT["spec"]["components"][0]["template"]},
            "spec.components[0].podSets[0].replicas",
            "whole number",
        ),
    ],
)  # fmt: skip
def test_what_cannot_be_read_is_said_at_its_field(component: dict[str, Any], field: str, says: str) -> None:
    aw = copy.deepcopy(DEPLOYMENT)
    aw["spec"]["components"] = [component]
    with pytest.raises(errors.Invalid) as caught:
        jobs.read_job(aw)
    assert [(e.path, says in e.message) for e in caught.value.errors] == [(field, True)], caught.value.errors


def test_no_components_is_refused() -> None:
    aw = copy.deepcopy(DEPLOYMENT)
    aw["spec"]["components"] = []
    with pytest.raises(errors.Invalid) as caught:
        jobs.read_job(aw)
    assert caught.value.errors[0].path == "spec.components"


def test_the_controller_merges_pod_set_infos_into_the_components_templates() -> None:
    template = PYTORCH["spec"]["components"][0]["template"]
    pod_sets = [ps for _, ps in layouts.appwrapper_pod_sets(PYTORCH)]
    infos = [
        {
            "nodeSelector": {"gpu": "a100"},
            "tolerations": [{"key": "gpu", "operator": "Exists"}],
            "annotations": {"a": "1"},
        },
        {"nodeSelector": {"gpu": "h100"}, "labels": {"l": "2"}},
    ]
    made = appwrappers.apply_infos(template, pod_sets, infos)
    master = made["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
    worker = made["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    assert master["spec"]["nodeSelector"] == {"gpu": "a100"} and master["metadata"]["annotations"] == {"a": "1"}
    assert master["spec"]["tolerations"] == [{"key": "gpu", "operator": "Exists"}]
    assert worker["spec"]["nodeSelector"] == {"gpu": "h100"} and worker["metadata"]["labels"] == {"l": "2"}
    assert "nodeSelector" not in template["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"], "a copy"
