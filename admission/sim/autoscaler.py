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
from collections.abc import Mapping
from typing import Any

from admission.sim import resources
from admission.sim.cluster import NODES, PODS, fits, free_capacity, set_condition
from admission.sim.objects import ApiError, Obj, ObjectStore, Watcher, clone
from queues import jobs

CHECK_CAPACITY = "check-capacity.autoscaling.x-k8s.io"
ATOMIC_SCALE_UP = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
CONSUME_ANNOTATION = "autoscaling.x-k8s.io/consume-provisioning-request"
PROVISIONING_REQUESTS = next(r for r in resources.ALL if r.plural == "provisioningrequests")
POD_TEMPLATES = next(r for r in resources.ALL if r.plural == "podtemplates")


def _pack(pods: list[Obj], nodes: list[Obj], free: dict[str, dict[str, int]]) -> bool:
    """First-fit every pod spec onto the nodes' free capacity; True if all of them fit."""
    free = clone(free)
    for spec in pods:
        for node in nodes:
            name = node["metadata"]["name"]
            if fits(spec, node, free[name]):
                for r, v in jobs.pod_requests(spec, "spec", []).items():
                    free[name][r] = free[name].get(r, 0) - v
                break
        else:
            return False
    return True


def node_object(name: str, shape: Mapping[str, Any]) -> Obj:
    """A Node from scenario.md's node shape (``labels``, ``capacity``, ``taints``): a scenario's
    ``nodes`` entries and the autoscaler's ``nodeTemplate`` alike."""
    capacity = dict(shape.get("capacity") or {})
    return {
        "metadata": {"name": name, "labels": dict(shape.get("labels") or {})},
        "spec": {"taints": list(shape.get("taints") or [])},
        "status": {"capacity": capacity, "allocatable": dict(capacity)},
    }


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

    def _pods(self, pr: Obj) -> list[Obj]:
        out = []
        for ps in (pr.get("spec") or {}).get("podSets") or []:
            ref = str((ps.get("podTemplateRef") or {}).get("name") or "")
            template = self.store.get(POD_TEMPLATES, pr["metadata"]["namespace"], ref)
            out += [template["template"]["spec"]] * int(ps.get("count", 1))
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
        free = free_capacity(nodes, self.store.list(PODS, None)[0])
        cls = (pr.get("spec") or {}).get("provisioningClassName")
        if _pack(pods, nodes, free):
            self._provisioned(namespace, name, "capacity is available on the current nodes")
        elif cls == CHECK_CAPACITY:
            self._write(pr, "Provisioned", "False", "CapacityIsNotFound", "the current nodes cannot hold the pods")
        elif cls == ATOMIC_SCALE_UP:
            needed = self._nodes_needed(pods, nodes, free)
            if needed is None or self.added + needed > self.max_nodes:
                self._write(
                    pr,
                    "Failed",
                    "True",
                    "NotProvisioned",
                    f"the pods need more nodes than the autoscaler may add ({self.max_nodes - self.added} left)",
                )
                return
            self.added += needed
            self.in_progress.add(key)
            self._write(pr, "Provisioned", "False", "Provisioning", f"adding {needed} node(s)")
            self._later(self.provisioning_delay, self._scale_up, namespace, name, needed)
        else:
            self._write(pr, "Failed", "True", "UnsupportedClass", f"provisioningClassName {cls!r} is not supported")

    def _template_node(self, name: str) -> Obj:
        return node_object(name, self.node_template)

    def _nodes_needed(self, pods: list[Obj], nodes: list[Obj], free: dict[str, dict[str, int]]) -> int | None:
        for extra in range(1, self.max_nodes + 1):
            fresh = [self._template_node(f"candidate-{i}") for i in range(extra)]
            more = free_capacity(fresh, [])
            if _pack(pods, nodes + fresh, {**free, **more}):
                return extra
        return None

    def _scale_up(self, namespace: str, name: str, count: int) -> None:
        self.in_progress.discard(f"{namespace}/{name}")
        for _ in range(count):
            node = self._template_node(f"sim-scaleup-{len(self.store.list(NODES, None)[0])}")
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
