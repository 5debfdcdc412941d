"""Patch formats of the Kubernetes API."""

import pytest

from admission.sim import patches
from admission.sim.objects import ApiError

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


def test_strategic_merge_merges_containers_by_name() -> None:
    out = patches.strategic_merge_patch(
        POD, {"spec": {"containers": [{"name": "b", "image": "z"}, {"name": "c"}], "tolerations": [{"key": "u"}]}}
    )
    assert out["spec"]["containers"] == [{"name": "a", "image": "x"}, {"name": "b", "image": "z"}, {"name": "c"}]
    assert out["spec"]["tolerations"] == [{"key": "u"}]  # not a keyed list: replaced
    deleted = patches.strategic_merge_patch(POD, {"spec": {"containers": [{"name": "a", "$patch": "delete"}]}})
    assert [c["name"] for c in deleted["spec"]["containers"]] == ["b"]


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
