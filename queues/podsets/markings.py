"""Kueue's markings on a job beyond its pod sets: elastic jobs, and those Turnstile does not act on.

Why apart from ``queues.podsets.jobs``: what a job's annotations ask of the queue (Kueue's
``kueue.x-k8s.io/elastic-job``: resized in place, ``queues.cycle.elastic``) and what Turnstile says
it does not do (``unsupported_markings``: the webhook warns, ``turnstile simulate`` prints it), so a
marking is never silently ignored. Read by the webhook, the controller and both engines.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

ELASTIC_JOB = "kueue.x-k8s.io/elastic-job"  # Kueue's workload slices: a batch Job resized in place
# resized in place, as Kueue's workload slices
ELASTIC_KINDS = {("batch/v1", "Job"), ("ray.io/v1", "RayCluster"), ("ray.io/v1", "RayJob"), ("ray.io/v1", "RayService")}


def unsupported_markings(obj: Mapping[str, Any]) -> list[str]:
    """Kueue's annotations (or labels) on a job that Turnstile does not act on, each said with what
    happens instead: a job that asks for them is still admitted, never silently treated otherwise."""
    meta = obj.get("metadata") or {}
    marks = {**(meta.get("labels") or {}), **(meta.get("annotations") or {})}
    out = []
    if str(marks.get(ELASTIC_JOB, "")).lower() == "true" and not elastic(obj):
        out.append(
            f"metadata.annotations[{ELASTIC_JOB}]: elastic jobs (workload slices) are a batch Job's or a Ray "
            f"kind's only here (not a {obj.get('kind')}'s); it is admitted at its size now, and a change of its "
            "pods evicts and requeues it"
        )
    return out


def elastic(obj: Mapping[str, Any]) -> bool:
    """Whether a job is elastic (``queues.cycle.elastic``): a batch Job, RayCluster, RayJob or
    RayService annotated as Kueue's ``kueue.x-k8s.io/elastic-job: "true"`` (the value exactly, as Kueue reads it)."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return elastic_kind(str(obj.get("apiVersion")), str(obj.get("kind")), annotations)


def elastic_kind(api_version: str, kind: str, annotations: Any) -> bool:
    """``elastic`` for a job read already (``JobInfo.elastic``)."""
    return (
        (api_version, kind) in ELASTIC_KINDS
        and isinstance(annotations, Mapping)
        and (annotations.get(ELASTIC_JOB) == "true")
    )
