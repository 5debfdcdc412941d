"""JobSet (``jobset.x-k8s.io/v1alpha2``): ``spec.suspend``; finished when Completed or Failed;
active pods per replicated job in ``status.replicatedJobsStatus``."""

from __future__ import annotations

from admission.jobs.base import Integration
from admission.kube.client import Obj, ResourceRef


def _active(obj: Obj) -> int:
    statuses = (obj.get("status") or {}).get("replicatedJobsStatus") or []
    return sum(int((s or {}).get("active") or 0) for s in statuses if isinstance(s, dict))


JOBSET = Integration(ResourceRef("jobset.x-k8s.io/v1alpha2", "JobSet", "jobsets"), ("Completed", "Failed"), _active)
