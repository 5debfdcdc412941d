"""JobSet (``jobset.x-k8s.io/v1alpha2``): ``spec.suspend``; finished when Completed or Failed;
active pods per replicated job in ``status.replicatedJobsStatus``; its pods are Ready when its
Ready and succeeded child Jobs add up to its replicas (Kueue's reading)."""

from __future__ import annotations

from admission.jobs.base import Integration
from admission.kube.client import Obj, ResourceRef
from queues.podsets.jobs import JobInfo


def _active(obj: Obj) -> int:
    statuses = (obj.get("status") or {}).get("replicatedJobsStatus") or []
    return sum(int((s or {}).get("active") or 0) for s in statuses if isinstance(s, dict))


def _ready(obj: Obj, info: JobInfo) -> bool:
    replicas = sum(int((rj or {}).get("replicas") or 1) for rj in (obj.get("spec") or {}).get("replicatedJobs") or [])
    statuses = (obj.get("status") or {}).get("replicatedJobsStatus") or []
    done = sum(int((s or {}).get("ready") or 0) + int((s or {}).get("succeeded") or 0) for s in statuses)
    return done >= replicas


JOBSET = Integration(
    ResourceRef("jobset.x-k8s.io/v1alpha2", "JobSet", "jobsets"), ("Completed", "Failed"), _active, pods_ready=_ready
)
