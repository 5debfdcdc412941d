"""What a prioritized list (``firstAvailable``) is charged on one flavor: only the alternatives that
flavor's nodes can serve.

Why: the allocator gives a pod the first alternative of a list that its node can serve, after
admission. With no node known, a list is charged per resource the most any alternative takes
(``queues.dra.charges``), which is sound whichever the pod gets. But a pod admitted on a flavor
runs on that flavor's nodes: Turnstile puts the flavor's ``nodeLabels`` in the pod's node selector,
as Kueue does. An alternative whose devices none of those nodes has can never be allocated to it.
So on a flavor with ``nodeLabels``, a list is charged the most that the alternatives its nodes can
serve take. "One H100, else two A100s" costs one GPU on a flavor of H100 nodes and two on a
flavor of A100 nodes: the charge follows the alternative admitted.

A node can serve an alternative when its devices, with those published for every node, include
``count`` devices that the alternative's DeviceClass and selectors match, free or not: what is
free changes, so the charge does not depend on it. A flavor without ``nodeLabels`` (every node), a
flavor whose nodes serve none of the alternatives, a cluster whose Nodes are not known, and one
where a driver is rewriting a pool (``queues.dra.slices.rewriting``) keep the largest charge.
The flavor's nodes are read from the Nodes' labels only; the pod set's own node selector narrows
them further, so leaving it out can only charge more, never less.

What stays the admin's to keep true: a workload is charged when it is made, and keeps its charge
once admitted (as Kueue keeps a workload's requests). If a flavor's nodes later gain devices of an
earlier alternative (a node labelled into the flavor, a driver publishing new devices), a pod of an
admitted workload that is made again (a retry) may be allocated that alternative, beyond its charge.
Waiting workloads are charged again on such a change. docs/dra.md says so.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from queues.dra import slices
from queues.dra.claim_templates import DeviceRequest

Labels = Mapping[str, str]


def nodes_of(flavor_labels: Labels, nodes: Mapping[str, Labels]) -> frozenset[str]:
    """The nodes whose labels include all of a flavor's ``nodeLabels``."""
    wanted = flavor_labels.items()
    return frozenset(name for name, labels in nodes.items() if all(labels.get(k) == v for k, v in wanted))


def servable(
    alternative: DeviceRequest,
    class_selectors: tuple[str, ...],
    published: tuple[slices.Device, ...],
    nodes: frozenset[str],
) -> bool:
    """Whether one of ``nodes`` has ``count`` devices (its own, and those published for every node)
    that ``alternative``'s DeviceClass selectors and its own select."""
    wanted = [*class_selectors, *alternative.selectors]
    everywhere = 0
    per_node: dict[str, int] = {}
    for device in published:
        if device.node is not None and device.node not in nodes:
            continue
        if not slices.selects(wanted, device):
            continue
        if device.node is None:
            everywhere += 1
        else:
            per_node[device.node] = per_node.get(device.node, 0) + 1
    if everywhere >= alternative.count:
        return True
    return any(n + everywhere >= alternative.count for n in per_node.values())


def by_flavor(
    flavors: Mapping[str, Labels],
    nodes: Mapping[str, Labels],
    listed: list[tuple[dict[str, int], tuple[DeviceRequest, ...]]],
    serves: Callable[[DeviceRequest, frozenset[str]], bool],
    cost: Callable[[DeviceRequest], object],
) -> dict[str, dict[str, int]]:
    """How much less than its largest charge one pod is charged on each flavor (name -> its
    ``nodeLabels``), per resource, for prioritized lists ``listed`` as (largest charge,
    alternatives); ``serves``: whether some of the nodes can serve an alternative; ``cost``: what an
    alternative costs (a mapped resource -> milli-units). Flavors it is not less on are left out."""
    out: dict[str, dict[str, int]] = {}
    for flavor, labels in sorted(flavors.items()):
        mine = nodes_of(labels, nodes) if labels else frozenset()
        if not mine:
            continue  # (every node, or none known: the largest charge)
        less: dict[str, int] = {}
        for most, alternatives in listed:
            served = [c for a in alternatives if serves(a, mine) and isinstance(c := cost(a), dict)]
            if served and len(served) < len(alternatives):  # (none served: the largest charge)
                for resource, milli in most.items():
                    down = milli - max(int(c.get(resource, 0)) for c in served)
                    if down > 0:
                        less[resource] = less.get(resource, 0) + down
        if less:
            out[flavor] = less
    return out
