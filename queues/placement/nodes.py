"""Nodes, where pods fit on them, and what a cluster-autoscaler answers a ProvisioningRequest.

One mechanism for both engines: the simulated cluster's scheduler and autoscaler
(``admission.sim``) and engine core's model of them (``queues.cycle.provisioning``) place pods and
decide scale-ups with these functions, so the two agree by construction.

- ``fits``: a pod may run on a node when the node's labels match its nodeSelector, its
  tolerations cover the node's NoSchedule/NoExecute taints and the node's free capacity holds
  its requests (as the kube-scheduler's NodeAffinity, TaintToleration and Fit filters).
- ``pack``: first fit, in node-name order, as the simulated scheduler binds pods.
- ``fit_error``: why a pod fits on no node, in the kube-scheduler's words (its ``FitError``:
  ``0/4 nodes are available: 4 Insufficient nvidia.com/gpu. preemption: ...``), what the
  simulated scheduler writes on the pod and in its ``FailedScheduling`` Event.
- ``answer``: a cluster-autoscaler's verdict on a ProvisioningRequest's pods, per
  provisioning class (``check-capacity``: only what exists; ``best-effort-atomic-scale-up``:
  all the nodes it needs or none), given the free capacity less what Provisioned requests whose
  pods do not exist yet have booked (``book``, in request-name order).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from queues import quantity
from queues.podsets import pod_resources
from queues.selectors import Taint, Toleration, untolerated_taint

CHECK_CAPACITY = "check-capacity.autoscaling.x-k8s.io"
ATOMIC_SCALE_UP = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"

Free = dict[str, dict[str, int]]  # node name -> resource -> free milli-units
UNSCHEDULABLE = "node.kubernetes.io/unschedulable"  # the taint a cordoned node gets
HOSTNAME = "kubernetes.io/hostname"
PODS = "pods"  # a node's allocatable pod slots; each pod takes one
MAX_PODS = 110  # the kubelet's default maxPods: a node that does not say holds this many
NO_VICTIMS = "No preemption victims found for incoming pod"  # the kube-scheduler's preemption verdicts
NOT_HELPFUL = "Preemption is not helpful for scheduling"


def with_pod_slot(requests: Mapping[str, int]) -> dict[str, int]:
    """One pod's requests of a node, its pod slot included (Kueue's TAS counts ``pods: 1`` a pod,
    so a node's allocatable ``pods`` bounds how many tiny pods it holds)."""
    return {**requests, PODS: quantity.MILLI}


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    allocatable: Mapping[str, int]  # milli-units

    @classmethod
    def of(cls, node: Mapping[str, Any]) -> NodeInfo:
        """From a Node object."""
        status = node.get("status") or {}
        capacity = status.get("allocatable") or status.get("capacity") or {}
        spec = node.get("spec") or {}
        taints = [Taint.from_dict(t) for t in spec.get("taints") or []]
        if spec.get("unschedulable") and not any(t.key == UNSCHEDULABLE for t in taints):
            taints.append(Taint(UNSCHEDULABLE, "", "NoSchedule"))  # (as the node controller taints it)
        allocatable = {str(r): quantity.parse_milli(str(v)) for r, v in capacity.items()}
        allocatable.setdefault(PODS, MAX_PODS * quantity.MILLI)  # (a kubelet always reports it)
        return cls(
            name=str(node["metadata"]["name"]),
            labels=dict(node["metadata"].get("labels") or {}),
            taints=tuple(taints),
            allocatable=allocatable,
        )


@dataclass(frozen=True, slots=True)
class PodNeeds:
    """What one pod asks of a node."""

    requests: Mapping[str, int]
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()

    @classmethod
    def of(cls, pod_spec: Mapping[str, Any]) -> PodNeeds:
        """From a pod spec (a Pod's, or a PodTemplate's ``template.spec``), its pod slot counted
        (as the kube-scheduler's NodeResourcesFit counts a pod against ``allocatable.pods``)."""
        return cls(
            requests=with_pod_slot(pod_resources.pod_requests(pod_spec, "spec", [])),
            node_selector=dict(pod_spec.get("nodeSelector") or {}),
            tolerations=tuple(Toleration.from_dict(t) for t in pod_spec.get("tolerations") or []),
        )


def node_object(name: str, shape: Mapping[str, Any]) -> dict[str, Any]:
    """A Node from scenario.md's node shape (``labels``, ``capacity``, ``taints``): a scenario's
    ``nodes`` entries and the autoscaler's ``nodeTemplate`` alike."""
    capacity = {PODS: str(MAX_PODS), **dict(shape.get("capacity") or {})}  # (a kubelet reports its pod slots)
    labels = {HOSTNAME: name, **dict(shape.get("labels") or {})}  # (a kubelet labels its node so)
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "taints": list(shape.get("taints") or []),
            **({"unschedulable": True} if shape.get("unschedulable") else {}),
        },
        "status": {"capacity": capacity, "allocatable": dict(capacity)},
    }


def cordoned(node: NodeInfo, on: bool) -> NodeInfo:
    """The node cordoned (``kubectl cordon``: the unschedulable taint) or uncordoned."""
    return tainted(node, UNSCHEDULABLE, Taint(UNSCHEDULABLE, "", "NoSchedule") if on else None)


def tainted(node: NodeInfo, key: str, taint: Taint | None) -> NodeInfo:
    """The node with its taint of ``key`` replaced by ``taint`` (None: taken off)."""
    taints = tuple(t for t in node.taints if t.key != key)
    return dataclasses.replace(node, taints=(*taints, taint) if taint is not None else taints)


def eligible(pod: PodNeeds, node: NodeInfo) -> bool:
    """Whether the node's labels and taints let the pod run there (its capacity aside)."""
    if any(node.labels.get(k) != v for k, v in pod.node_selector.items()):
        return False
    return untolerated_taint(node.taints, pod.tolerations) is None


def fits(pod: PodNeeds, node: NodeInfo, free: Mapping[str, int]) -> bool:
    return eligible(pod, node) and all(free.get(r, 0) >= v for r, v in pod.requests.items())


def take(free: dict[str, int], pod: PodNeeds) -> None:
    for r, v in pod.requests.items():
        free[r] = free.get(r, 0) - v


def first_fit(pod: PodNeeds, nodes: Sequence[NodeInfo], free: Free) -> str | None:
    """The first node (in the order given) the pod fits on, its capacity taken; None if none."""
    for node in nodes:
        if fits(pod, node, free[node.name]):
            take(free[node.name], pod)
            return node.name
    return None


def refusals(pod: PodNeeds, node: NodeInfo, free: Mapping[str, int]) -> tuple[list[str], bool]:
    """Why the kube-scheduler's filters refuse ``node`` for ``pod``, the first refusing filter's
    reasons in its words (NodeUnschedulable, TaintToleration, NodeAffinity, NodeResourcesFit, in
    that order), and whether evicting pods there could help (only a lack of capacity)."""
    unschedulable = [t for t in node.taints if t.key == UNSCHEDULABLE]
    if unschedulable and untolerated_taint(unschedulable, pod.tolerations) is not None:
        return ["node(s) were unschedulable"], False
    taint = untolerated_taint([t for t in node.taints if t.key != UNSCHEDULABLE], pod.tolerations)
    if taint is not None:
        return [f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}"], False
    if any(node.labels.get(k) != v for k, v in pod.node_selector.items()):
        return ["node(s) didn't match Pod's node affinity/selector"], False
    short = [r for r, v in sorted(pod.requests.items()) if free.get(r, 0) < v]
    return ["Too many pods" if r == PODS else f"Insufficient {r}" for r in short], True


def fit_error(pod: PodNeeds, nodes: Sequence[NodeInfo], free: Free) -> str:
    """The kube-scheduler's message for a pod no node takes: a histogram of the filters' reasons,
    sorted as it sorts them, then its preemption's verdict (the simulated scheduler preempts
    nothing: no victims where capacity was short, not helpful elsewhere)."""
    reasons: dict[str, int] = {}
    verdicts: dict[str, int] = {}
    for node in nodes:
        said, helpful = refusals(pod, node, free.get(node.name, {}))
        for reason in said:
            reasons[reason] = reasons.get(reason, 0) + 1
        verdict = NO_VICTIMS if helpful else NOT_HELPFUL
        verdicts[verdict] = verdicts.get(verdict, 0) + 1

    def histogram(counts: Mapping[str, int]) -> str:
        return ", ".join(sorted(f"{n} {reason}" for reason, n in counts.items()))

    head = f"0/{len(nodes)} nodes are available"
    return f"{head}: {histogram(reasons)}. preemption: {head}: {histogram(verdicts)}."


def book(pods: Sequence[PodNeeds], nodes: Sequence[NodeInfo], free: Free) -> None:
    """Take the capacity ``pods`` will use from ``free`` (first fit; a pod that fits nowhere takes
    nothing): what a cluster-autoscaler holds for a Provisioned request until its pods exist."""
    for pod in pods:
        first_fit(pod, nodes, free)


def pack(pods: Sequence[PodNeeds], nodes: Sequence[NodeInfo], free: Free) -> bool:
    """Whether every pod fits, first fit, on a copy of ``free``."""
    scratch = {name: dict(f) for name, f in free.items()}
    return all(first_fit(pod, nodes, scratch) is not None for pod in pods)


def scale_up_name(existing: int) -> str:
    """The name of a node the autoscaler adds when ``existing`` nodes are there."""
    return f"sim-scaleup-{existing}"


@dataclass(frozen=True, slots=True)
class Answer:
    """An autoscaler's verdict on a request: ``Provisioned`` now, ``ScaleUp`` by ``nodes`` nodes
    (Provisioned once they exist), ``Waiting`` (check-capacity: nothing fits now) or ``Failed``."""

    verdict: str  # Provisioned | ScaleUp | Waiting | Failed
    reason: str
    message: str
    nodes: int = 0


def answer(
    pods: Sequence[PodNeeds],
    nodes: Sequence[NodeInfo],
    free: Free,
    *,
    provisioning_class: str,
    template: Mapping[str, Any],
    max_nodes: int,
    added: int,
) -> Answer:
    """What a cluster-autoscaler that has already added ``added`` of at most ``max_nodes`` nodes
    answers a request for ``pods``, given the nodes and their free capacity."""
    if provisioning_class not in (CHECK_CAPACITY, ATOMIC_SCALE_UP):
        return Answer(
            "Failed",
            "UnsupportedClass",
            f"provisioningClassName {provisioning_class!r} is not supported; use {ATOMIC_SCALE_UP} or {CHECK_CAPACITY}",
        )
    if pack(pods, nodes, free):
        return Answer("Provisioned", "Provisioned", "capacity is available on the current nodes")
    if provisioning_class == CHECK_CAPACITY:
        return Answer("Waiting", "CapacityIsNotFound", "the current nodes cannot hold the pods")
    left = max_nodes - added
    for extra in range(1, left + 1):
        fresh = [NodeInfo.of(node_object(f"candidate-{i}", template)) for i in range(extra)]
        more = {n.name: dict(n.allocatable) for n in fresh}
        if pack(pods, [*nodes, *fresh], {**free, **more}):
            return Answer("ScaleUp", "Provisioning", f"adding {extra} node(s)", extra)
    return Answer(
        "Failed",
        "NotProvisioned",
        f"the pods need more nodes than the autoscaler may add ({left} left of {max_nodes})",
    )
