"""A Deployment's ReplicaSet in engine core (``queues.simulation.simulator``): the serving replicas it makes
and deletes, each a workload of its own, as the real ReplicaSet controller does."""

from __future__ import annotations

from typing import Protocol

from queues.simulation.reclaim_model import EfficiencyModel
from queues.simulation.recorder import Recorder
from queues.simulation.scenario import JobEntry


class Host(Protocol):
    """What a ReplicaSet needs of engine core's simulation (``Simulation`` is one)."""

    now: float
    efficiency: EfficiencyModel
    record: Recorder

    def _submit(self, entry: JobEntry, seq: int | None = None) -> None: ...

    def cancel(self, key: str) -> None: ...


class Replicas:
    """A Deployment's ReplicaSet in engine core: its replicas ``<name>-<k>`` made in order (at
    creation, on scale-out, after an eviction deleted one); on scale-in, as the real ReplicaSet
    ranks them, waiting replicas go first, newest first, then running ones, newest first."""

    def __init__(self, sim: Host) -> None:
        self.sim = sim
        self.entries: dict[str, JobEntry] = {}  # Deployment key -> its entry
        self.made: dict[str, int] = {}  # Deployment key -> replicas made so far
        self.live: dict[str, list[str]] = {}  # Deployment key -> its replicas' keys, oldest first
        self.parent: dict[str, str] = {}  # replica key -> Deployment key
        self.seq = 10**12  # after every entry of the file (a replica's place among equals)

    def create(self, entry: JobEntry) -> None:
        key = entry.job.key
        self.entries[key] = entry
        self.live.setdefault(key, [])
        self.scale(key, entry.replicas or 0)

    def scale(self, key: str, replicas: int) -> None:
        entry = self.entries.get(key)
        if entry is None:
            return
        live = self.live[key]
        while len(live) < replicas:
            self._make(entry)
        if len(live) > replicas:
            by_rank = sorted(live, key=lambda k: (self.sim.record.by_key[k].state == "Admitted", -live.index(k)))
            for replica in by_rank[: len(live) - replicas]:
                live.remove(replica)
                self.sim.cancel(replica)

    def replaced(self, replica: str) -> None:
        """An evicted replica was deleted: its ReplicaSet makes another."""
        key = self.parent.get(replica)
        if key is None or replica not in self.live.get(key, []):
            return
        self.live[key].remove(replica)
        self._make(self.entries[key])
        reclaimed = self.sim.efficiency.reclaimed
        if replica in reclaimed:  # (the replacement of an idle replica does not contend either)
            reclaimed[self.live[key][-1]] = reclaimed.pop(replica)

    def _make(self, entry: JobEntry) -> None:
        key = entry.job.key
        k = self.made.get(key, 0)
        self.made[key] = k + 1
        replica = entry.replica(k, self.sim.now)
        self.parent[replica.job.key] = key
        self.live[key].append(replica.job.key)
        if (trace := self.sim.efficiency.traces.get(key)) is not None:
            self.sim.efficiency.traces[replica.job.key] = trace
        self.sim.record.add(replica)
        self.seq += 1
        self.sim._submit(replica, seq=self.seq)
