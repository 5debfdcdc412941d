"""What every replica watches in the cluster, and what its events change.

Informers for the jobs of every integrated kind (a kind from a CRD may be absent: most clusters
run only some operators; it is reported once, holds nothing back, and is looked at again when its
CRD is installed), namespaces (their labels choose queues and the webhooks' scope), the plain
Pods the webhook holds (``admission.controller.watch.podgroups``), Kubernetes' PriorityClasses (a job's
priority when it names no WorkloadPriorityClass), Kubeflow Trainer's runtimes (where a TrainJob's
pod sets come from), the RayClusters KubeRay makes for RayJobs and RayServices (an autoscaling one's counts,
``admission.controller.watch.ray_clusters``), DRA's ResourceDeviceCatalog (what a job's device
claims charge) and the CRDs themselves. A job event updates the job cache and marks the job
for the next step; a namespace change is told to the step and to the namespace watchers (the
webhook registration).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from admission.controller.watch import ray_clusters
from admission.controller.watch.changes import Changes
from admission.controller.watch.device_catalog import DeviceCatalog
from admission.controller.watch.jobcache import JobCache
from admission.controller.watch.podgroups import PodGroups
from admission.controller.watch.priorities import PriorityClasses
from admission.controller.watch.ray_clusters import RayClusters
from admission.controller.watch.runtimes import TrainingRuntimes
from admission.jobs import owners_of
from admission.jobs.base import Integration
from admission.kube import client as kube_client
from admission.kube.client import Kube, Obj
from admission.kube.informer import Informer
from queues.cycle.scheduler import Scheduler
from queues.dra import mappings
from queues.dra.mappings import Mappings
from queues.podsets import pods
from queues.podsets.transformations import NONE as NO_TRANSFORMATIONS
from queues.podsets.transformations import Transformations

PODS = kube_client.ResourceRef("v1", "Pod", "pods")
MANAGED_PODS = f"{pods.MANAGED_LABEL}=true"  # the pods the webhook gated (it labels each)


class ClusterWatch:
    """The informers (``informers``: the integrations' first, in their order) and their handlers."""

    def __init__(
        self,
        kube: Kube,
        jobs: JobCache,
        changes: Changes,
        integrations: Sequence[Integration],
        *,
        current_scheduler: Callable[[], Scheduler | None],
        optional: Callable[[], Iterable[Informer]],
        device_mappings: Mappings = mappings.NONE,
        transformations: Transformations = NO_TRANSFORMATIONS,
    ) -> None:
        self.jobs = jobs
        jobs.owners = owners_of(integrations)  # (their children: parts)
        self.changes = changes
        self.optional = optional  # other parts' informers of kinds a CRD may serve (checks, objects)
        self.namespaces: dict[str, dict[str, str]] = {}
        self.namespace_watchers: list[Callable[[], None]] = []  # a namespace was added, relabelled or deleted
        self.integrations = tuple(integrations)
        self.informers: list[Informer] = []
        for integration in self.integrations:
            informer = Informer(kube, integration.ref, _nothing, optional=not integration.built_in)
            informer.handler = functools.partial(self._on_job, integration, informer)
            self.informers.append(informer)
        self.informers.append(Informer(kube, kube_client.NAMESPACES, self._on_namespace))
        self.pod_groups = PodGroups(jobs, changes.job)
        self.informers.append(Informer(kube, PODS, self._on_managed_pod, label_selector=MANAGED_PODS))
        self.priorities = PriorityClasses(kube, current_scheduler)
        self.informers.append(self.priorities.informer)
        self.device_catalog = DeviceCatalog(kube, jobs, changes, device_mappings, current_scheduler, transformations)
        self.informers.extend(self.device_catalog.informers)
        self.runtimes = TrainingRuntimes(kube, self._reread)
        queued = {i.ref.kind for i in self.integrations}
        self.ray_clusters = RayClusters(kube, self._reread, watched=ray_clusters.RAYCLUSTERS.kind in queued)
        jobs.runtimes = self._lookup
        self.informers.extend(self.runtimes.informers)
        self.informers.extend(self.ray_clusters.informers)
        self.crds = Informer(kube, kube_client.CRDS, self._on_crd, optional=True)

    def _lookup(self, kind: str, namespace: str | None, name: str) -> Mapping[str, Any] | None:
        """The objects a job's pod sets come from: a TrainJob's runtime, an autoscaling Ray job's cluster."""
        found = self.ray_clusters.lookup(kind, namespace, name)
        return found if found is not None else self.runtimes.lookup(kind, namespace, name)

    def _on_job(self, integration: Integration, informer: Informer, kind: str, obj: Obj) -> None:
        self.runtimes.job(integration, kind, obj)
        self.ray_clusters.job(integration, kind, obj)
        if self.jobs.observe(integration, kind, obj, listed_since=informer.listing_since):
            self.changes.job(str((obj.get("metadata") or {}).get("uid")))
        self._released()

    def _on_managed_pod(self, kind: str, obj: Obj) -> None:
        self.pod_groups.observe(kind, obj)
        self._released()

    def _released(self) -> None:
        """Jobs of another kind that waited for a gone job's name (``JobCache.waiting``) are looked at again."""
        for uid in self.jobs.take_released():
            self.changes.job(uid)

    def _reread(self, job: Obj) -> None:
        """A TrainJob's runtime (an autoscaling RayJob's or RayService's cluster) came or changed: its
        pod sets are read again."""
        meta = job.get("metadata") or {}
        uid = str(meta.get("uid"))
        view = self.jobs.views.get(uid)
        if view is None:
            return
        if view.version and view.version != str(meta.get("resourceVersion") or ""):
            # (the view is of another version: one this replica wrote, whose event is on its way, or
            # one the cache skipped as older than that write; never read it back from ``job``: read
            # the job whole when its next event comes, instead of reusing what was read before)
            self.jobs.put(uid, dataclasses.replace(view, source=None))
            return
        self.jobs.put(uid, view.integration.view(job, self.jobs.shapes, self._lookup, owners=self.jobs.owners))
        self.changes.job(uid)

    def _on_crd(self, kind: str, obj: Obj) -> None:
        """A CRD came, changed or went: the informers of its group look again now (a kind whose
        CRD was just installed is queued from then on, without waiting for the periodic look)."""
        group = str((obj.get("spec") or {}).get("group") or "")
        for informer in (*self.informers, *self.optional()):
            if informer.optional and informer.ref.api_version.rpartition("/")[0] == group:
                informer.recheck()

    def _on_namespace(self, kind: str, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        name = str(meta.get("name"))
        labels = dict(meta.get("labels") or {})
        if kind == "DELETED":
            changed = self.namespaces.pop(name, None) is not None
        else:
            changed = self.namespaces.get(name) != labels
            self.namespaces[name] = labels
        if changed:
            self.changes.namespaces = True
            self.changes.wake.set()
            for watcher in self.namespace_watchers:
                watcher()

    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self.informers)

    def probe(self) -> str | None:
        """Readiness: which informers have not listed yet."""
        waiting = [i.ref.plural for i in self.informers if not i.synced.is_set()]
        return f"not yet listed: {', '.join(waiting)}" if waiting else None

    def integrations_detail(self) -> str:
        served = [i.ref.kind for i in self.informers[: len(self.integrations)] if not i.absent]
        absent = [i.ref.kind for i in self.informers[: len(self.integrations)] if i.absent]
        text = f"queueing {', '.join(served) or 'nothing'}"
        return text + (f"; not served by this cluster (install their CRDs): {', '.join(absent)}" if absent else "")


def _nothing(_kind: str, _obj: Obj) -> None:
    """A placeholder handler, replaced once the informer exists."""
