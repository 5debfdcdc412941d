"""Patch formats of the Kubernetes API."""

from typing import Any

import pytest

from admission.sim.server import patches
from admission.sim.server.objects import ApiError, Resource
from admission.sim.server.schema import validation

POD = {
    "spec": {
        "containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}],
        "tolerations": [{"key": "t"}],
        "nodeSelector": {"k": "v"},
    }
}


def test_merge_patch_replaces_lists_and_deletes_nulls() -> None:
    out = patches.merge_patch(POD, {"spec": {"containers": [{"name": "b", "image": "z"}], "nodeSelector": None}})
    assert out == {"spec": {"containers": [{"name": "b", "image": "z"}], "tolerations": [{"key": "t"}]}}
    assert POD["spec"]["nodeSelector"] == {"k": "v"}  # the input is not modified


PODS = Resource("", "v1", "pods", "Pod")


def smp(target: dict[str, Any], patch: dict[str, Any]) -> Any:
    return patches.strategic_merge_patch(target, patch, validation.kind_schema(PODS), validation.resolve)


def test_strategic_merge_follows_the_kinds_patch_metadata() -> None:
    out = smp(
        POD, {"spec": {"containers": [{"name": "b", "image": "z"}, {"name": "c"}], "tolerations": [{"key": "u"}]}}
    )
    assert out["spec"]["containers"] == [{"name": "a", "image": "x"}, {"name": "b", "image": "z"}, {"name": "c"}]
    assert out["spec"]["tolerations"] == [{"key": "u"}]  # no merge strategy in the schema: replaced
    deleted = smp(POD, {"spec": {"containers": [{"name": "a", "$patch": "delete"}]}})
    assert [c["name"] for c in deleted["spec"]["containers"]] == ["b"]
    owned = {"metadata": {"finalizers": ["a"], "ownerReferences": [{"uid": "1", "name": "x"}]}}
    out = smp(owned, {"metadata": {"finalizers": ["b"], "ownerReferences": [{"uid": "2", "name": "y"}]}})
    assert out["metadata"]["finalizers"] == ["a", "b"]  # a set: union
    assert [o["uid"] for o in out["metadata"]["ownerReferences"]] == ["1", "2"]  # merged by uid


def test_strategic_merge_understands_kubectls_directives() -> None:
    patch = {
        "spec": {
            "$setElementOrder/containers": [{"name": "b"}, {"name": "a"}],
            "containers": [{"name": "a", "image": "x2"}],
            "nodeSelector": {"$patch": "replace", "z": "1"},
        },
        "metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]},
    }
    out = smp({**POD, "metadata": {"finalizers": ["a", "b"]}}, patch)
    assert out["spec"]["containers"] == [{"name": "b", "image": "y"}, {"name": "a", "image": "x2"}]
    assert out["spec"]["nodeSelector"] == {"z": "1"} and out["metadata"]["finalizers"] == ["b"]
    volumes = {"spec": {"volumes": [{"name": "v", "emptyDir": {}}]}}
    out = smp(
        volumes,
        {"spec": {"volumes": [{"$retainKeys": ["name", "secret"], "name": "v", "secret": {"secretName": "s"}}]}},
    )
    assert out["spec"]["volumes"] == [{"name": "v", "secret": {"secretName": "s"}}]


def test_json_patch_operations_and_atomic_failure() -> None:
    out = patches.json_patch(
        POD,
        [
            {"op": "add", "path": "/spec/containers/-", "value": {"name": "c"}},
            {"op": "replace", "path": "/spec/nodeSelector/k", "value": "w"},
            {"op": "remove", "path": "/spec/tolerations/0"},
            {"op": "copy", "from": "/spec/nodeSelector", "path": "/metadata"},
            {"op": "test", "path": "/spec/containers/2/name", "value": "c"},
        ],
    )
    assert [c["name"] for c in out["spec"]["containers"]] == ["a", "b", "c"]
    assert out["spec"]["nodeSelector"] == {"k": "w"} == out["metadata"] and out["spec"]["tolerations"] == []
    with pytest.raises(ApiError) as exc:
        patches.json_patch(POD, [{"op": "add", "path": "/spec/x", "value": 1}, {"op": "remove", "path": "/nope"}])
    assert exc.value.code == 422 and "x" not in POD["spec"]
