"""What each node's DRA devices offer of the mapped resources, for placement by topology.

Why: a pod's claims are charged to quota as a mapped resource (``queues.dra.charges``: two GPUs
of DeviceClass ``gpu.nvidia.com`` are 2 ``whole-gpus``), but a node's ``allocatable`` does not
list DRA devices: they are published in ResourceSlices. Topology-aware placement needs both sides
in one unit to put a pod set's pods where their devices are, so a node offers of each mapped
resource what claiming everything its ResourceSlices publish would charge (Kueue's TAS leaves DRA
devices out; this is where Turnstile goes beyond it, issue 35):

- a resource charged by device (no sources): one unit per device on the node that one of its
  DeviceClasses selects;
- a resource charged by a counter (MIG partitions by the memory of their card): the node's cards'
  shared counters of that name (``sharedCounters``: an H200's 140Gi of memory);
- a resource charged by capacity (shared devices): the capacity dimension of each matching
  device on the node (its ``value``), summed over the sources.

Devices and counter sets published for one node (``nodeName``) are that node's; those published
for all nodes or a node selector (network-attached devices) are offered whole to every node
(``ALL_NODES``): the kube-scheduler may allocate them from any, and placement does not split them
between nodes. What the kube-scheduler's allocator decides on
the node is finer than this (a request's own CEL selectors, which partitions of a card are still
free): a pod placed where the sums suffice but no matching device is free waits Pending there,
as any pod the kube-scheduler cannot bind (waitForPodsReady applies). docs/dra.md says so.
"""

from __future__ import annotations

from queues import quantity
from queues.dra import capacity, slices
from queues.dra.charges import Devices
from queues.placement import inventory

ByNode = dict[str, dict[str, int]]  # node -> resource -> milli-units
ALL_NODES = inventory.ALL_NODES  # the key of what devices published for no one node offer to every node


def by_node(devices: Devices) -> ByNode:
    """Every node's offer of every mapped resource (see the module docstring); nodes with no
    device of a mapping are left out of it."""
    mappings = devices.mappings
    classes_of: dict[str, list[str]] = {}
    for device_class, resource in mappings.by_class.items():
        classes_of.setdefault(resource, []).append(device_class)
    out: ByNode = {}
    for resource, classes in sorted(classes_of.items()):
        counter = mappings.counter(resource)
        sources = mappings.capacity(resource)
        if counter is not None:
            for counter_set in devices.counter_sets:
                amount = counter_set.counters.get(counter.name)
                if counter_set.driver == counter.driver and amount is not None:
                    _add(out, counter_set.node or ALL_NODES, resource, _milli(amount))
        elif sources:
            for source in sources:
                for device in devices.published:
                    if device.driver != source.driver or not slices.selects([source.selector], device):
                        continue
                    total = capacity.total(device.dimensions.get(source.name) or {})
                    if total is not None and _of_classes(devices, classes, device):
                        _add(out, device.node or ALL_NODES, resource, total)
        else:
            for device in devices.published:
                if _of_classes(devices, classes, device):
                    _add(out, device.node or ALL_NODES, resource, quantity.MILLI)
    return out


def _of_classes(devices: Devices, classes: list[str], device: slices.Device) -> bool:
    """Whether one of ``classes`` (DeviceClasses the cluster has) selects ``device``."""
    return any(c in devices.classes and slices.selects(devices.classes[c], device) for c in classes)


def _milli(amount: str) -> int:
    try:
        return quantity.parse_milli(amount)
    except quantity.QuantityError:
        return 0  # (a counter that is not a quantity offers nothing)


def _add(out: ByNode, node: str, resource: str, milli: int) -> None:
    offer = out.setdefault(node, {})
    offer[resource] = offer.get(resource, 0) + milli
