"""GPU health in the controller: a node whose GPU reports a fatal Xid stops taking work.

Why here: Kubernetes keeps a node Ready while one of its GPUs has fallen off the bus; its jobs
crash or hang, and the kube-scheduler keeps sending it more. dcgm-exporter reports each GPU's
last Xid (and uncorrectable ECC errors, row-remap failures), and the leader already reads
Prometheus every ``TURNSTILE_RECLAIM_INTERVAL`` (``admission.controller.features.reclaim``): with the
utilisation it asks which GPUs report a fatal fault (``utilisation.Prometheus.faults``;
``queues.gpus.gpu_health`` says which are fatal and in what words). Then, by
``TURNSTILE_GPU_HEALTH``:

- ``taint`` (the default): the node is tainted ``turnstile.dev/gpu-unhealthy:NoSchedule``
  (value: the Xid), so nothing new lands there, Turnstile's placement or the kube-scheduler's;
  the taint is removed when the node no longer reports the fault (the GPU was reset, the
  exporter restarted). Only Turnstile's own taint is ever touched;
- ``evict``: no change to the Node (where another system owns node taints: NVIDIA's health
  checks, node-problem-detector); Turnstile's own placement (by topology) avoids it;
- ``off``: nothing.

In ``taint`` and ``evict``, every workload whose pods run there is evicted and requeued, with
Kueue's reason ``NodeFailures`` (detail ``GPUUnhealthy``) and a message naming the node, the GPU
and the Xid; a Warning Event says it on the job (the eviction's) and on the Node
(``GPUUnhealthy``; ``GPUHealthy`` when it clears). A workload is evicted once per fault and
leadership term (a step whose commit failed ends the term, and the next evicts again what still
runs there): one readmitted onto the same node under ``evict`` is left to the kube-scheduler
(use ``taint``).
Missing data is never a fault: a Prometheus that cannot be read changes nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine

from admission.controller.events import EventPoster
from admission.controller.features.inventory import NODES, NodeInventory
from admission.controller.term import Term
from admission.kube.client import Kube, KubeError
from queues.cycle.decisions import Decision
from queues.gpus.gpu_health import GPU_UNHEALTHY, TAINT, Fault, describe, taint_value

log = logging.getLogger(__name__)

MODES = ("taint", "evict", "off")
UNHEALTHY, HEALTHY = GPU_UNHEALTHY, "GPUHealthy"


class GpuHealth:
    def __init__(
        self,
        kube: Kube,
        *,
        mode: str,
        events: EventPoster,
        inventory: NodeInventory,
        wake: Callable[[], None],
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"TURNSTILE_GPU_HEALTH={mode!r}: use one of {', '.join(MODES)}")
        self.kube, self.mode, self.events, self.inventory, self.wake = kube, mode, events, inventory, wake
        self.faults: dict[str, list[Fault]] = {}  # node -> its GPUs' fatal faults, as last read
        # node -> workloads evicted for its current fault, in this term (a step whose commit failed
        # ends the term: the next one evicts again whatever still runs there)
        self.evicted: dict[str, set[str]] = {}
        self._term: Term | None = None
        self.tainted: set[str] = set()  # nodes Turnstile's taint is known to be on
        self.tasks: set[asyncio.Task[None]] = set()

    @property
    def on(self) -> bool:
        return self.mode != "off"

    def read(self, faults: dict[str, list[Fault]]) -> None:
        """A read of the GPUs' faults (the reclaimer's loop): say what changed, taint or untaint,
        wake a step to evict."""
        if not self.on:
            return
        new = {node: found for node, found in faults.items() if found != self.faults.get(node)}
        cleared = set(self.faults) - set(faults)
        self.faults = faults
        for node, found in sorted(new.items()):
            said = describe(found)
            log.warning("%s: its workloads are evicted and it takes no new work", said)
            action = "tainted NoSchedule" if self.mode == "taint" else "not used for placement"
            self.events.post_on("v1", "Node", node, None, UNHEALTHY, f"{said}; {action}", type="Warning")
            self.inventory.set_unhealthy(node, True)
        for node in sorted(cleared):
            log.info("node %s no longer reports a GPU fault", node)
            self.events.post_on("v1", "Node", node, None, HEALTHY, "its GPUs report no fatal fault now", type="Normal")
            self.evicted.pop(node, None)
            self.inventory.set_unhealthy(node, False)
        if self.mode == "taint":  # (what failed before is tried again at each read)
            for node in sorted(set(faults) - self.tainted):
                self._spawn(self._taint(node, faults[node]))
            # (a taint an earlier leader put on a node that has since recovered comes off too)
            for node in sorted((self.tainted | self.inventory.tainted_with(TAINT)) - set(faults)):
                self._spawn(self._taint(node, []))
        if new:
            self.wake()

    def decide(self, term: Term) -> list[Decision]:
        """In a step: evict the workloads whose pods run on a node that reports a fault."""
        if term is not self._term:
            self._term, self.evicted = term, {}
        out: list[Decision] = []
        for node, found in sorted(self.faults.items()):
            done = self.evicted.setdefault(node, set())
            keys = [k for k in self.inventory.workloads_on(node) if k not in done]
            if keys:
                out.extend(term.scheduler.retries.node_failed(node, keys, describe(found)))
                done.update(keys)
        return out

    def _spawn(self, coro: Coroutine[object, object, None]) -> None:
        task = asyncio.create_task(coro, name="gpu-health-taint")
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _taint(self, node: str, found: list[Fault]) -> None:
        """Put Turnstile's taint on ``node`` (value: what it reported, ``Xid-79``) or take it off
        (``found`` empty), other taints left as they are; a conflict or a refusal is tried again
        at the next read."""
        try:
            obj = await self.kube.get(NODES, None, node)
            spec = obj.get("spec") or {}
            taints = [t for t in spec.get("taints") or [] if t.get("key") != TAINT]
            if found:
                taints.append({"key": TAINT, "value": taint_value(found), "effect": "NoSchedule"})
            if taints != list(spec.get("taints") or []):
                version = (obj.get("metadata") or {}).get("resourceVersion")
                patch = {"metadata": {"resourceVersion": version}, "spec": {"taints": taints}}
                await self.kube.patch(NODES, None, node, patch)
        except KubeError as exc:
            if exc.status == 404:  # (the node is gone: nothing to taint)
                self.tainted.discard(node)
                return
            log.warning(
                "could not %s node %s (tried again at the next read): %s", "taint" if found else "untaint", node, exc
            )
            return
        if found:
            self.tainted.add(node)
        else:
            self.tainted.discard(node)
