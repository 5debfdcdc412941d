"""Why a pod fits on no node, in the kube-scheduler's words (``queues.placement.nodes.fit_error``)."""

from __future__ import annotations

from queues.placement import nodes
from queues.placement.nodes import NodeInfo, PodNeeds


def node(name: str, gpus: int, *, labels: dict[str, str] | None = None, **spec: object) -> NodeInfo:
    shape = {"labels": labels or {}, "capacity": {"cpu": "32", "nvidia.com/gpu": str(gpus)}, **spec}
    return NodeInfo.of(nodes.node_object(name, shape))


def pod(gpus: int, **spec: object) -> PodNeeds:
    limits = {"nvidia.com/gpu": str(gpus)}
    return PodNeeds.of({"containers": [{"name": "c", "resources": {"requests": limits, "limits": limits}}], **spec})


def free_of(*infos: NodeInfo) -> nodes.Free:
    return {n.name: dict(n.allocatable) for n in infos}


def test_capacity_short_everywhere() -> None:
    cluster = [node(f"gpu-{i}", 4) for i in range(4)]
    assert nodes.fit_error(pod(8), cluster, free_of(*cluster)) == (
        "0/4 nodes are available: 4 Insufficient nvidia.com/gpu. "
        "preemption: 0/4 nodes are available: 4 No preemption victims found for incoming pod."
    )


def test_each_node_says_its_first_filters_reasons_sorted_as_the_scheduler_sorts_them() -> None:
    cordoned = node("a-cordoned", 8, unschedulable=True)
    tainted = node("b-tainted", 8, taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}])
    elsewhere = node("c-other", 8, labels={"pool": "other"})
    full = [node(f"d-full-{i}", 1) for i in range(2)]
    cluster = [cordoned, tainted, elsewhere, *full]
    needs = pod(2, nodeSelector={"pool": "cpu"})
    message = nodes.fit_error(needs, cluster, free_of(*cluster))
    assert message == (
        "0/5 nodes are available: 1 node(s) had untolerated taint {nvidia.com/gpu: present}, "
        "1 node(s) were unschedulable, 3 node(s) didn't match Pod's node affinity/selector. "
        "preemption: 0/5 nodes are available: 5 Preemption is not helpful for scheduling."
    ), message
    # the selector matched, capacity short: that node could be helped by preemption
    cpu = node("e-cpu", 8, labels={"pool": "cpu"})
    on_cpu = nodes.fit_error(pod(9, nodeSelector={"pool": "cpu"}), [cpu], free_of(cpu))
    assert on_cpu == (
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. "
        "preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
    )


def test_a_full_node_of_pods_is_too_many_pods() -> None:
    small = NodeInfo.of(nodes.node_object("n", {"capacity": {"cpu": "32", "pods": "1", "nvidia.com/gpu": "8"}}))
    free = free_of(small)
    nodes.take(free["n"], pod(1))
    assert nodes.fit_error(pod(1), [small], free).startswith("0/1 nodes are available: 1 Too many pods.")
