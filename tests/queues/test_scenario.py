"""Scenario files that cannot be read are refused with every problem and its path."""

from typing import Any

import pytest

from queues import errors, scenario

JOB = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "j", "namespace": "ns"},
    "spec": {"template": {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}},
}


def problems(doc: Any) -> list[str]:
    with pytest.raises(errors.Invalid) as info:
        scenario.parse(doc)
    return [str(e) for e in info.value.errors]


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        ({"manifests": [], "jobs": []}, "name: required"),
        ({"name": "x", "jobs": []}, "manifests: required"),
        ({"name": "x", "manifests": [], "jobs": [{"at": -1, "runtime": 5, "object": JOB}]}, "jobs[0].at: must be >= 0"),
        (
            {"name": "x", "manifests": [], "jobs": [{"at": 0, "runtime": "long", "object": JOB}]},
            "jobs[0].runtime: must be a number",
        ),
        (
            {
                "name": "x",
                "manifests": [],
                "jobs": [
                    {
                        "at": 0,
                        "runtime": 1,
                        "object": {
                            **JOB,
                            "spec": {
                                "template": {
                                    "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "lots"}}}]}
                                }
                            },
                        },
                    }
                ],
            },
            "jobs[0].object.spec.template.spec.containers[0].resources.requests.cpu: 'lots' is not a quantity",
        ),
        (
            {
                "name": "x",
                "manifests": [
                    {
                        "apiVersion": "kueue.x-k8s.io/v1beta1",
                        "kind": "ClusterQueue",
                        "metadata": {"name": "a"},
                        "spec": {"queueingStrategy": "LIFO"},
                    }
                ],
                "jobs": [],
            },
            "manifests[0].spec.queueingStrategy: must be",
        ),
        (
            {"name": "x", "manifests": [], "jobs": [{"at": 0, "runtime": 1, "object": JOB}] * 2},
            "jobs[1].object.metadata.name: duplicate job ns/j",
        ),
        (
            {"name": "x", "manifests": [], "jobs": [], "edits": [{"at": 5, "cancel": "ns/ghost"}]},
            "edits[0].cancel: no job 'ns/ghost'",
        ),
        (
            {"name": "x", "manifests": [], "jobs": [], "edits": [{"at": 5}]},
            "edits[0]: needs exactly one of apply, delete, cancel",
        ),
        ({"name": "x", "manifests": [], "jobs": [], "typo": 1}, "typo: unknown field"),
        (
            {
                "name": "x",
                "manifests": [],
                "jobs": [
                    {
                        "at": 0,
                        "runtime": 1,
                        "object": {
                            **JOB,
                            "metadata": {"name": "j", "labels": {"kueue.x-k8s.io/priority-class": "vip"}},
                        },
                    }
                ],
            },
            "jobs[0].object.metadata.labels[kueue.x-k8s.io/priority-class]: WorkloadPriorityClass 'vip' is not defined",
        ),
        ("just text", "a scenario must be a YAML mapping"),
    ],
    ids=[
        "name",
        "manifests",
        "negative-at",
        "runtime-type",
        "job-quantity",
        "manifest-field",
        "duplicate-job",
        "cancel-unknown",
        "edit-action",
        "unknown-top",
        "priority-class",
        "not-mapping",
    ],
)
def test_problems_name_their_path(doc: Any, expected: str) -> None:
    found = problems(doc)
    assert any(p.startswith(expected) for p in found), found
