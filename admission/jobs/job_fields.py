"""The fields of a job object Turnstile reads and writes as JSON: a path or an RFC 6901 pointer
into it, whether a condition is true, what a view's pod sets were read from (its generation and
metadata, so an unchanged job is not read again), and the annotations Turnstile owns on a job and
its pod templates.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from admission.kube.client import Obj
from queues.placement.pinning import PODSET_ANNOTATION, WORKLOAD_ANNOTATION
from queues.podsets import jobs


def walk(obj: Any, path: Sequence[str]) -> Any:
    for key in path:
        obj = obj.get(key) if isinstance(obj, Mapping) else None
    return obj


def pointer_get(obj: Any, pointer: str) -> Any:
    for part in pointer.strip("/").split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(obj, list) and part.isdigit() and int(part) < len(obj):
            obj = obj[int(part)]
        elif isinstance(obj, Mapping):
            obj = obj.get(part)
        else:
            return None
    return obj


def condition_true(obj: Obj, kinds: Sequence[str]) -> bool:
    return any(
        c.get("type") in kinds and c.get("status") == "True"
        for c in (walk(obj, ("status", "conditions")) or [])
        if isinstance(c, Mapping)
    )


def read_from(meta: Mapping[str, Any]) -> tuple[int, int] | None:
    """(generation, hash of labels and annotations): what a view's pod sets were read from; None
    where the object has no generation (nothing is reused)."""
    generation = meta.get("generation")
    if not isinstance(generation, int) or generation <= 0:
        return None
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    try:
        return generation, hash((frozenset(labels.items()), frozenset(annotations.items())))
    except TypeError:  # (an unhashable value: a malformed object; read it afresh)
        return None


def queue_label(meta: Mapping[str, Any]) -> str | None:
    labels = meta.get("labels")
    value = labels.get(jobs.QUEUE_LABEL) if isinstance(labels, Mapping) else None
    return value if isinstance(value, str) and value else None


ADMISSION_ANNOTATION = "turnstile.dev/admission"  # on a running job: which admission started it


KEEP_UNTIL = "turnstile.dev/keep-until"  # on a job: idle reclaim leaves it alone until then (RFC 3339)


# Pod template annotations Turnstile sets when the job starts and that a restore removes: an
# admission check's (the ProvisioningRequest its pods consume) and a placed pod set's (which
# workload and pod set its pods belong to, so each is pinned to its node).
POD_ANNOTATIONS = (
    "autoscaling.x-k8s.io/consume-provisioning-request",
    "autoscaling.x-k8s.io/provisioning-class-name",
    WORKLOAD_ANNOTATION,
    PODSET_ANNOTATION,
)
