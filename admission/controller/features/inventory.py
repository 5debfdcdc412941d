"""The controller's node inventory: Nodes and the pods on them, for topology-aware placement.

Placement by topology (``queues.cycle.tas``) needs, for every node, its allocatable capacity, labels,
taints and what pods Turnstile did not place use there (Kueue's TAS cache keeps the same). This
module feeds that from two informers, started only once a ResourceFlavor names a Topology (a
cluster without TAS pays nothing for them):

- Nodes: each becomes a ``queues.placement.nodes.NodeInfo`` (a cordoned node carries the unschedulable
  taint, so nothing new is placed there; what runs there stays, as in Kueue, but a workload
  whose pods placed there have not started would wait for ever: it is evicted and placed again,
  ``NodeFailures``/``NodeUnschedulable``). A deleted node is *lost*: the next step evicts every
  workload placed on it (``NodeFailures``) and it is placed again on the nodes left.
- Pods, all of them (as Kueue's TAS watches them): a bound, unfinished pod that was not placed
  by topology (no ``kueue.x-k8s.io/podset`` annotation) counts against its node's capacity; a
  placed pod is recorded for pinning (``admission.controller.features.pinning``); and every pod of an
  admitted workload (its ``turnstile.dev/workload`` annotation) is indexed by name, which is how
  idle reclaim joins GPU metrics to workloads (``admission.controller.features.reclaim``).

The informers also start, for that index, once a ClusterQueue has an idle-reclaim policy, and
whenever GPU utilisation is read (``TURNSTILE_PROMETHEUS_URL``: the ledger's used GPU-hours). The
index knows which node each pod is bound to: GPU health (``admission.controller.features.gpu_health``)
evicts the workloads on a node whose GPU reports a fatal Xid, and placement sees that node with
the ``turnstile.dev/gpu-unhealthy`` taint until it recovers.

Each term gets an ``Inventory`` of its own (``fresh``): what the informers know, with the term's
admissions' placements held on top; ``pending`` until both informers have listed, so nothing is
placed on a cluster only half seen. Changes go to the current term's inventory as they come.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from admission.kube import client as kube_client
from admission.kube.client import Kube, Obj
from admission.kube.informer import Informer
from queues import efficiency
from queues.gpus.gpu_health import TAINT as GPU_TAINT
from queues.model import Config
from queues.placement.inventory import Inventory
from queues.placement.nodes import UNSCHEDULABLE, NodeInfo, with_pod_slot
from queues.placement.pinning import PODSET_ANNOTATION, TOPOLOGY_GATE, WORKLOAD_ANNOTATION, rank_of
from queues.podsets import pod_resources, pods
from queues.selectors import Taint

log = logging.getLogger(__name__)

NODES = kube_client.ResourceRef("v1", "Node", "nodes", namespaced=False)
ALL_PODS = kube_client.ResourceRef("v1", "Pod", "pods")
NOT_LISTED = "the Nodes and Pods informers have not listed yet"


@dataclass(frozen=True, slots=True)
class PlacedPod:
    """One pod of a pod set placed by topology, as pinning needs it."""

    namespace: str
    name: str
    uid: str
    pod_set: str
    rank: tuple[int, ...]
    spec: Obj  # nodeName, nodeSelector, schedulingGates (what pinning reads and patches)
    live: bool  # neither finished nor being deleted

    @property
    def waiting(self) -> bool:
        """Held by the topology gate: it waits to be pinned."""
        return self.live and TOPOLOGY_GATE in pods.gates({"spec": self.spec})


def _unschedulable(node: NodeInfo) -> bool:
    return any(t.key == UNSCHEDULABLE for t in node.taints)


class NodeInventory:
    def __init__(
        self,
        kube: Kube,
        *,
        current: Callable[[], Inventory | None],
        lost: Callable[[str], None],
        placed: Callable[[str], None],
        cordoned: Callable[[str], None] = lambda _node: None,
        pods_always: bool = False,
    ) -> None:
        self.pods_always = pods_always  # GPU utilisation is read (the ledger joins it to workloads by pod)
        self.current = current  # the current term's inventory, if it places by topology
        self.lost = lost  # a node was deleted: what was placed there must go
        self.placed = placed  # a placed pod of this workload appeared or changed: pin what waits
        self.cordoned = cordoned  # a node takes no new pods now: placements not yet started there must go
        self.nodes: dict[str, NodeInfo] = {}
        self.uses: dict[str, tuple[str, dict[str, int]]] = {}  # pod uid -> (node, requests) of an external pod
        self.external: dict[str, dict[str, int]] = {}  # node -> what external pods use there
        self.by_workload: dict[str, dict[str, PlacedPod]] = {}  # workload key -> pod uid -> placed pod
        self.named: dict[str, dict[str, tuple[str, str]]] = {}  # workload key -> pod uid -> (namespace, name)
        self.where: dict[str, tuple[str, str]] = {}  # pod uid -> (workload key, node) of its live bound pods
        self.unhealthy: set[str] = set()  # nodes whose GPUs report a fatal fault (``gpu_health``)
        # told of each live pod of a workload as it is seen (the ledger keeps a run's pods to measure it whole)
        self.seen: Callable[[str, tuple[str, str]], None] = lambda _key, _pod: None
        self.node_informer = Informer(kube, NODES, self._on_node)
        self.pod_informer = Informer(kube, ALL_PODS, self._on_pod)
        self.tasks: list[asyncio.Task[None]] = []

    @staticmethod
    def wanted(config: Config | None) -> bool:
        """Whether placement by topology is configured (some ResourceFlavor names a Topology)."""
        return config is not None and any(rf.spec.topology_name for rf in config.flavors.values())

    def needed(self, config: Config | None) -> bool:
        """Whether to watch at all: placement by topology, or GPU utilisation read (pods to join
        to workloads: idle reclaim, the ledger's used hours)."""
        if self.pods_always or self.wanted(config):
            return True
        return config is not None and any(
            efficiency.POLICY_ANNOTATION in cq.metadata.annotations for cq in config.cluster_queues.values()
        )

    def bound_on(self, key: str, node: str) -> int:
        """How many of workload ``key``'s placed pods are bound to ``node`` and alive."""
        return sum(1 for p in self.by_workload.get(key, {}).values() if p.live and p.spec.get("nodeName") == node)

    def workloads_on(self, node: str) -> list[str]:
        """The workloads with a live pod bound to ``node`` (GPU health evicts them)."""
        return sorted({key for key, bound in self.where.values() if bound == node})

    def set_unhealthy(self, node: str, on: bool) -> None:
        """``node``'s GPUs report a fatal fault (``admission.controller.features.gpu_health``): Turnstile's
        placement treats it as tainted ``turnstile.dev/gpu-unhealthy:NoSchedule`` until cleared."""
        if on:
            self.unhealthy.add(node)
        else:
            self.unhealthy.discard(node)
        info = self.nodes.get(node)
        inventory = self.current()
        if info is not None and inventory is not None:
            inventory.put(self._seen_as(info))

    def tainted_with(self, key: str) -> set[str]:
        """The nodes whose Node object carries a taint of ``key``."""
        return {name for name, info in self.nodes.items() if any(t.key == key for t in info.taints)}

    def _seen_as(self, info: NodeInfo) -> NodeInfo:
        """A node as placement sees it: with the GPU-health taint while its GPUs are unhealthy."""
        if info.name not in self.unhealthy or any(t.key == GPU_TAINT for t in info.taints):
            return info
        return dataclasses.replace(info, taints=(*info.taints, Taint(GPU_TAINT, "", "NoSchedule")))

    def pods_of(self, key: str) -> list[tuple[str, str]]:
        """The live pods of workload ``key``: (namespace, name)."""
        return list(self.named.get(key, {}).values())

    @property
    def running(self) -> bool:
        return bool(self.tasks)

    def synced(self) -> bool:
        return self.node_informer.synced.is_set() and self.pod_informer.synced.is_set()

    def start(self) -> None:
        if not self.tasks:
            log.info("watching Nodes and Pods (placement by topology, or idle reclaim)")
            self.tasks = [
                asyncio.create_task(self._run(self.node_informer), name="inventory-nodes"),
                asyncio.create_task(self._run(self.pod_informer), name="inventory-pods"),
            ]

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.tasks = []

    async def _run(self, informer: Informer) -> None:
        """Run ``informer``; once both have listed, the current term's inventory is known."""
        run = asyncio.create_task(informer.run(), name=f"informer-{informer.ref.plural}")
        try:
            await informer.synced.wait()
            if self.synced() and (inventory := self.current()) is not None:
                inventory.known(None)
            await run
        finally:
            run.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await run

    def fresh(self) -> Inventory:
        """An inventory for a new term: the nodes and external use as known now."""
        inventory = Inventory(None if self.synced() else NOT_LISTED)
        for info in self.nodes.values():
            inventory.put(self._seen_as(info))
        for name, used in self.external.items():
            inventory.set_external(name, used)
        return inventory

    def probe(self) -> str | None:
        """Readiness (reported, not gating): the inventory is listed, where TAS is configured."""
        return NOT_LISTED if self.running and not self.synced() else None

    # ----- what the informers say -----------------------------------------------------------------

    def _on_node(self, kind: str, obj: Obj) -> None:
        name = str((obj.get("metadata") or {}).get("name"))
        inventory = self.current()
        if kind == "DELETED":
            if self.nodes.pop(name, None) is not None:
                log.warning("node %s was deleted; workloads placed on it are placed again", name)
                if inventory is not None:
                    inventory.remove(name)  # (nothing more is placed there, even before the step)
                self.lost(name)
            return
        node = NodeInfo.of(obj)
        old = self.nodes.get(name)
        if old == node:
            return
        self.nodes[name] = node
        if inventory is not None:
            inventory.put(self._seen_as(node))
        if old is not None and _unschedulable(node) and not _unschedulable(old):
            log.info("node %s was cordoned; placements whose pods have not started there are placed again", name)
            self.cordoned(name)

    def _on_pod(self, kind: str, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        uid = str(meta.get("uid"))
        notes = meta.get("annotations") or {}
        key = notes.get(WORKLOAD_ANNOTATION)
        if key is not None:
            self._name(kind, uid, str(key), obj)
        if key is not None and PODSET_ANNOTATION in notes:
            self._placed_pod(kind, uid, str(key), obj)
            return
        spec = obj.get("spec") or {}
        node = spec.get("nodeName")
        if kind == "DELETED" or not node or pods.done(obj):
            self._use(uid, None)
        else:
            self._use(uid, (str(node), with_pod_slot(pod_resources.pod_requests(spec, "spec", []))))

    def _name(self, kind: str, uid: str, key: str, obj: Obj) -> None:
        named = self.named.setdefault(key, {})
        if kind == "DELETED" or pods.done(obj):
            named.pop(uid, None)
            self.where.pop(uid, None)
            if not named:
                del self.named[key]
            return
        meta = obj.get("metadata") or {}
        named[uid] = pod = (str(meta.get("namespace") or "default"), str(meta.get("name")))
        if node := (obj.get("spec") or {}).get("nodeName"):
            self.where[uid] = (key, str(node))
        self.seen(key, pod)

    def _placed_pod(self, kind: str, uid: str, key: str, obj: Obj) -> None:
        pods_of = self.by_workload.setdefault(key, {})
        if kind == "DELETED":
            pods_of.pop(uid, None)
            if not pods_of:
                del self.by_workload[key]
            return
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        pod = PlacedPod(
            namespace=str(meta.get("namespace") or "default"),
            name=str(meta.get("name")),
            uid=uid,
            pod_set=str((meta.get("annotations") or {}).get(PODSET_ANNOTATION) or ""),
            rank=rank_of(meta.get("labels") or {}, meta.get("annotations") or {}),
            spec={k: spec[k] for k in ("nodeName", "nodeSelector", "schedulingGates") if k in spec},
            live=not pods.done(obj) and not pods.deleting(obj),
        )
        pods_of[uid] = pod
        if pod.waiting:
            self.placed(key)

    def observe(self, pod: Obj) -> None:
        """A pod as our own write left it (its watch event follows)."""
        self._on_pod("MODIFIED", pod)

    def _use(self, uid: str, use: tuple[str, dict[str, int]] | None) -> None:
        old = self.uses.pop(uid, None)
        if use is not None:
            self.uses[uid] = use
        if old == use:
            return
        for entry, sign in ((old, -1), (use, 1)):
            if entry is None:
                continue
            node, requests = entry
            total = self.external.setdefault(node, {})
            for r, v in requests.items():
                total[r] = total.get(r, 0) + sign * v
                if not total[r]:
                    del total[r]
            if not total:
                del self.external[node]
            inventory = self.current()
            if inventory is not None:
                inventory.set_external(node, self.external.get(node, {}))

    def hosts(self) -> Mapping[str, str]:
        """Hostname label -> node name, for the nodes that have one."""
        return {n.labels[h]: name for name, n in self.nodes.items() if (h := "kubernetes.io/hostname") in n.labels}
