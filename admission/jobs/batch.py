"""batch/v1 Job: ``spec.suspend``; finished when Complete or Failed; its pods hold capacity while
``status.active`` or ``status.terminating`` (pods deleted but still shutting down) count them.
Admitted partially (``kueue.x-k8s.io/job-min-parallelism``), it runs with ``spec.parallelism`` set
to the pods admitted, restored when it is suspended again."""

from __future__ import annotations

from admission.jobs.base import Integration, PodsOf
from admission.kube.client import Obj, ResourceRef
from queues.podsets.jobs import JobInfo


def _uid(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


def _active(obj: Obj) -> int:
    status = obj.get("status") or {}
    return int(status.get("active") or 0) + int(status.get("terminating") or 0)


def _ready_count(obj: Obj) -> int:
    status = obj.get("status") or {}
    return int(status.get("ready") or 0) + int(status.get("succeeded") or 0)


def _ready(obj: Obj, info: JobInfo) -> bool:
    """Kueue's: Ready plus succeeded pods reach the pods it runs at once (an elastic Job's pods beyond
    its admission wait gated: ``JobView.ready_pods`` against its admitted count says it)."""
    return _ready_count(obj) >= info.pod_sets[0].count


JOB = Integration(
    ResourceRef("batch/v1", "Job", "jobs"),
    ("Complete", "Failed"),
    _active,
    count_pointer="/spec/parallelism",
    pods_ready=_ready,
    ready_count=_ready_count,
    # (the Job controller's label on its pods; all are pod set main)
    pods_of=PodsOf(lambda job: f"batch.kubernetes.io/controller-uid={_uid(job)}", lambda _pod: "main"),
)
