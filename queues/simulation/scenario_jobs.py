"""A scenario's timeline entries: one per workload, what a cluster is given for it and when.

A job entry is usually one object; a pod group is several (``Part``: its pods, each with its own
time), a serving object (a LeaderWorkerSet, an InferenceService) may be several workloads, and a
Deployment's replicas are made as its ReplicaSet makes them. ``queues.simulation.scenario`` reads
the file into these.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from queues.errors import FieldError
from queues.podsets import jobs, pod_resources, pods, serving
from queues.simulation.scenario_edits import MAX_SECONDS


@dataclass(frozen=True, slots=True)
class Part:
    """One object of a workload made of several (a pod group's pods): created at its own time."""

    index: int
    at: float
    runtime: float
    object: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class JobEntry:
    """One workload of the timeline: a job, a Pod, or a pod group (``parts``: its pods, each an entry
    of the file; the group is submitted when its last pod is, and runs as long as its longest)."""

    index: int
    at: float
    runtime: float
    job: jobs.JobInfo
    object: Mapping[str, Any]
    parts: tuple[Part, ...] = ()
    # a Deployment: how many replicas it asks for (its pods are workloads ``<name>-<k>``, made as
    # its ReplicaSet makes them: at creation, on scale-out, and to replace an evicted one); ``job``
    # is one replica's pod, named like the Deployment
    replicas: int | None = None
    regroups: bool = False  # a serving group: an eviction deletes it and its owner makes it again
    creates: bool = True  # False: another entry's object makes it (a LeaderWorkerSet's later groups)
    position: int = 0  # among the workloads of one object (a LeaderWorkerSet's groups), in order

    @property
    def seq(self) -> int:
        """Its place among equals in a queue: file order, then its position in its object."""
        return self.index * 1000 + self.position

    @property
    def serves(self) -> bool:
        """A serving replica: it runs until it is stopped (scaled in, evicted), never by itself."""
        return self.runtime >= MAX_SECONDS

    def replica(self, k: int, at: float) -> JobEntry:
        """The entry of its ``k``-th replica (made at ``at``): a Pod workload ``<name>-<k>``."""
        job = dataclasses.replace(self.job, name=f"{self.job.name}-{k}")
        return JobEntry(self.index, at, self.runtime, job, self.object)

    @property
    def objects(self) -> tuple[Part, ...]:
        """What a cluster is given, each at its time: the parts, or the object itself."""
        return self.parts or (Part(self.index, self.at, self.runtime, self.object),)


DEPLOYMENT = ("apps/v1", "Deployment")
BATCH_JOB = ("batch/v1", "Job")  # (a scale edit sets its parallelism)
RAY_CLUSTER = ("ray.io/v1", "RayCluster")
RAY_SERVICE = ("ray.io/v1", "RayService")
RAY_SCALED = {RAY_CLUSTER, ("ray.io/v1", "RayJob"), RAY_SERVICE}  # (a scale edit sets a worker group's replicas)
SERVES = {RAY_CLUSTER, RAY_SERVICE}  # integrated kinds that never finish: they serve until deleted


def serving_entries(i: int, at: float, raw: Mapping[str, Any], problems: list[FieldError]) -> list[JobEntry]:
    """The workloads of a serving object (``queues.podsets.serving``): they run until stopped, so no runtime."""
    path = f"jobs[{i}]"
    if "runtime" in raw:
        problems.append(FieldError(f"{path}.runtime", "serving workloads run until they are stopped: remove runtime"))
    obj: Mapping[str, Any] = raw["object"]
    before = len(problems)
    found = serving.read(f"{path}.object", obj, problems)
    for where, template in _templates(obj):
        problems.extend(e.under(f"{path}.object.{where}") for e in pod_resources.pod_problems(template))
    if len(problems) > before:
        return []
    return [
        JobEntry(i, at, MAX_SECONDS, info, obj, replicas=replicas, regroups=regroups, creates=n == 0, position=n)
        for n, (info, replicas, regroups) in enumerate(found)
    ]


def _templates(obj: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(path, pod spec) of a serving object's pod templates, for the API server's resource rules."""
    if (obj.get("apiVersion"), obj.get("kind")) == serving.INFERENCE_SERVICE:
        return [("spec.predictor", serving.predictor(obj)["spec"]["template"]["spec"])]
    spec = obj.get("spec") if isinstance(obj.get("spec"), Mapping) else {}
    assert isinstance(spec, Mapping)
    lwt = spec.get("leaderWorkerTemplate") if isinstance(spec.get("leaderWorkerTemplate"), Mapping) else {}
    assert isinstance(lwt, Mapping)
    found = [("spec.template.spec", (spec.get("template") or {}).get("spec"))]
    found += [
        (f"spec.leaderWorkerTemplate.{k}.spec", (lwt.get(k) or {}).get("spec"))
        for k in ("leaderTemplate", "workerTemplate")
    ]
    return [(p, t) for p, t in found if isinstance(t, Mapping)]


def group(key: str, members: list[tuple[int, Part, jobs.JobInfo]], problems: list[FieldError]) -> JobEntry | None:
    """A pod group's pods as one entry, or None (with the problems) when they cannot be one."""
    namespace, _, name = key.partition("/")
    first = members[0][0]
    group = pods.Group(namespace, name, tuple(part.object for _, part, _ in members))
    found = pods.group_problems(group)
    if not found:
        total = pods.total_count(group.pods[0])
        if len(members) != total:
            where = ", ".join(f"jobs[{i}]" for i, _, _ in members)
            found.append(
                FieldError(
                    f"metadata.annotations[{pods.TOTAL_ANNOTATION}]",
                    f"group {name} counts {total} pods but the timeline creates {len(members)} ({where})",
                )
            )
    if found:
        problems.extend(e.under(f"jobs[{first}].object") for e in found)
        return None
    parts = tuple(part for _, part, _ in members)
    return JobEntry(
        index=first,
        at=max(p.at for p in parts),
        runtime=max(p.runtime for p in parts),
        job=pods.group_info(group),
        object=parts[0].object,
        parts=parts,
    )
