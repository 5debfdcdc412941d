"""Scenario files that cannot be read are refused with every problem and its path."""

from typing import Any

import pytest

from queues import errors
from queues.simulation import scenario

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


def _pod(name: str, group: str | None = None, total: str | None = None, **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "labels": {"kueue.x-k8s.io/queue-name": "q"}}
    if group:
        meta["labels"]["kueue.x-k8s.io/pod-group-name"] = group
    if total:
        meta["annotations"] = {"kueue.x-k8s.io/pod-group-total-count": total}
    container = {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": [container], **spec}}


def test_pods_and_pod_groups_are_workloads_of_the_timeline() -> None:
    doc = {
        "name": "pods",
        "manifests": [
            {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "hi"}, "value": 7}
        ],
        "jobs": [
            {"at": 0, "runtime": 5, "object": _pod("solo", priorityClassName="hi")},
            {"at": 1, "runtime": 9, "object": _pod("g-0", "g", "2")},
            {"at": 3, "runtime": 4, "object": _pod("g-1", "g", "2")},
        ],
    }
    parsed = scenario.parse(doc)
    solo, group = parsed.jobs
    assert (
        solo.job.key == "ns/solo"
        and solo.job.priority_class_name == "hi"
        and parsed.pod_priorities == {"hi": (7, False)}
    )
    # the group: submitted with its last pod, as long as its longest, one pod set per role
    assert group.job.key == "ns/g" and (group.at, group.runtime) == (3, 9) and len(group.parts) == 2
    (ps,) = group.job.pod_sets
    assert ps.count == 2 and len(ps.name) == 8


@pytest.mark.parametrize(
    ("jobs", "expected"),
    [
        ([_pod("g-0", "g", "3"), _pod("g-1", "g", "3")], "group g counts 3 pods but the timeline creates 2"),
        ([_pod("g-0", "g", "2"), _pod("g-1", "g", "3")], "disagree on the group's size"),
        ([_pod("g-0", "g", "x"), _pod("g-1", "g", "x")], "must be a whole number >= 1"),
        ([_pod("g-0", "g")], "required with label kueue.x-k8s.io/pod-group-name"),
    ],
    ids=["too-few", "disagree", "not-a-number", "no-count"],
)
def test_bad_pod_groups_are_refused_with_their_path(jobs: list[dict[str, Any]], expected: str) -> None:
    found = problems({"name": "x", "manifests": [], "jobs": [{"at": 0, "runtime": 1, "object": j} for j in jobs]})
    assert any(p.startswith("jobs[0].object") and expected in p for p in found), found


def test_a_bad_priority_class_is_refused() -> None:
    pc = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "hi"}, "value": "high"}
    assert any(
        "manifests[0].value: must be a whole number" in p
        for p in problems({"name": "x", "manifests": [pc], "jobs": []})
    )


DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "vllm", "namespace": "ns", "labels": {"kueue.x-k8s.io/queue-name": "q"}},
    "spec": {
        "replicas": 2,
        "template": {"spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}},
    },
}


def test_a_deployment_and_its_scale_edits() -> None:
    parsed = scenario.parse(
        {
            "name": "d",
            "manifests": [],
            "jobs": [{"at": 0, "object": DEPLOYMENT}],
            "edits": [{"at": 5, "scale": "ns/vllm", "replicas": 4}],
        }
    )
    (entry,) = parsed.jobs
    assert entry.replicas == 2 and entry.serves and entry.replica(3, 5.0).job.key == "ns/vllm-3"
    assert entry.job.labels["turnstile.dev/service"] == "deployment-vllm"  # as the webhook labels its pods
    (edit,) = parsed.edits
    assert (edit.action, edit.name, edit.replicas) == ("scale", "ns/vllm", 4)


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        (
            {"jobs": [{"at": 0, "runtime": 5, "object": DEPLOYMENT}]},
            "jobs[0].runtime: serving workloads run until they are stopped",
        ),
        (
            {"jobs": [{"at": 0, "object": DEPLOYMENT}], "edits": [{"at": 1, "scale": "ns/other", "replicas": 1}]},
            "no Deployment, Job or Ray job 'ns/other'",
        ),
        (
            {"jobs": [{"at": 0, "object": DEPLOYMENT}], "edits": [{"at": 1, "scale": "ns/vllm", "replicas": -1}]},
            "edits[0].replicas: must be a whole number",
        ),
        (
            {"jobs": [{"at": 0, "object": DEPLOYMENT}], "edits": [{"at": 1, "scale": "ns/vllm"}]},
            "edits[0].replicas: scale (and only scale)",
        ),
    ],
    ids=["runtime", "unknown", "negative", "no-replicas"],
)
def test_bad_deployments_and_scale_edits_are_refused(doc: dict[str, Any], expected: str) -> None:
    found = problems({"name": "x", "manifests": [], **doc})
    assert any(expected in p for p in found), found


def test_statefulsets_leader_worker_sets_and_inference_services_are_their_workloads() -> None:
    gpu = {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    queue = {"kueue.x-k8s.io/queue-name": "q"}
    objects = [
        {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db", "namespace": "ns", "labels": queue},
         "spec": {"replicas": 3, "template": {"spec": gpu}}},
        {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
         "metadata": {"name": "llm", "namespace": "ns", "labels": queue},
         "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 4, "workerTemplate": {"spec": gpu}}}},
        {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
         "metadata": {"name": "chat", "namespace": "ns", "labels": queue},
         "spec": {"predictor": {"minReplicas": 2, "model": {"modelFormat": {"name": "huggingface"},
                                                            "resources": {"limits": {"nvidia.com/gpu": "1"}}}}}},
    ]  # fmt: skip
    parsed = scenario.parse({"name": "s", "manifests": [], "jobs": [{"at": 0, "object": o} for o in objects]})
    by_key = {e.job.key: e for e in parsed.jobs}
    assert set(by_key) == {
        "ns/statefulset-db",
        "ns/leaderworkerset-llm-0",
        "ns/leaderworkerset-llm-1",
        "ns/chat-predictor",
    }
    sts = by_key["ns/statefulset-db"]
    assert sts.regroups and sts.serves and [ps.count for ps in sts.job.pod_sets] == [3]
    first, second = by_key["ns/leaderworkerset-llm-0"], by_key["ns/leaderworkerset-llm-1"]
    assert sum(ps.count for ps in first.job.pod_sets) == 4 and first.creates and not second.creates
    assert first.seq < second.seq
    isvc = by_key["ns/chat-predictor"]
    assert isvc.replicas == 2 and isvc.job.labels["turnstile.dev/service"] == "deployment-chat-predictor"
