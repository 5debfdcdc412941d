"""A cluster-autoscaler that serves ProvisioningRequests (``autoscaling.x-k8s.io/v1``) like the real one.

- ``check-capacity.autoscaling.x-k8s.io``: Provisioned=True when the current Nodes can hold every
  pod of the request, else Provisioned=False (CapacityIsNotFound); it never adds Nodes.
- ``best-effort-atomic-scale-up.autoscaling.x-k8s.io``: Provisioned=True at once when the pods fit;
  otherwise, if the Nodes needed (from ``node_template``) stay within ``max_nodes`` added in all,
  they are created after ``provisioning_delay`` and the request becomes Provisioned=True; beyond
  the limit it gets Failed=True and no Node is added (all or nothing).
- A Provisioned request books its capacity for ``booking_expiry``; if by then no pod carries
  ``autoscaling.x-k8s.io/consume-provisioning-request: <name>``, it gets BookingExpired=True.

Every request is first Accepted=True. Delays are scenario seconds times ``time_scale``.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from admission.sim.operators.cluster import NODES, PODS, free_capacity, set_condition
from admission.sim.server import resources
from admission.sim.server.object_store import ObjectStore, Watcher
from admission.sim.server.objects import ApiError, Obj
from queues.placement import nodes as nodes_model

CHECK_CAPACITY = nodes_model.CHECK_CAPACITY
ATOMIC_SCALE_UP = nodes_model.ATOMIC_SCALE_UP
CONSUME_ANNOTATION = "autoscaling.x-k8s.io/consume-provisioning-request"
PROVISIONING_REQUESTS = next(r for r in resources.ALL if r.plural == "provisioningrequests")
POD_TEMPLATES = next(r for r in resources.ALL if r.plural == "podtemplates")
node_object = nodes_model.node_object


class Autoscaler:
    def __init__(
        self,
        store: ObjectStore,
        *,
        node_template: Obj | None = None,
        max_nodes: int = 16,
        provisioning_delay: float = 120.0,
        booking_expiry: float = 600.0,
        time_scale: float = 1.0,
    ) -> None:
        self.store = store
        self.node_template = node_template or {}
        self.max_nodes = max_nodes
        self.provisioning_delay = provisioning_delay
        self.booking_expiry = booking_expiry
        self.time_scale = time_scale
        self.added = 0
        self.watcher = Watcher(PROVISIONING_REQUESTS, None)
        self.task: asyncio.Task[None] | None = None
        self.timers: list[asyncio.TimerHandle] = []
        self.in_progress: set[str] = set()

    async def start(self) -> None:
        self.store.watchers.append(self.watcher)
        self.task = asyncio.create_task(self._consume())

    async def stop(self) -> None:
        with contextlib.suppress(ValueError):
            self.store.watchers.remove(self.watcher)
        self.watcher.queue.put_nowait(None)
        for t in self.timers:
            t.cancel()
        if self.task is not None:
            await self.task

    async def _consume(self) -> None:
        while (event := await self.watcher.queue.get()) is not None:
            if event.type != "DELETED":
                with contextlib.suppress(ApiError):
                    self._handle(event.obj["metadata"]["namespace"], event.obj["metadata"]["name"])

    def _later(self, seconds: float, fn: Any, *args: Any) -> None:
        self.timers.append(asyncio.get_running_loop().call_later(seconds * self.time_scale, fn, *args))

    def _write(self, pr: Obj, kind: str, value: str, reason: str, message: str) -> None:
        set_condition(pr.setdefault("status", {}), kind, value, reason, message)
        self.store.replace(
            PROVISIONING_REQUESTS, pr["metadata"]["namespace"], pr["metadata"]["name"], pr, subresource="status"
        )

    def _decided(self, pr: Obj) -> bool:
        return any(
            c.get("type") in ("Provisioned", "Failed") and c.get("status") == "True"
            for c in (pr.get("status") or {}).get("conditions", [])
        )

    def _pods(self, pr: Obj) -> list[nodes_model.PodNeeds]:
        out = []
        for ps in (pr.get("spec") or {}).get("podSets") or []:
            ref = str((ps.get("podTemplateRef") or {}).get("name") or "")
            template = self.store.get(POD_TEMPLATES, pr["metadata"]["namespace"], ref)
            out += [nodes_model.PodNeeds.of(template["template"]["spec"])] * int(ps.get("count", 1))
        return out

    def _handle(self, namespace: str, name: str) -> None:
        key = f"{namespace}/{name}"
        pr = self.store.get(PROVISIONING_REQUESTS, namespace, name)
        if self._decided(pr) or key in self.in_progress:
            return
        self._write(pr, "Accepted", "True", "Accepted", "the request was accepted")
        pr = self.store.get(PROVISIONING_REQUESTS, namespace, name)
        try:
            pods = self._pods(pr)
        except ApiError:
            self._write(pr, "Failed", "True", "PodTemplateNotFound", "a pod set's podTemplateRef does not exist")
            return
        nodes = self.store.list(NODES, None)[0]
        infos = [nodes_model.NodeInfo.of(n) for n in nodes]
        all_pods = self.store.list(PODS, None)[0]
        free = free_capacity(nodes, all_pods)
        for other in self._booked(key, all_pods):
            with contextlib.suppress(ApiError):  # its PodTemplates are gone: it books nothing
                nodes_model.book(self._pods(other), infos, free)
        verdict = nodes_model.answer(
            pods,
            infos,
            free,
            provisioning_class=str((pr.get("spec") or {}).get("provisioningClassName")),
            template=self.node_template,
            max_nodes=self.max_nodes,
            added=self.added,
        )
        if verdict.verdict == "Provisioned":
            self._provisioned(namespace, name, verdict.message)
        elif verdict.verdict == "Waiting":
            self._write(pr, "Provisioned", "False", verdict.reason, verdict.message)
        elif verdict.verdict == "ScaleUp":
            self.added += verdict.nodes
            self.in_progress.add(key)
            self._write(pr, "Provisioned", "False", verdict.reason, verdict.message)
            self._later(self.provisioning_delay, self._scale_up, namespace, name, verdict.nodes)
        else:
            self._write(pr, "Failed", "True", verdict.reason, verdict.message)

    def _booked(self, key: str, pods: list[Obj]) -> list[Obj]:
        """Provisioned requests (not ``key``) whose capacity is still booked: not expired, and no pod
        consuming them is scheduled yet (then the pods themselves hold it), in namespace/name order."""
        consumed = {
            (str(p["metadata"].get("namespace") or ""), str(notes[CONSUME_ANNOTATION]))
            for p in pods
            if CONSUME_ANNOTATION in (notes := p["metadata"].get("annotations") or {}) and p["spec"].get("nodeName")
        }
        out = []
        for pr in self.store.list(PROVISIONING_REQUESTS, None)[0]:
            ns, name = pr["metadata"]["namespace"], pr["metadata"]["name"]
            conditions = {c.get("type"): c.get("status") for c in (pr.get("status") or {}).get("conditions", [])}
            if (
                f"{ns}/{name}" != key
                and conditions.get("Provisioned") == "True"
                and conditions.get("BookingExpired") != "True"
                and (ns, name) not in consumed
            ):
                out.append(pr)
        return out

    def _scale_up(self, namespace: str, name: str, count: int) -> None:
        self.in_progress.discard(f"{namespace}/{name}")
        for _ in range(count):
            node = node_object(nodes_model.scale_up_name(len(self.store.list(NODES, None)[0])), self.node_template)
            with contextlib.suppress(ApiError):
                self.store.create(NODES, "", node, namespaces=resources.NAMESPACES)
        self._provisioned(namespace, name, f"{count} node(s) added")

    def _provisioned(self, namespace: str, name: str, message: str) -> None:
        with contextlib.suppress(ApiError):
            pr = self.store.get(PROVISIONING_REQUESTS, namespace, name)
            self._write(pr, "Provisioned", "True", "Provisioned", message)
            self._later(self.booking_expiry, self._expire_booking, namespace, name)

    def _expire_booking(self, namespace: str, name: str) -> None:
        consumers = [
            p
            for p in self.store.list(PODS, namespace)[0]
            if (p["metadata"].get("annotations") or {}).get(CONSUME_ANNOTATION) == name
        ]
        if consumers:
            return
        with contextlib.suppress(ApiError):
            pr = self.store.get(PROVISIONING_REQUESTS, namespace, name)
            self._write(pr, "BookingExpired", "True", "BookingExpired", "no pod consumed the capacity in time")
