"""What the webhook answers for Kueue's Workload objects (``workloads.kueue.x-k8s.io``).

The objects are the leader's projection of PostgreSQL (``admission.controller.objects.workload_projection``),
so a person's edit either becomes a request the leader honours or is refused with the reason:

- **``spec.active``** changed (``kubectl patch``, ``kubectl kueue stop|resume workload``): written as
  a stop/resume request with the requesting user (``admission.store.activity``, audited), then
  allowed. If the request cannot be written (the database away) the edit is refused: an object
  saying ``active: false`` for a workload that goes on running would be a lie.
- **Any other ``spec`` change** is refused: Kueue makes a Workload's pod sets, queue and priority
  from its job, and so does Turnstile (change the job instead).
- **Creating** a Workload is refused unless it is the projection's own (labelled with its job's uid
  and owned by it): Turnstile admits jobs, not free-standing Workloads.

Status and metadata edits (labels, annotations) are allowed; the next write of the leader puts the
status back as the store has it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from admission.webhook.review import Answer
from queues.kueue import workload_crd
from queues.podsets.jobs import ELASTIC_JOB

Obj = dict[str, Any]

# (namespace, Workload name, active, user): record a person's spec.active as a stop/resume request
Activity = Callable[[str, str, bool, str], Awaitable[None]]


def is_workload(request_kind: Any) -> bool:
    return (
        isinstance(request_kind, dict)
        and request_kind.get("group") == workload_crd.GROUP
        and request_kind.get("kind") == workload_crd.KIND
    )


def _spec_but_active(obj: Obj | None) -> dict[str, Any]:
    """What of a Workload's spec no one may change (an elastic job's pod counts may: Kueue's
    ``kueue.x-k8s.io/elastic-job`` Workloads are resized in place)."""
    spec = (obj or {}).get("spec")
    out = {k: v for k, v in (spec if isinstance(spec, dict) else {}).items() if k != "active"}
    notes = _dict(_dict((obj or {}).get("metadata")).get("annotations"))
    if notes.get(ELASTIC_JOB) == "true" and isinstance(out.get("podSets"), list):
        out["podSets"] = [{k: v for k, v in _dict(ps).items() if k != "count"} for ps in out["podSets"]]
    return out


def _active(obj: Obj | None) -> bool:
    spec = (obj or {}).get("spec")
    return not isinstance(spec, dict) or spec.get("active", True) is not False


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _projected(obj: Obj) -> bool:
    meta = _dict(obj.get("metadata"))
    labels = _dict(meta.get("labels"))
    found = meta.get("ownerReferences")
    owners: list[Any] = found if isinstance(found, list) else []
    uid = workload_crd.job_uid_of(str(labels.get(workload_crd.JOB_UID_LABEL) or ""))
    if uid.startswith(workload_crd.POD_GROUP_UID):  # (a pod group's: owned by its pods, none controls it)
        return any(isinstance(o, dict) and o.get("kind") == "Pod" and o.get("apiVersion") == "v1" for o in owners)
    return bool(uid) and any(isinstance(o, dict) and o.get("controller") and o.get("uid") == uid for o in owners)


async def review(operation: str, obj: Obj, old: Obj | None, user: Any, activity: Activity | None) -> Answer:
    """The validating answer for a Workload's CREATE or UPDATE."""
    meta = _dict(obj.get("metadata"))
    namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    what = f"workload {namespace}/{name}"
    if operation == "CREATE":
        if _projected(obj):
            return Answer()
        return Answer(
            allowed=False,
            message=(
                f"{what}: Turnstile makes Workloads from queued jobs and admits those; a Workload made by hand "
                "would never be admitted. Create the job with the kueue.x-k8s.io/queue-name label instead"
            ),
        )
    if operation != "UPDATE" or old is None:
        return Answer()
    before, after = _spec_but_active(old), _spec_but_active(obj)
    if before != after:
        changed = sorted(k for k in {*before, *after} if before.get(k) != after.get(k))
        return Answer(
            allowed=False,
            message=(
                f"{what}: spec.{', spec.'.join(changed)} cannot be changed; a Workload's spec comes from its job "
                "(change the job). Only spec.active may be set: false stops the workload, true resumes it"
            ),
        )
    if _active(old) == _active(obj):
        return Answer()
    username = str(user.get("username") or "") if isinstance(user, dict) else ""
    if activity is None:
        return Answer(allowed=False, message=f"{what}: spec.active cannot be recorded by this replica; retry")
    try:
        await activity(namespace, name, _active(obj), username or "unknown")
    except Exception as exc:  # (the database away: refuse rather than show a state nobody will apply)
        return Answer(
            allowed=False,
            message=f"{what}: spec.active could not be recorded ({type(exc).__name__}: {exc}"[:400]
            + "); nothing was changed, retry shortly (or use turnstile stop|resume workload)",
        )
    return Answer()
