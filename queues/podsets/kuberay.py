"""What KubeRay adds to a Ray cluster that its spec does not say, and Kueue counts all the same.

Why apart from ``queues.podsets.layouts`` (which reads a Ray spec's pod sets): these are KubeRay's
own behaviours, each charged as Kueue charges it, in one place:

- the **autoscaler sidecar** KubeRay puts in the head pod of a cluster with
  ``enableInTreeAutoscaling`` (500m / 512Mi unless ``autoscalerOptions.resources`` says otherwise);
- the **default submitter** pod of a RayJob in ``K8sJobMode`` that sets no ``submitterPodTemplate``;
- the **RayCluster KubeRay made** for an elastic, autoscaling RayJob or RayService: the Ray
  autoscaler scales that cluster, never the job, so its worker groups' replicas are the job's pod counts
  (Kueue's ``raycluster.UpdatePodSets``). It is found by name through a lookup (the controller's
  watch, ``admission.controller.watch.ray_clusters``), as a TrainJob's runtime is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from queues.podsets import markings

RAY_CLUSTER = "RayCluster"
# (kind, namespace, name) -> the object, where known: ``queues.podsets.trainjobs.Runtimes``'s shape
Lookup = Callable[[str, str | None, str], Mapping[str, Any] | None]

# KubeRay's submitter pod when a RayJob sets no ``submitterPodTemplate`` (ray-operator common/job.go):
# what Kueue counts for it too.
DEFAULT_SUBMITTER: Mapping[str, Any] = {
    "spec": {
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "ray-job-submitter",
                "resources": {"requests": {"cpu": "500m", "memory": "200Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
            }
        ],
    }
}


# the Ray kinds whose cluster KubeRay makes: where each keeps that cluster's spec
CLUSTER_SPEC = {"RayJob": "rayClusterSpec", "RayService": "rayClusterConfig"}


def autoscales(kind: str, obj: Mapping[str, Any]) -> bool:
    """Whether a RayJob or RayService (``kind``: a listed object carries none) is elastic and its
    cluster autoscales (``made_cluster``'s)."""
    held = CLUSTER_SPEC.get(kind)
    spec = obj.get("spec")
    config = spec.get(held) if held is not None and isinstance(spec, Mapping) else None
    return isinstance(config, Mapping) and config.get("enableInTreeAutoscaling") is True and markings.elastic(obj)


def made_cluster_name(kind: str, obj: Mapping[str, Any]) -> str | None:
    """The RayCluster KubeRay made for a RayJob (``status.rayClusterName``) or a RayService (its active
    one, ``status.activeServiceStatus.rayClusterName``); None before it made one."""
    status = obj.get("status")
    if not isinstance(status, Mapping):
        return None
    holder = status.get("activeServiceStatus") if kind == "RayService" else status
    name = holder.get("rayClusterName") if isinstance(holder, Mapping) else None
    return name if isinstance(name, str) and name else None


def made_cluster(kind: str, obj: Mapping[str, Any], lookup: Lookup | None) -> Mapping[str, Any] | None:
    """The RayCluster KubeRay made for an elastic, autoscaling RayJob or RayService, as ``lookup``
    finds it: the Ray autoscaler scales that cluster, so its worker groups' replicas are the job's
    counts (Kueue's ``raycluster.UpdatePodSets``). None for anything else, or before KubeRay made it."""
    if kind not in CLUSTER_SPEC or lookup is None or not autoscales(kind, obj):
        return None
    name = made_cluster_name(kind, obj)
    namespace = str((obj.get("metadata") or {}).get("namespace") or "default")
    return lookup(RAY_CLUSTER, namespace, name) if name is not None else None


def made_replicas(made: Mapping[str, Any], group: str, replicas: int) -> int:
    """Worker group ``group``'s replicas in the RayCluster KubeRay made (``replicas``, the service's
    own, where that cluster has no such group or leaves them unset, as Kueue)."""
    for found in (made.get("spec") or {}).get("workerGroupSpecs") or []:
        if isinstance(found, Mapping) and found.get("groupName") == group:
            value = found.get("replicas")
            return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else replicas
    return replicas


# KubeRay's autoscaler sidecar in the head pod, unless ``autoscalerOptions.resources`` says otherwise
# (ray-operator's BuildAutoscalerContainer; Kueue charges it the same way)
AUTOSCALER_RESOURCES = {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"cpu": "500m", "memory": "512Mi"}}


def with_autoscaler(head: Mapping[str, Any], options: Any) -> Mapping[str, Any]:
    """The head's template as KubeRay makes its pod when it autoscales: with the autoscaler sidecar."""
    given = options.get("resources") if isinstance(options, Mapping) else None
    sidecar = {"name": "autoscaler", "resources": given if isinstance(given, Mapping) else AUTOSCALER_RESOURCES}
    spec = head.get("spec") or {}
    return {**head, "spec": {**spec, "containers": [*(spec.get("containers") or []), sidecar]}}
