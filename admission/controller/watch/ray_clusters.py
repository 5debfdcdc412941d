"""The RayClusters KubeRay made for RayJobs and RayServices: where an autoscaling one's pod counts are.

An elastic RayJob or RayService with ``enableInTreeAutoscaling`` is scaled by the Ray autoscaler,
which writes its RayCluster's worker ``replicas``, never the job's spec; so, as Kueue's
``raycluster.UpdatePodSets``, the job's pod counts are read from that cluster
(``queues.podsets.kuberay.made_cluster``), and a change of the cluster is a change of the job
(resized in place: ``queues.cycle.elastic``). This keeps the clusters such a job owns (by
namespace and name, for the job views' lookup) and the elastic, autoscaling jobs seen (by uid,
to read again when their cluster changes); both are few. Cluster events come from the RayCluster
integration's informer when that kind is queued, else from an informer of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from admission.jobs.base import Integration
from admission.kube.client import Kube, Obj, ResourceRef
from admission.kube.informer import Informer
from queues.podsets import jobs, kuberay

RAYCLUSTERS = ResourceRef("ray.io/v1", kuberay.RAY_CLUSTER, "rayclusters")
OWNER_KINDS = set(kuberay.CLUSTER_SPEC)  # the Ray kinds whose cluster KubeRay makes and the autoscaler scales
OWNERS = frozenset((RAYCLUSTERS.api_version, kind) for kind in OWNER_KINDS)


class RayClusters:
    def __init__(self, kube: Kube, reread: Callable[[Obj], None], *, watched: bool) -> None:
        """``watched``: the RayCluster integration's informer brings cluster events (``job``)."""
        self.clusters: dict[tuple[str, str], Obj] = {}  # (namespace, name) -> a cluster a RayJob or RayService owns
        self.owners: dict[str, Obj] = {}  # uid -> an elastic, autoscaling RayJob or RayService as last seen
        self.reread = reread  # a job to read again (its cluster came, changed or went)
        self.informers = [] if watched else [Informer(kube, RAYCLUSTERS, self._on_cluster, optional=True)]

    def lookup(self, kind: str, namespace: str | None, name: str) -> Mapping[str, Any] | None:
        return self.clusters.get((namespace or "", name)) if kind == kuberay.RAY_CLUSTER else None

    def job(self, integration: Integration, kind: str, obj: Obj) -> None:
        """A job event: a RayCluster's (when that kind is queued), a RayJob's or a RayService's."""
        if integration.ref.kind == kuberay.RAY_CLUSTER:
            self._on_cluster(kind, obj)
        elif integration.ref.kind in OWNER_KINDS:
            uid = str((obj.get("metadata") or {}).get("uid"))
            if kind != "DELETED" and kuberay.autoscales(integration.ref.kind, obj):
                self.owners[uid] = obj
            else:
                self.owners.pop(uid, None)

    def _on_cluster(self, kind: str, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        owner = jobs.parent_of(meta, OWNERS)
        if owner is None:
            return
        key = (str(meta.get("namespace") or ""), str(meta.get("name")))
        before = self.clusters.get(key)
        if kind == "DELETED":
            self.clusters.pop(key, None)
        else:
            self.clusters[key] = obj
        # (a status update changes no count: only a new spec, or the cluster coming or going, does)
        generation = (before or {}).get("metadata", {}).get("generation")
        if before is None or kind == "DELETED" or generation != meta.get("generation"):
            parent = self.owners.get(owner)
            if parent is not None:
                self.reread(parent)
