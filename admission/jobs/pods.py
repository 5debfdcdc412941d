"""Plain Pods (``v1`` Pod): the integration for pods Turnstile holds by a scheduling gate.

Unlike a job, a pod workload may be many objects (a pod group, ``queues.podsets.pods``), and is held and
started pod by pod: ``view`` builds one ``JobView`` over the workload's pods, with ``pods`` set, so
the enactor ungates or deletes each of them; everything else (store rows, the core, Events, the
ledger) treats it as any job. What its fields mean here:

- ``suspended``: no pod runs (every live pod is gated);
- ``active``: some ungated pod has not finished (a pod being deleted still holds its node);
- ``finished``: a single pod has Succeeded or Failed; a group when every one of its ``total`` pods
  has (a serving group never finishes by its pods: its owner replaces them);
- ``admission``: the ``turnstile.dev/admission`` mark of its running pods;
- ``ready`` (waitForPodsReady): all its pods exist and each is Ready or done.
"""

from __future__ import annotations

from collections.abc import Sequence

from admission.jobs.base import Integration, JobView, PodRef
from admission.jobs.job_fields import ADMISSION_ANNOTATION, condition_true
from admission.kube.client import Obj, ResourceRef
from queues import errors
from queues.podsets import jobs, pods

POD = Integration(ResourceRef("v1", "Pod", "pods"), (), lambda obj: 0)
FRAMEWORK = "pod"  # Kueue's framework name for plain pods


def _ref(pod: Obj, pod_set: str) -> PodRef:
    meta = pod.get("metadata") or {}
    return PodRef(
        name=str(meta.get("name")),
        uid=str(meta.get("uid")),
        pod_set=pod_set,
        gated=pods.gated(pod),
        live=not pods.done(pod) and not pods.deleting(pod),
        obj=pod,
    )


def view(
    uid: str,
    namespace: str,
    name: str,
    members: Sequence[Obj],
    info: jobs.JobInfo | None,
    problems: Sequence[str] = (),
    *,
    grouped: bool = False,
    total: int = 1,
    serving: bool = False,
) -> JobView:
    """The view of one pod workload over ``members`` (oldest first; a single pod: itself)."""
    refs = tuple(_ref(p, pods.role_hash(p) if grouped else "main") for p in members)
    running = [r for r in refs if r.running]
    active = any(not r.gated and not pods.done(r.obj) for r in refs)
    if grouped:
        finished = not serving and len(refs) >= total and all(pods.done(r.obj) for r in refs)
    else:
        finished = bool(refs) and pods.done(refs[0].obj)
    first = members[0].get("metadata") or {}
    present = [r for r in refs if r.live or pods.done(r.obj)]
    ready = len(present) >= (total if grouped else 1) and all(
        pods.done(r.obj) or (r.running and condition_true(r.obj, ("Ready",))) for r in present
    )
    marks = [str((r.obj.get("metadata") or {}).get("annotations", {}).get(ADMISSION_ANNOTATION)) for r in running]
    labels = first.get("labels") or {}
    return JobView(
        integration=POD,
        uid=uid,
        namespace=namespace,
        name=name,
        suspended=not running,
        finished=finished,
        ready=ready,
        active=active,
        admission=next((m for m in marks if m != "None"), None),
        has_annotations=True,
        info=info,
        problems=tuple(problems),
        version=",".join(str((r.obj.get("metadata") or {}).get("resourceVersion")) for r in refs),
        queue_label=labels.get(jobs.QUEUE_LABEL) or None,
        pods=refs,
        object_name=str(first.get("name")),
        object_uid=str(first.get("uid")),
        created=str(first.get("creationTimestamp") or ""),
    )


def single(pod: Obj) -> JobView:
    """A pod that is its own workload (``namespace/<pod>``, pod set ``main``)."""
    meta = pod.get("metadata") or {}
    info: jobs.JobInfo | None = None
    problems: tuple[str, ...] = ()
    try:
        info = jobs.read_job(pod, jobs.POD)
    except errors.Invalid as exc:
        problems = tuple(str(e) for e in exc.errors)
    return view(
        str(meta.get("uid")), str(meta.get("namespace") or "default"), str(meta.get("name")), [pod], info, problems
    )
