"""Kubeflow Trainer's training runtimes as the cluster has them: where a TrainJob's pods come from.

A TrainJob's pod sets are its runtime's JobSet template (``queues.podsets.trainjobs``), so every replica
watches ``ClusterTrainingRuntimes`` and namespaced ``TrainingRuntimes`` (optional kinds: a cluster
without Kubeflow Trainer has neither, and nothing waits for them). The job views (``JobCache``) and
the webhook look runtimes up here. A TrainJob seen before its runtime (or whose runtime changed) is
read again when the runtime comes: the TrainJobs seen are kept, by uid, for that (they are few).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from admission.jobs.base import Integration
from admission.kube.client import Kube, Obj, ResourceRef
from admission.kube.informer import Informer
from queues.podsets import trainjobs

GROUP = trainjobs.API_VERSION
CLUSTER_RUNTIMES = ResourceRef(GROUP, trainjobs.CLUSTER_RUNTIME, "clustertrainingruntimes", namespaced=False)
RUNTIMES = ResourceRef(GROUP, trainjobs.RUNTIME, "trainingruntimes")


class TrainingRuntimes:
    def __init__(self, kube: Kube, reread: Callable[[Obj], None]) -> None:
        self.runtimes: dict[tuple[str, str | None, str], Obj] = {}  # (kind, namespace, name) -> runtime
        self.trainjobs: dict[str, Obj] = {}  # uid -> the TrainJob as last seen
        self.reread = reread  # a TrainJob to read again (its runtime came or changed)
        self.informers = [
            Informer(kube, CLUSTER_RUNTIMES, self._on, optional=True),
            Informer(kube, RUNTIMES, self._on, optional=True),
        ]

    def lookup(self, kind: str, namespace: str | None, name: str) -> Mapping[str, Any] | None:
        return self.runtimes.get((kind, namespace if kind == trainjobs.RUNTIME else None, name))

    def job(self, integration: Integration, kind: str, obj: Obj) -> None:
        """A job event: TrainJobs are remembered (until deleted) to be read again."""
        if integration.ref.kind != "TrainJob":
            return
        uid = str((obj.get("metadata") or {}).get("uid"))
        if kind == "DELETED":
            self.trainjobs.pop(uid, None)
        else:
            self.trainjobs[uid] = obj

    def _on(self, kind: str, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        runtime_kind = trainjobs.RUNTIME if meta.get("namespace") else trainjobs.CLUSTER_RUNTIME
        key = (runtime_kind, meta.get("namespace") or None, str(meta.get("name")))
        if kind == "DELETED":
            self.runtimes.pop(key, None)
        else:
            self.runtimes[key] = obj
        for job in list(self.trainjobs.values()):
            if trainjobs.runtime_ref(job) == key:
                self.reread(job)
