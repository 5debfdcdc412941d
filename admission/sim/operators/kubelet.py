"""The simulated kubelet: a bound pod runs for its runtime, then succeeds; a deleted pod terminates
gracefully, holding its node's capacity for its termination period (see ``admission.sim.operators.
cluster``'s docstring for the rules and the differences from a real kubelet).
"""

from __future__ import annotations

import asyncio

from admission.sim.operators.statuses import set_condition
from admission.sim.server import resources
from admission.sim.server.object_store import ObjectStore
from admission.sim.server.objects import ApiError, Obj

RUNTIME_ANNOTATION = "turnstile.dev/sim-runtime"
KUBELET_FINALIZER = "turnstile.dev/sim-kubelet"  # held while a deleted pod terminates
FOREVER = "forever"  # a RUNTIME_ANNOTATION value: the pod runs until it is deleted (a RayCluster's)
PODS = next(r for r in resources.ALL if r.plural == "pods")


class Kubelet:
    """Every node's kubelet at once: the pods' runtimes and terminations, as timers."""

    def __init__(
        self, store: ObjectStore, *, time_scale: float, termination_seconds: float, default_runtime: float | None
    ) -> None:
        self.store = store
        self.time_scale = time_scale
        self.default_runtime = default_runtime  # seconds a pod without a sim-runtime runs (None: forever)
        self.termination_seconds = termination_seconds  # how long a pod's containers take to stop on SIGTERM
        self.timers: dict[str, asyncio.TimerHandle] = {}  # pod -> when it ends: its runtime, or its termination
        self.stopping: set[str] = set()  # pods whose termination period runs

    def stop(self) -> None:
        for timer in self.timers.values():
            timer.cancel()

    def forget(self, key: str) -> None:
        """A pod is gone: nothing more happens to it."""
        self.stopping.discard(key)
        timer = self.timers.pop(key, None)
        if timer is not None:
            timer.cancel()

    def run(self, pod: Obj) -> None:
        """A pod just bound runs for its runtime, then succeeds."""
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        # (a pod that restarts always, a server's, never succeeds: the default runtime is a batch pod's)
        always = (pod["spec"].get("restartPolicy") or "Always") == "Always"
        default = None if always else self.default_runtime
        runtime = (pod["metadata"].get("annotations") or {}).get(RUNTIME_ANNOTATION, default)
        if runtime is not None and runtime != FOREVER:
            try:
                seconds = max(0.0, float(runtime))
            except ValueError:
                seconds = default if default is not None else 0.0
            delay = seconds * self.time_scale
            self.timers[f"{ns}/{name}"] = asyncio.get_running_loop().call_later(delay, self._succeed, ns, name)

    def terminate(self, pod: Obj) -> None:
        """Delete a pod gracefully: it runs on, marked for deletion, for the termination period."""
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        if pod["metadata"].get("deletionTimestamp"):
            return
        timer = self.timers.pop(f"{ns}/{name}", None)
        if timer is not None:
            timer.cancel()
        try:
            self.store.delete(PODS, ns, name)
        except ApiError:
            return
        self.stop_later(ns, name)

    def stop_later(self, ns: str, name: str) -> None:
        """The kubelet stops a deleted pod's containers within its termination period, then lets it go
        (its runtime no longer counts: it will not succeed)."""
        key = f"{ns}/{name}"
        timer = self.timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        self.stopping.add(key)
        delay = max(0.0, min(self.termination_seconds, self._grace(ns, name))) * self.time_scale
        self.timers[key] = asyncio.get_running_loop().call_later(delay, self._terminated, ns, name)

    def _grace(self, namespace: str, name: str) -> float:
        """The pod's grace period: its deletion's, else its spec's (30 s by default)."""
        try:
            pod = self.store.get(PODS, namespace, name)
        except ApiError:
            return 0.0
        for value in (
            pod["metadata"].get("deletionGracePeriodSeconds"),
            (pod.get("spec") or {}).get("terminationGracePeriodSeconds"),
        ):
            if isinstance(value, int) and not isinstance(value, bool):
                return float(max(0, value))
        return 30.0

    def _terminated(self, namespace: str, name: str) -> None:
        self.timers.pop(f"{namespace}/{name}", None)
        self.stopping.discard(f"{namespace}/{name}")
        try:
            pod = self.store.get(PODS, namespace, name)
            pod["metadata"]["finalizers"] = [f for f in pod["metadata"].get("finalizers", []) if f != KUBELET_FINALIZER]
            self.store.replace(PODS, namespace, name, pod)
        except ApiError:
            return

    def _succeed(self, namespace: str, name: str) -> None:
        self.timers.pop(f"{namespace}/{name}", None)
        try:
            pod = self.store.get(PODS, namespace, name)
        except ApiError:
            return
        pod["status"]["phase"] = "Succeeded"
        set_condition(pod["status"], "Ready", "False", "PodCompleted")
        set_condition(pod["status"], "ContainersReady", "False", "PodCompleted")
        self.store.replace(PODS, namespace, name, pod, subresource="status")
