"""The webhook's answers for Pods and serving kinds, over TLS as the API server asks them."""

from __future__ import annotations

import json
from typing import Any

from tests.admission.webhook.test_server import Server, patch_of, server  # noqa: F401  (the fixture)

GATE = {"name": "kueue.x-k8s.io/admission"}


def pod(name: str, queue: str | None = "team-a", gpus: str = "1", **meta: Any) -> dict[str, Any]:
    labels = {"kueue.x-k8s.io/queue-name": queue} if queue else {}
    container = {"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}, "limits": {"nvidia.com/gpu": gpus}}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {**labels, **meta.pop("labels", {})}, **meta},
        "spec": {"containers": [container]},
    }


def test_a_queued_pod_is_gated_and_marked_and_a_jobs_pod_is_left_alone(server: Server) -> None:  # noqa: F811
    ops = patch_of(server.review("/mutate", pod("nb")))
    assert {"op": "add", "path": "/spec/schedulingGates", "value": [GATE]} in ops
    assert any("kueue.x-k8s.io~1managed" in op["path"] and op["value"] == "true" for op in ops)
    owned = pod(
        "train-0",
        ownerReferences=[{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "u", "controller": True}],
    )
    assert patch_of(server.review("/mutate", owned)) == []  # the Job is queued, not its pods
    # a pod's later updates are not mutated (and never fail the review)
    updated = server.review("/mutate", pod("nb"), operation="UPDATE")
    assert updated["allowed"] and "patch" not in updated and not updated.get("warnings")


def test_a_leader_worker_set_pod_joins_its_group(server: Server) -> None:  # noqa: F811
    labels = {"leaderworkerset.sigs.k8s.io/name": "llama", "leaderworkerset.sigs.k8s.io/group-index": "3"}
    ops = patch_of(
        server.review("/mutate", pod("llama-3-1", labels=labels, annotations={"leaderworkerset.sigs.k8s.io/size": "4"}))
    )
    text = json.dumps(ops)
    assert "leaderworkerset-llama-3" in text and '"4"' in text and "pod-group-serving" in text and "role-hash" in text


def test_a_deployment_gets_its_queue_in_the_template_and_a_warning_when_it_can_never_fit(server: Server) -> None:  # noqa: F811
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "vllm",
            "labels": {"kueue.x-k8s.io/queue-name": "team-a"},
            "annotations": {"turnstile.dev/min-replicas": "2"},
        },
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "v"}},
            "template": {"metadata": {"labels": {"app": "v"}}, "spec": pod("x", gpus="16")["spec"]},
        },
    }
    ops = patch_of(server.review("/mutate", deployment))
    added: dict[str, Any] = {}
    for op in ops:  # a whole map added where there was none, or its entries one by one
        if isinstance(op["value"], dict):
            added.update({k.replace("/", "~1"): v for k, v in op["value"].items()})
        else:
            added[op["path"].rsplit("/", 1)[-1]] = op["value"]
    assert added["kueue.x-k8s.io~1queue-name"] == "team-a" and added["turnstile.dev~1service"] == "deployment-vllm"
    assert (
        added["turnstile.dev~1min-replicas"] == "2" and added["kueue.x-k8s.io~1pod-suspending-parent"] == "deployment"
    )
    answer = server.review("/validate", deployment)
    assert answer["allowed"] and any("can never be admitted by ClusterQueue team-a" in w for w in answer["warnings"])
    bad = json.loads(json.dumps(deployment))
    bad["metadata"]["annotations"]["turnstile.dev/min-replicas"] = "many"
    refused = server.review("/validate", bad)
    assert not refused["allowed"] and "metadata.annotations[turnstile.dev/min-replicas]" in refused["status"]["message"]


def test_an_unlabelled_gpu_pod_in_a_managed_namespace_is_held_with_the_fix(server: Server) -> None:  # noqa: F811
    held = server.review("/mutate", pod("rogue", queue=None))
    assert {"op": "add", "path": "/spec/schedulingGates", "value": [GATE]} in patch_of(held)
    assert "add label kueue.x-k8s.io/queue-name with one of: team-a" in " ".join(held["warnings"])
    assert patch_of(server.review("/mutate", pod("cpu-only", queue=None, gpus="0"))) == []
    elsewhere = server.review("/mutate", pod("rogue", queue=None), namespace="no-queues-here")
    assert patch_of(elsewhere) == []
