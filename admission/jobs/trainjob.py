"""Kubeflow Trainer's TrainJob (``trainer.kubeflow.org/v1alpha1``): ``spec.suspend``; finished when
Complete or Failed; active and Ready child Jobs per replicated job in ``status.jobsStatus``.

Its pod sets are read through the training runtime it names (``queues.podsets.trainjobs``; the controller
keeps the runtimes, ``admission.controller.watch.runtimes``). Its pod templates live in that runtime, not
in the TrainJob, so the flavors' node labels, tolerations and pod annotations are written where
Trainer lets another manager write them: Turnstile's entry of ``spec.runtimePatches`` (manager
``kueue.x-k8s.io/manager``, as Kueue's), one patch per replicated job; tolerations are written whole
(Trainer replaces a template's list with a patch's), node selectors merge. Trainer accepts runtime
patches only while the TrainJob is suspended, so they are written before it is unsuspended
(``Integration.directives_first``). Restoring empties Turnstile's entry.
"""

from __future__ import annotations

from collections.abc import Sequence

from admission.jobs.base import ExternalTemplates, Integration, JobView, PodSetInfo
from admission.kube.client import Obj, ResourceRef
from queues.podsets import jobs, trainjobs


def _statuses(obj: Obj) -> list[Obj]:
    return [s for s in (obj.get("status") or {}).get("jobsStatus") or [] if isinstance(s, dict)]


def _active(obj: Obj) -> int:
    return sum(int(s.get("active") or 0) for s in _statuses(obj))


def _ready(obj: Obj, info: jobs.JobInfo) -> bool:
    """Kueue's reading: every replicated job's Ready plus succeeded child Jobs reach its replicas
    (here: each pod set has a status with as many Ready or succeeded pods' Jobs as it has Jobs)."""
    by_name = {str(s.get("name")): s for s in _statuses(obj)}
    for ps in info.pod_sets:
        s = by_name.get(ps.name)
        if s is None or int(s.get("ready") or 0) + int(s.get("succeeded") or 0) < int(s.get("replicas") or 1):
            return False
    return True


def read_directives(obj: Obj) -> dict[str, tuple[dict[str, str] | None, list[Obj] | None, dict[str, str]]]:
    """What Turnstile's runtime patch sets, per pod set: (nodeSelector, tolerations, pod annotations)."""
    return {
        name: (d["nodeSelector"], d["tolerations"], dict(d["annotations"] or {}))
        for name, d in trainjobs.patched_directives(obj).items()
    }


def _keep(obj: Obj) -> Obj:
    """The runtime patches as they are (the writer replaces Turnstile's entry, or adds one)."""
    patches = (obj.get("spec") or {}).get("runtimePatches")
    return {"runtimePatches": patches if isinstance(patches, list) else None}


def directive_ops(view: JobView, infos: Sequence[PodSetInfo]) -> list[Obj]:
    """JSON patch operations that make Turnstile's runtime patch carry exactly ``infos`` (no
    directives, as when restoring: an empty patch)."""
    wanted = {
        i.name: (dict(i.node_selector), [dict(t) for t in i.tolerations], dict(i.annotations))
        for i in infos
        if i.node_selector or i.tolerations or i.annotations
    }
    patches = (view.external or {}).get("runtimePatches")
    own = trainjobs.own_patch({"spec": {"runtimePatches": patches or []}})
    if view.carries(infos) and (own is not None or not wanted):
        return []
    entry = trainjobs.patch_entry(wanted)
    if own is not None:
        return [{"op": "replace", "path": f"/spec/runtimePatches/{own[0]}", "value": entry}]
    if patches is None:
        return [{"op": "add", "path": "/spec/runtimePatches", "value": [entry]}]
    return [{"op": "add", "path": "/spec/runtimePatches/-", "value": entry}]


TRAINJOB = Integration(
    ResourceRef(trainjobs.API_VERSION, "TrainJob", "trainjobs"),
    ("Complete", "Failed"),
    _active,
    pods_ready=_ready,
    external=ExternalTemplates(read_directives, _keep, directive_ops),
)
ALL = (TRAINJOB,)
