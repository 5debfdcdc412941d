"""Builders for scheduling tests: ``make_workload("a").priority(100).request(gpu=4)``."""

from __future__ import annotations

from typing import Any

from queues.cycle.scheduler import Scheduler
from queues.kueue import api, codec
from queues.model import Config, Workload
from queues.podsets import jobs

GPU = "nvidia.com/gpu"
_ALIASES = {"gpu": GPU, "cpu": "cpu", "memory": "memory", "pods": "pods"}


def _res(kw: dict[str, Any]) -> dict[str, str]:
    return {_ALIASES.get(k, k): str(v) for k, v in kw.items()}


class CQ:
    def __init__(self, name: str) -> None:
        self.body: dict[str, Any] = {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "ClusterQueue",
            "metadata": {"name": name},
            "spec": {"namespaceSelector": {}, "resourceGroups": []},
        }

    def cohort(self, name: str) -> CQ:
        self.body["spec"]["cohort"] = name
        return self

    def strict(self) -> CQ:
        self.body["spec"]["queueingStrategy"] = "StrictFIFO"
        return self

    def preemption(self, **kw: Any) -> CQ:
        self.body["spec"]["preemption"] = kw
        return self

    def fungibility(self, **kw: str) -> CQ:
        self.body["spec"]["flavorFungibility"] = kw
        return self

    def group(self, *flavors: tuple[str, dict[str, Any]]) -> CQ:
        """``group(("a100", {"gpu": 8}), ("h100", {"gpu": (4, {"borrowingLimit": "2"})}))``."""
        covered = None
        out = []
        for flavor, resources in flavors:
            rs = []
            for k, v in resources.items():
                name = _ALIASES.get(k, k)
                extra: dict[str, Any] = {}
                if isinstance(v, tuple):
                    v, extra = v
                rs.append({"name": name, "nominalQuota": str(v), **extra})
            covered = covered or [r["name"] for r in rs]
            out.append({"name": flavor, "resources": rs})
        self.body["spec"]["resourceGroups"].append({"coveredResources": covered, "flavors": out})
        return self

    def build(self) -> api.KueueObject:
        return codec.parse(self.body)


def flavor(name: str, labels: dict[str, str] | None = None, taints: list[dict[str, str]] | None = None) -> Any:
    return codec.parse(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "ResourceFlavor",
            "metadata": {"name": name},
            "spec": {"nodeLabels": labels or {}, "nodeTaints": taints or []},
        }
    )


def local_queue(ns: str, name: str, cq: str) -> Any:
    return codec.parse(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "LocalQueue",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"clusterQueue": cq},
        }
    )


class WL:
    """A batch Job in namespace ``ns`` labelled for LocalQueue ``ns``'s queue named like the CQ."""

    _seq = 0

    def __init__(self, name: str, queue: str = "q", ns: str = "ns") -> None:
        self.name, self.queue, self.ns = name, queue, ns
        self._priority = 0
        self._requests: dict[str, str] = {}
        self._count = 1
        self._selector: dict[str, str] = {}
        self._tolerations: list[dict[str, str]] = []
        self._labels: dict[str, str] = {}
        self._annotations: dict[str, str] = {}

    def min_count(self, n: int) -> WL:
        """Partial admission: ``kueue.x-k8s.io/job-min-parallelism``."""
        self._annotations[jobs.MIN_PARALLELISM] = str(n)
        return self

    def priority(self, value: int) -> WL:
        self._priority = value
        return self

    def request(self, **kw: Any) -> WL:
        self._requests = _res(kw)
        return self

    def count(self, n: int) -> WL:
        self._count = n
        return self

    def labels(self, **labels: str) -> WL:
        self._labels = labels
        return self

    def node_selector(self, **labels: str) -> WL:
        self._selector = labels
        return self

    def tolerate(self, key: str, value: str, effect: str = "NoSchedule") -> WL:
        self._tolerations.append({"key": key, "operator": "Equal", "value": value, "effect": effect})
        return self

    def job(self) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "x", "resources": {"requests": self._requests}}],
        }
        if self._selector:
            spec["nodeSelector"] = self._selector
        if self._tolerations:
            spec["tolerations"] = self._tolerations
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": self.name,
                "namespace": self.ns,
                "labels": {jobs.QUEUE_LABEL: self.queue, **self._labels},
                "annotations": dict(self._annotations),
            },
            "spec": {"parallelism": self._count, "completions": self._count, "template": {"spec": spec}},
        }

    def submit(self, sched: Scheduler, now: float = 0.0) -> Workload:
        WL._seq += 1
        sched.now = now
        wl = sched.intake.workload_for(jobs.read_job(self.job()), seq=WL._seq, now=now)
        wl.priority = self._priority
        sched.submit(wl)
        return wl


def make_workload(name: str, queue: str = "q", ns: str = "ns") -> WL:
    return WL(name, queue, ns)


def scheduler(*objects: Any, queues: dict[str, str] | None = None) -> Scheduler:
    """A scheduler over ``objects``; ``queues`` maps LocalQueue name -> ClusterQueue in namespace ns."""
    built = [o.build() if isinstance(o, CQ) else o for o in objects]
    for lq, cq in (queues or {}).items():
        built.append(local_queue("ns", lq, cq))
    return Scheduler(Config.of(built))


def admitted(sched: Scheduler) -> dict[str, str]:
    return {k: w.admission.cluster_queue for k, w in sched.workloads.items() if w.admission is not None}
