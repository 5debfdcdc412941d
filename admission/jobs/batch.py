"""batch/v1 Job: ``spec.suspend``; finished when Complete or Failed; active pods in ``status.active``."""

from __future__ import annotations

from admission.jobs.base import Integration
from admission.kube.client import Obj, ResourceRef


def _active(obj: Obj) -> int:
    return int((obj.get("status") or {}).get("active") or 0)


JOB = Integration(ResourceRef("batch/v1", "Job", "jobs"), ("Complete", "Failed"), _active)
