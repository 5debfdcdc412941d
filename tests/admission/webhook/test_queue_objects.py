"""The webhook's answers on Kueue's queue objects (``admission.webhook.queue_objects``), on
objects as the API server sends them: validation with field paths, the editor stamped only
when declared content changes, fields not acted on yet warned about, immutable fields kept."""

from __future__ import annotations

from typing import Any

from admission.webhook import queue_objects


def cq(**spec: Any) -> dict[str, Any]:
    groups = [
        {"coveredResources": ["cpu"], "flavors": [{"name": "a", "resources": [{"name": "cpu", "nominalQuota": "4"}]}]}
    ]
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
            "metadata": {"name": "team-a", "resourceVersion": "7"}, "spec": {"resourceGroups": groups, **spec}}  # fmt: skip


def test_invalid_is_refused_with_every_problem_and_unused_fields_warned() -> None:
    bad = cq(resourceGroups=[{"coveredResources": ["cpu"], "flavors": [{"name": "a", "resources": []}]}])
    answer = queue_objects.validate("CREATE", bad, None)
    assert not answer.allowed and "spec.resourceGroups[0].flavors[0].resources" in answer.message
    fair = queue_objects.validate("CREATE", cq(cohortName="c", fairSharing={"weight": "2"}), None)
    assert fair.allowed and fair.warnings == []  # a ClusterQueue's weight is fair sharing's (docs/fair-sharing.md)
    scoped = queue_objects.validate(
        "CREATE", cq(admissionScope={"admissionMode": "UsageBasedAdmissionFairSharing"}), None
    )
    assert scoped.allowed and any("spec.admissionScope" in w and "not used" in w for w in scoped.warnings), (
        scoped.warnings
    )


def test_the_editor_is_stamped_on_content_changes_only() -> None:
    alice, bob = {"username": "alice"}, {"username": "bob"}
    created = queue_objects.mutate("CREATE", cq(), None, alice)
    assert created.patch == [
        {"op": "add", "path": "/metadata/annotations", "value": {queue_objects.EDITED_BY: "alice"}}
    ]
    old = cq()
    old["metadata"]["annotations"] = {queue_objects.EDITED_BY: "alice"}
    finalized = {**old, "metadata": {**old["metadata"], "finalizers": ["kueue.x-k8s.io/resource-in-use"]}}
    assert queue_objects.mutate("UPDATE", finalized, old, bob).patch == []  # bookkeeping: alice stays the editor
    edited = cq(stopPolicy="Hold")
    edited["metadata"]["annotations"] = {queue_objects.EDITED_BY: "alice"}
    (op,) = queue_objects.mutate("UPDATE", edited, old, bob).patch
    assert op["value"] == "bob" and op["path"].endswith("turnstile.dev~1edited-by")


def test_a_local_queues_cluster_queue_is_immutable() -> None:
    lq = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
          "metadata": {"name": "q", "namespace": "ml"}, "spec": {"clusterQueue": "team-a"}}  # fmt: skip
    moved = {**lq, "spec": {"clusterQueue": "team-b"}}
    answer = queue_objects.validate("UPDATE", moved, lq)
    assert not answer.allowed and "spec.clusterQueue: field is immutable" in answer.message
    stopped = {**lq, "spec": {"clusterQueue": "team-a", "stopPolicy": "Hold"}}
    assert queue_objects.validate("UPDATE", stopped, lq).allowed


def test_a_topology_is_checked_as_kueue_does() -> None:
    def topology(*labels: str) -> dict[str, Any]:
        return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology", "metadata": {"name": "racks"},
                "spec": {"levels": [{"nodeLabel": label} for label in labels]}}  # fmt: skip

    good = queue_objects.validate(
        "CREATE", topology("cloud.provider.com/topology-rack", "kubernetes.io/hostname"), None
    )
    assert good.allowed and not good.warnings, good.warnings
    bad = queue_objects.validate("CREATE", topology("kubernetes.io/hostname", "rack", "rack"), None)
    assert not bad.allowed
    assert "spec.levels[0].nodeLabel: kubernetes.io/hostname can only be the last (lowest) level" in bad.message
    assert "spec.levels[2].nodeLabel: 'rack' is already level 1" in bad.message
