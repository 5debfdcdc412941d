"""Which pod of a Deployment is which replica of a scenario, for engine cluster's report.

Engine core names a Deployment's replicas ``<namespace>/<deployment>-<k>``, in the order its
ReplicaSet makes them (``queues.simulation.replicas.Replicas``); in the cluster they are pods with generated
names (``<deployment>-<hash>-<random>``), each its own workload. ``ReplicaNames`` watches the
simulated cluster's store for the pods of the scenario's Deployments (by the service label the
webhook puts on them) and numbers them as they are made, so both engines report the same names.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

from admission.sim.operators.replicas import PODS
from admission.sim.server.object_store import ObjectStore, Watcher
from queues.podsets import pods
from queues.simulation.scenario import JobEntry


@dataclass(slots=True)
class Made:
    replica: JobEntry  # the replica's entry (its key: namespace/<deployment>-<k>)
    pod: str  # namespace/<pod name>: the workload's key in the store
    at: float  # monotonic time the pod was made


@dataclass(slots=True)
class ReplicaNames:
    store: ObjectStore
    deployments: dict[tuple[str, str], JobEntry]  # (namespace, service label) -> the Deployment's entry
    made: list[Made] = field(default_factory=list)
    by_pod: dict[str, Made] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    watcher: Watcher | None = None
    task: asyncio.Task[None] | None = None

    @classmethod
    def of(cls, store: ObjectStore, entries: list[JobEntry]) -> ReplicaNames:
        found = {
            (e.job.namespace, pods.label_name("Deployment", e.job.name)): e for e in entries if e.replicas is not None
        }
        return cls(store, found)

    def start(self) -> None:
        if not self.deployments:
            return
        self.watcher = Watcher(PODS, None)
        self.store.watchers.append(self.watcher)
        self.task = asyncio.create_task(self._watch(), name="replica-names")

    async def stop(self) -> None:
        if self.watcher is not None:
            with contextlib.suppress(ValueError):
                self.store.watchers.remove(self.watcher)
            self.watcher.queue.put_nowait(None)
        if self.task is not None:
            await asyncio.gather(self.task, return_exceptions=True)

    async def _watch(self) -> None:
        assert self.watcher is not None
        while (event := await self.watcher.queue.get()) is not None:
            if event.type != "ADDED":
                continue
            meta = event.obj["metadata"]
            entry = self.deployments.get((meta["namespace"], (meta.get("labels") or {}).get(pods.SERVICE_LABEL, "")))
            if entry is None:
                continue
            k = self.counts.get(entry.job.key, 0)
            self.counts[entry.job.key] = k + 1
            made = Made(entry.replica(k, 0.0), f"{meta['namespace']}/{meta['name']}", event.at)
            self.made.append(made)
            self.by_pod[made.pod] = made

    def name(self, key: str) -> str:
        """The scenario's name of a workload (a replica's pod: its replica name)."""
        made = self.by_pod.get(key)
        return made.replica.job.key if made is not None else key
