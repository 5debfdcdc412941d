"""Pinning a placed pod set's pods to nodes (``queues.placement.pinning``) and the inventory's bookkeeping
(``queues.placement.inventory``) when holds, nodes and other pods' use arrive in any order."""

from __future__ import annotations

from queues.placement.inventory import Inventory
from queues.placement.nodes import NodeInfo
from queues.placement.pinning import PodSlot, node_order, pin, pinned_node, rank_of

RACK = "cloud.provider.com/topology-rack"
HOST = "kubernetes.io/hostname"


def test_ranks_fill_nodes_in_topology_order() -> None:
    labels = {"b-1": {RACK: "b", HOST: "b-1"}, "a-2": {RACK: "a", HOST: "a-2"}, "a-1": {RACK: "a", HOST: "a-1"}}
    order = node_order(["b-1", "a-2", "a-1"], labels, [RACK, HOST])
    assert order == ["a-1", "a-2", "b-1"]
    pods = [PodSlot(f"p{i}", (i,), None) for i in (5, 3, 0, 4, 1, 2)]
    got = pin({"a-1": 2, "a-2": 2, "b-1": 2}, order, pods)
    assert got == {"p0": "a-1", "p1": "a-1", "p2": "a-2", "p3": "a-2", "p4": "b-1", "p5": "b-1"}


def test_pinned_pods_keep_their_node_and_only_the_slots_left_are_handed_out() -> None:
    pods = [
        PodSlot("old-0", (0,), "n1"),
        PodSlot("old-1", (1,), "n1"),
        PodSlot("dead", (2,), "n2", live=False),  # finished: its slot is free again
        PodSlot("new-2", (2,), None),
        PodSlot("new-3", (3,), None),
        PodSlot("extra", (9,), None),  # beyond the placement: no slot
    ]
    got = pin({"n1": 2, "n2": 2}, ["n1", "n2"], pods)
    assert got == {"new-2": "n2", "new-3": "n2"}


def test_pods_without_a_rank_come_after_ranked_ones_by_name() -> None:
    pods = [PodSlot("z", (), None), PodSlot("a", (), None), PodSlot("r", (0,), None)]
    assert pin({"n1": 1, "n2": 2}, ["n1", "n2"], pods) == {"r": "n1", "a": "n2", "z": "n2"}


def test_ranks_are_read_where_each_controller_writes_them() -> None:
    assert rank_of({"jobset.sigs.k8s.io/job-index": "1"}, {"batch.kubernetes.io/job-completion-index": "3"}) == (1, 3)
    assert rank_of({"training.kubeflow.org/replica-index": "7"}, {}) == (7,)
    assert rank_of({"batch.kubernetes.io/job-completion-index": "x"}, {}) == ()
    hosts = {"host-a": "node-a"}
    assert pinned_node({"nodeName": "node-b", "nodeSelector": {HOST: "host-a"}}, hosts) == "node-b"
    assert pinned_node({"nodeSelector": {HOST: "host-a"}}, hosts) == "node-a"
    assert pinned_node({"nodeSelector": {"gpu": "h100"}}, hosts) is None


def test_a_hold_made_before_its_node_is_known_counts_once_the_node_arrives() -> None:
    inventory = Inventory(pending="not listed")
    inventory.hold({"main": {"n1": 2}}, {"main": {"gpu": 1000}}, 1)
    inventory.set_external("n1", {"gpu": 1000})
    inventory.put(NodeInfo("n1", {}, (), {"gpu": 8000}))
    assert inventory.free["n1"]["gpu"] == 5000
    inventory.hold({"main": {"n1": 2}}, {"main": {"gpu": 1000}}, -1)
    inventory.set_external("n1", {})
    assert inventory.free["n1"]["gpu"] == 8000 and not inventory.held and not inventory.external
    before = inventory.version
    inventory.known(None)
    assert inventory.pending is None and inventory.version > before
