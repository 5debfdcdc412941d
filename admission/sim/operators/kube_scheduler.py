"""The simulated kube-scheduler: a pending pod is bound to the first Node whose labels match its nodeSelector,
whose NoSchedule/NoExecute taints it tolerates and whose allocatable capacity still holds
its requests; otherwise it stays Pending with PodScheduled=False, reason Unschedulable, and
the kube-scheduler's words as the condition's message and in a Warning Event
``FailedScheduling`` on the pod (``0/4 nodes are available: 4 Insufficient nvidia.com/gpu.
preemption: 0/4 nodes are available: 4 No preemption victims found for incoming pod.``,
``queues.placement.nodes.fit_error``). Differences: one Event per distinct message (the real scheduler
retries with a backoff and its recorder counts repeats in the Event's series); it never
preempts, so its preemption verdict is always "No preemption victims found" where capacity was
short. Without any Node, capacity is unlimited (and claims are not allocated). A pod with DRA
claims is bound only where its devices are (``admission.sim.operators.dra``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from admission.sim.operators.dra import CANNOT_ALLOCATE, Dra, Plan, claims_of
from admission.sim.operators.kubelet import KUBELET_FINALIZER, PODS
from admission.sim.operators.statuses import now_text, set_condition
from admission.sim.server import resources
from admission.sim.server.object_store import ObjectStore
from admission.sim.server.objects import ApiError, Obj, clone
from queues.placement import nodes as nodes_model

UNLIMITED_NODE = "sim-unlimited"
NODES = next(r for r in resources.ALL if r.plural == "nodes")
EVENTS = next(r for r in resources.ALL if r.plural == "events" and not r.group)


class Scheduler:
    """Binds pending pods to nodes; remembers those it could not place, to try them again."""

    def __init__(self, store: ObjectStore, bound: Callable[[Obj], None], dra: Dra | None = None) -> None:
        self.store = store
        self.dra = dra or Dra(store)
        self.bound = bound  # told of each pod once it is bound (its job's status, the kubelet)
        self.unschedulable: set[tuple[str, str]] = set()  # pods the scheduler could not place yet

    def try_pod(self, pod: Obj) -> None:
        """A new (or ungated) pending pod, tried at once."""
        self._bind(clone(pod), *self._capacity())  # (the event's object is shared with the store)

    def forget(self, namespace: str, name: str) -> None:
        self.unschedulable.discard((namespace, name))

    def _capacity(self) -> tuple[list[Obj], dict[str, dict[str, int]]]:
        nodes = self.store.list(NODES, None)[0]
        return nodes, free_capacity(nodes, self.store.list(PODS, None)[0]) if nodes else {}

    def schedule_pending(self) -> None:
        """Try again every pod the scheduler could not place (each new pod is tried on its event)."""
        pending = []
        for ns, name in sorted(self.unschedulable):
            try:
                pod = self.store.get(PODS, ns, name)
            except ApiError:
                self.unschedulable.discard((ns, name))
                continue
            if pod["spec"].get("schedulingGates"):
                self.unschedulable.discard((ns, name))  # its ungating event tries it again
            elif (pod.get("status") or {}).get("phase") == "Pending" and not pod["spec"].get("nodeName"):
                pending.append(pod)
            else:
                self.unschedulable.discard((ns, name))
        if pending:
            nodes, free = self._capacity()  # once per pass; each binding deducts its pod below
            for pod in pending:
                self._bind(pod, nodes, free)

    def _bind(self, pod: Obj, nodes: list[Obj], free: dict[str, dict[str, int]]) -> None:
        needs = nodes_model.PodNeeds.of(pod["spec"])
        infos = [nodes_model.NodeInfo.of(n) for n in nodes]
        plans: dict[str, Plan] = {}
        message = ""
        if nodes and claims_of(pod):  # DRA: only the nodes with the devices its claims ask for
            claims = self.dra.claims(pod)
            plans = self.dra.plans(claims, [i.name for i in infos]) if claims is not None else {}
            if not plans:
                n = len(nodes)
                waiting = "waiting for the pod's ResourceClaims to be created" if claims is None else CANNOT_ALLOCATE
                message = (
                    f"0/{n} nodes are available: {n} {waiting}. preemption: 0/{n} nodes are available: "
                    f"{n} Preemption is not helpful for scheduling."
                )
            order = {node: k for k, node in enumerate(plans)}  # (earlier firstAvailable alternatives first)
            infos = sorted((i for i in infos if i.name in plans), key=lambda i: order[i.name])
        chosen = UNLIMITED_NODE if not nodes else nodes_model.first_fit(needs, infos, free) if infos else None
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        if chosen is None:
            self.unschedulable.add((ns, name))
            status = pod.setdefault("status", {})
            message = message or nodes_model.fit_error(needs, infos, free)
            said: dict[str, Any] = next(
                (c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), {}
            )
            if said.get("message") == message and said.get("status") == "False":
                return  # (said already: the same verdict is neither written nor told again)
            set_condition(status, "PodScheduled", "False", "Unschedulable", message)
            self.store.replace(PODS, ns, name, pod, subresource="status")
            self._failed_scheduling(pod, message)
            return
        self.unschedulable.discard((ns, name))
        if chosen in plans:
            self.dra.allocate(plans[chosen], pod, chosen)
        pod["spec"]["nodeName"] = chosen
        finalizers = list(pod["metadata"].get("finalizers") or [])
        if KUBELET_FINALIZER not in finalizers:  # from now on a deletion is graceful (see the module docstring)
            finalizers.append(KUBELET_FINALIZER)
        bound = self.store.replace(PODS, ns, name, {**pod, "metadata": {**pod["metadata"], "finalizers": finalizers}})
        status = bound.setdefault("status", {})
        status.update(phase="Running", startTime=now_text())
        set_condition(status, "PodScheduled", "True", "Scheduled")
        set_condition(status, "Initialized", "True", "")
        set_condition(status, "ContainersReady", "True", "")
        set_condition(status, "Ready", "True", "")
        self.store.replace(PODS, ns, name, bound, subresource="status")
        self.bound(bound)

    def _failed_scheduling(self, pod: Obj, message: str) -> None:
        """The kube-scheduler's Warning Event on a pod it cannot place."""
        meta = pod["metadata"]
        now = now_text()
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid"),
            },
            "reason": "FailedScheduling",
            "message": message,
            "type": "Warning",
            "source": {"component": "default-scheduler"},
            "reportingComponent": "default-scheduler",
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        self.store.create(EVENTS, meta["namespace"], body, namespaces=resources.NAMESPACES)


def free_capacity(nodes: list[Obj], pods: list[Obj]) -> nodes_model.Free:
    """Per node, what its allocatable capacity has left after the pods bound to it (milli-units)."""
    free: nodes_model.Free = {}
    for node in nodes:
        free[node["metadata"]["name"]] = dict(nodes_model.NodeInfo.of(node).allocatable)
    for pod in pods:
        node_name = pod["spec"].get("nodeName")
        if node_name in free and (pod.get("status") or {}).get("phase") in ("Pending", "Running"):
            nodes_model.take(free[node_name], nodes_model.PodNeeds.of(pod["spec"]))
    return free
