"""Which node each pod of a placed pod set goes to: the placement enacted, rank by rank.

Placement (``queues.cycle.tas``) decides how many pods of a pod set run on each node
(``Admission.placement``); the pods themselves are made later by the job's own controller, held
by Kueue's ``kueue.x-k8s.io/topology`` scheduling gate. As each appears the controller pins it to
one node (a ``kubernetes.io/hostname`` nodeSelector) and ungates it, as Kueue's TAS ungater does.

Ranks that talk most sit together: nodes are taken in topology order (block, rack, host label
values: neighbours in that order share a rack) and pods in rank order, read from the labels
their controllers set (a JobSet's job index, a Kubeflow replica index, an Indexed Job's
completion index, a LeaderWorkerSet's worker index; pods without one come after, by name). So
ranks 0-7 of a 16-GPU PyTorchJob share one 8-GPU node and ranks 8-15 the next one in its rack.

Pinning is level-based and restart-safe: pods already pinned (ungated with a nodeSelector, or
bound) keep their node and use up its share; only the rest is handed out, so a replacement pod
takes the slot the pod it replaces left, and a second look never moves a pod.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from queues.placement.nodes import HOSTNAME

# Kueue's TAS marks: the scheduling gate on a placed pod set's template (removed by pinning) and
# the pod set a template's pods belong to
TOPOLOGY_GATE = "kueue.x-k8s.io/topology"
PODSET_ANNOTATION = "kueue.x-k8s.io/podset"
# Turnstile's: the workload a placed pod belongs to (set on the template with the gate)
WORKLOAD_ANNOTATION = "turnstile.dev/workload"

# Where each kind's controller writes a pod's rank, outermost first (a JobSet's pod: job index,
# then the completion index within its Job)
RANK_KEYS = (
    "jobset.sigs.k8s.io/job-index",
    "training.kubeflow.org/replica-index",
    "batch.kubernetes.io/job-completion-index",
    "leaderworkerset.sigs.k8s.io/worker-index",
)


@dataclass(frozen=True, slots=True)
class PodSlot:
    """One pod of a placed pod set, as pinning sees it."""

    name: str
    rank: tuple[int, ...]  # () when its controller sets none
    node: str | None  # the node it is pinned to or bound on; None while it waits for one
    live: bool = True  # neither finished nor being deleted (a dead pod's slot is free again)


def rank_of(labels: Mapping[str, str], annotations: Mapping[str, str]) -> tuple[int, ...]:
    """A pod's rank as its controller wrote it (labels first, then annotations); () if none."""
    out: list[int] = []
    for key in RANK_KEYS:
        value = labels.get(key, annotations.get(key))
        if value is not None and str(value).isdigit():
            out.append(int(value))
    return tuple(out)


def node_order(nodes: Sequence[str], labels: Mapping[str, Mapping[str, str]], levels: Sequence[str]) -> list[str]:
    """``nodes`` in topology order: by each level's label value, outermost level first, then name."""
    return sorted(nodes, key=lambda n: (tuple(labels.get(n, {}).get(level, "") for level in levels), n))


def pin(placement: Mapping[str, int], order: Sequence[str], pods: Sequence[PodSlot]) -> dict[str, str]:
    """For each live pod waiting for a node: the node it goes to. ``placement``: node -> pods
    there; ``order``: its nodes in topology order. Pods beyond the placement get none."""
    left = dict(placement)
    for pod in pods:
        if pod.live and pod.node is not None and pod.node in left:
            left[pod.node] -= 1
    slots = [node for node in order for _ in range(max(0, left.get(node, 0)))]
    waiting = sorted((p for p in pods if p.live and p.node is None), key=lambda p: (not p.rank, p.rank, p.name))
    return {pod.name: node for pod, node in zip(waiting, slots, strict=False)}


def pinned_node(spec: Mapping[str, object], hosts: Mapping[str, str]) -> str | None:
    """The node a pod runs on (``spec.nodeName``) or is pinned to (its ``kubernetes.io/hostname``
    nodeSelector, through ``hosts``: hostname label -> node name; a node's hostname label is
    usually, not always, its name)."""
    bound = spec.get("nodeName")
    if isinstance(bound, str) and bound:
        return bound
    selector = spec.get("nodeSelector")
    if isinstance(selector, Mapping) and (host := selector.get(HOSTNAME)):
        return hosts.get(str(host), str(host))
    return None


def hostname(node: str, labels: Mapping[str, str]) -> str:
    """What a nodeSelector pinning a pod to ``node`` names: its hostname label, else its name."""
    return labels.get(HOSTNAME, node)
