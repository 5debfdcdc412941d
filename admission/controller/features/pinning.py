"""The ungater: each pod of a pod set placed by topology pinned to its node, then let go.

An admitted workload's placement (``Admission.placement``: pod set -> node -> pods) is enacted
as Kueue's TAS does it: the job starts with the ``kueue.x-k8s.io/topology`` scheduling gate on
its placed templates (``admission.controller.enactor``), so its controller makes the pods but
the kube-scheduler leaves them alone; as they appear (``admission.controller.features.inventory``) this
gives each a ``kubernetes.io/hostname`` nodeSelector for its node, in rank order
(``queues.placement.pinning``), and removes the gate in the same patch (guarded by a ``test``, so a pod is
never pinned twice). A gated pod may gain nodeSelector entries (``ValidatePodUpdate``), so this
works on a real API server as on the simulated one.

Plain pods have no template: the enactor pins each in the patch that removes its admission gate,
with the same ``assign``.

Only what is committed is enacted (``Term.held``); a workload evicted meanwhile has its job
suspended and its pods deleted by the enactor, and its gated pods are left alone.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence

from admission.controller.features.inventory import NodeInventory, PlacedPod
from admission.controller.term import Term, admission_token
from admission.controller.workqueue import Retry, WorkQueue
from admission.kube import client as kube_client
from admission.kube.client import Kube, KubeError
from queues.model import Workload
from queues.placement.nodes import HOSTNAME
from queues.placement.pinning import TOPOLOGY_GATE, PodSlot, hostname, node_order, pin, pinned_node
from queues.podsets import pods

log = logging.getLogger(__name__)

PODS = kube_client.ResourceRef("v1", "Pod", "pods")


def assign(
    term: Term, inventory: NodeInventory, held: Workload, pod_set: str, slots: Sequence[PodSlot]
) -> dict[str, str]:
    """Pod name -> the node it is pinned to, for ``held``'s pods of ``pod_set`` that wait."""
    assert held.admission is not None
    placement = held.admission.placement.get(pod_set)
    if not placement:
        return {}
    flavors = term.scheduler.snapshot.flavors
    chosen = held.admission.flavors.get(pod_set, {}).values()
    levels = next((f.levels for name in chosen if (f := flavors.get(name)) is not None and f.topology), ())
    labels = {name: inventory.nodes[name].labels for name in placement if name in inventory.nodes}
    return pin(placement, node_order(list(placement), labels, levels), slots)


def node_selector(inventory: NodeInventory, node: str) -> dict[str, str]:
    """The nodeSelector that pins a pod to ``node``."""
    known = inventory.nodes.get(node)
    return {HOSTNAME: hostname(node, known.labels if known is not None else {})}


def _slot(pod: PlacedPod, hosts: Mapping[str, str]) -> PodSlot:
    """A waiting pod asks for a node; a pinned or bound one keeps its own; one ungated by someone
    else without a node is not ours to pin (it takes no slot)."""
    if pod.waiting:
        return PodSlot(pod.name, pod.rank, None)
    node = pinned_node(pod.spec, hosts)
    return PodSlot(pod.name, pod.rank, node, live=pod.live and node is not None)


class Pinner:
    def __init__(
        self,
        kube: Kube,
        inventory: NodeInventory,
        *,
        current_term: Callable[[], Term | None],
        workers: int = 4,
        ungated: Callable[[str, str, bool, float], None] = lambda gate, cluster_queue, group, seconds: None,
    ) -> None:
        self.kube = kube
        self.ungated = ungated  # told (gate, ClusterQueue, in a pod group, seconds since admission) per pod let go
        self.inventory = inventory
        self.current_term = current_term
        self.queue = WorkQueue(self.pin, workers=workers, name="pin")
        self.pinned = 0

    def start(self) -> None:
        self.queue.start()

    async def stop(self) -> None:
        await self.queue.stop()

    def request(self, key: str) -> None:
        self.queue.request(key)

    async def pin(self, key: str) -> None:
        """Pin every waiting pod of workload ``key`` whose admission is committed and started."""
        term = self.current_term()
        if term is None:
            return  # the next term looks at every placed pod again
        if not term.valid():
            term.park(self.queue.request, key)  # (not acting on a possibly stale term: once the lease is renewed)
            return
        held = term.held(key)
        if held is None or held.admission is None or admission_token(held) is None:
            return  # not admitted (or its checks pending): its job does not run, its pods stay gated
        placed = self.inventory.by_workload.get(key, {})
        hosts = self.inventory.hosts()
        for pod_set in held.admission.placement:
            members = {p.name: p for p in placed.values() if p.pod_set == pod_set}
            slots = [_slot(p, hosts) for p in members.values()]
            for name, node in assign(term, self.inventory, held, pod_set, slots).items():
                pod = members[name]
                patch = pods.ungate_patch(
                    {"spec": pod.spec}, node_selector(self.inventory, node), (), {}, TOPOLOGY_GATE
                )
                if await self._patch(pod.namespace, name, patch) and held.started_at is not None:
                    # (a job's pod: never in a plain-pod group, Kueue's ``is_group``)
                    self.ungated(TOPOLOGY_GATE, held.admission.cluster_queue, False, time.time() - held.started_at)

    async def _patch(self, namespace: str, name: str, patch: list[kube_client.Obj]) -> bool:
        """Ungate one pod; False if it is gone."""
        try:
            answer = await self.kube.request(
                "PATCH", PODS.path(namespace, name), body=patch, content_type=kube_client.JSON_PATCH
            )
        except KubeError as exc:
            if exc.status == 404:
                return False  # gone: its controller makes another, which is pinned in its turn
            if exc.temporary:
                raise Retry(str(exc), after=exc.retry_after) from exc
            raise Retry(f"{exc} (looking again)") from exc
        self.pinned += 1
        if isinstance(answer, dict):
            self.inventory.observe(answer)  # (so the next look does not hand its slot out again)
        return True
