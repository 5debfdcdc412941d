"""KubeRay's RayJob, RayCluster (``spec.suspend``) and RayService (``spec.rayClusterConfig.suspend``),
``ray.io/v1``; pod sets in ``queues.podsets.layouts``.

How each says it is over and whether its pods still run, from KubeRay's status (as Kueue reads it):

- RayJob: finished when ``status.jobDeploymentStatus`` is ``Complete`` or ``Failed``; its pods run
  while that status is anything but a not-yet-started or ``Suspended`` one (``Suspending`` is
  KubeRay deleting the cluster: its pods still hold their nodes).
- RayCluster: never finished (it serves until deleted, as in Kueue); its pods run unless its
  ``status.state`` is ``suspended`` (KubeRay sets it once every pod of a suspended cluster is gone)
  or not yet set.

- RayService: never finished (it serves until deleted, as in Kueue); its pods (its RayCluster's) run
  unless its active cluster's state (``status.activeServiceStatus.rayClusterStatus.state``) is
  ``suspended`` or not yet set. The RayCluster KubeRay makes for it is its, never queued on its own
  (its controller is the RayService: ``queues.podsets.jobs.owned_by_parent``).

Their pods are Ready when the cluster's state is ``ready`` (a RayJob's ``rayClusterStatus``), or, for
a RayService, when its ``Ready`` condition is True, as Kueue reads them. An elastic RayCluster,
RayJob or RayService (autoscaling: ``queues.cycle.elastic``) has its pods found by KubeRay's
``ray.io/cluster`` (a RayJob's or RayService's: the cluster KubeRay made for it, which its status
names) and ``ray.io/group`` labels; an autoscaling RayJob's or RayService's pod counts are that
cluster's (``queues.podsets.kuberay``).
"""

from __future__ import annotations

from admission.jobs.base import Integration, PodsOf
from admission.jobs.job_fields import condition_true
from admission.kube.client import Obj, ResourceRef
from queues.podsets import kuberay
from queues.podsets.jobs import JobInfo

_IDLE = ("", "New", "Suspended", "Complete", "Failed")


def _job_status(obj: Obj) -> str:
    return str((obj.get("status") or {}).get("jobDeploymentStatus") or "")


def _job_active(obj: Obj) -> int:
    return int(_job_status(obj) not in _IDLE)


def _job_finished(obj: Obj) -> bool:
    return _job_status(obj) in ("Complete", "Failed")


def _cluster_active(obj: Obj) -> int:
    return int(str((obj.get("status") or {}).get("state") or "") not in ("", "suspended"))


def _job_ready(obj: Obj, info: JobInfo) -> bool:
    return str(((obj.get("status") or {}).get("rayClusterStatus") or {}).get("state") or "") == "ready"


def _cluster_ready(obj: Obj, info: JobInfo) -> bool:
    return str((obj.get("status") or {}).get("state") or "") == "ready"


def _service_active(obj: Obj) -> int:
    active = ((obj.get("status") or {}).get("activeServiceStatus") or {}).get("rayClusterStatus") or {}
    return int(str(active.get("state") or "") not in ("", "suspended"))


def _service_ready(obj: Obj, info: JobInfo) -> bool:
    return condition_true(obj, ("Ready",))


def _group_pod_set(pod: Obj) -> str:
    """The pod set of a RayCluster's pod, from KubeRay's ``ray.io/group`` label (``headgroup``: head)."""
    group = str(((pod.get("metadata") or {}).get("labels") or {}).get("ray.io/group") or "")
    return "head" if group == "headgroup" else group.lower()


def _made_cluster_pods(kind: str, obj: Obj) -> str | None:
    """An elastic RayJob's or RayService's pods: its cluster's (as Kueue's ``PodLabelSelector``); None
    before KubeRay made it. (A RayJob's submitter pod is its submitter Job's, never gated.)"""
    name = kuberay.made_cluster_name(kind, obj)
    return f"ray.io/cluster={name}" if name else None


RAYJOB = Integration(
    ResourceRef("ray.io/v1", "RayJob", "rayjobs"),
    (),
    _job_active,
    _job_finished,
    pods_ready=_job_ready,
    pods_of=PodsOf(lambda job: _made_cluster_pods("RayJob", job), _group_pod_set),
)


RAYCLUSTER = Integration(
    ResourceRef("ray.io/v1", "RayCluster", "rayclusters"),
    (),
    _cluster_active,
    pods_ready=_cluster_ready,
    # (an elastic, autoscaling RayCluster: its pods by KubeRay's labels)
    pods_of=PodsOf(lambda cluster: f"ray.io/cluster={(cluster.get('metadata') or {}).get('name')}", _group_pod_set),
)


RAYSERVICE = Integration(
    ResourceRef("ray.io/v1", "RayService", "rayservices"),
    (),
    _service_active,
    pods_ready=_service_ready,
    pods_of=PodsOf(lambda svc: _made_cluster_pods("RayService", svc), _group_pod_set),
)
ALL = (RAYJOB, RAYCLUSTER, RAYSERVICE)
