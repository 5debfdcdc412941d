"""CodeFlare's AppWrapper (``workload.codeflare.dev/v1beta2``): ``spec.suspend``; pod sets from its
components (``queues.podsets.appwrappers``), named ``<appwrapper>-<k>`` as Kueue names them.

How it says it is over and whether its pods still run, from the AppWrapper controller's status (as
Kueue reads it):

- finished when ``status.phase`` is ``Succeeded``, or ``Failed`` once its resources are gone (the
  ``ResourcesDeployed`` condition no longer True);
- its pods run while its ``QuotaReserved`` condition is True (the controller clears it once a
  suspended AppWrapper's components are deleted);
- its pods are Ready when its ``PodsReady`` condition is True.

Its components' templates are the AppWrapper controller's to write: the flavors' node labels,
tolerations and Turnstile's pod annotations go into ``spec.components[i].podSetInfos`` (one entry per
pod set of the component), which the controller merges into the objects it creates. They are written
while the AppWrapper is suspended, before it is unsuspended (``Integration.external``); restoring
clears them (Kueue's ``ClearPodSetInfos``).
"""

from __future__ import annotations

from collections.abc import Sequence

from admission.jobs.base import ExternalTemplates, Integration, JobView, PodSetInfo
from admission.jobs.job_fields import condition_true
from admission.kube.client import Obj, ResourceRef
from queues.podsets import appwrappers, layouts
from queues.podsets.jobs import JobInfo


def _active(obj: Obj) -> int:
    return int(condition_true(obj, ("QuotaReserved",)))


def _finished(obj: Obj) -> bool:
    phase = (obj.get("status") or {}).get("phase")
    return phase == "Succeeded" or (phase == "Failed" and not condition_true(obj, ("ResourcesDeployed",)))


def _ready(obj: Obj, info: JobInfo) -> bool:
    return condition_true(obj, ("PodsReady",))


def _components(obj: Obj) -> list[Obj]:
    found = (obj.get("spec") or {}).get("components")
    return [c if isinstance(c, dict) else {} for c in found] if isinstance(found, list) else []


def read_directives(obj: Obj) -> dict[str, tuple[dict[str, str] | None, list[Obj] | None, dict[str, str]]]:
    """What each pod set's ``podSetInfos`` entry says: (nodeSelector, tolerations, annotations)."""
    components = _components(obj)
    out: dict[str, tuple[dict[str, str] | None, list[Obj] | None, dict[str, str]]] = {}
    for name, ps in layouts.appwrapper_pod_sets(obj):
        infos = components[ps.component].get("podSetInfos") if ps.component < len(components) else None
        info = infos[ps.index] if isinstance(infos, list) and ps.index < len(infos) else None
        if isinstance(info, dict):
            out[name] = (info.get("nodeSelector"), info.get("tolerations"), dict(info.get("annotations") or {}))
    return out


def _keep(obj: Obj) -> Obj:
    """Per component: how many pod sets it has, and whether it has podSetInfos now."""
    components = _components(obj)
    shape: list[int] = [0] * len(components)
    for _, ps in layouts.appwrapper_pod_sets(obj):
        shape[ps.component] += 1
    return {"shape": shape, "written": ["podSetInfos" in c for c in components]}


def directive_ops(view: JobView, infos: Sequence[PodSetInfo]) -> list[Obj]:
    """JSON patch operations that make every component's ``podSetInfos`` carry exactly ``infos`` (no
    directives, as when restoring: the entries removed)."""
    if view.info is None or view.carries(infos):
        return []
    kept = view.external or {}
    shape, written = list(kept.get("shape") or []), list(kept.get("written") or [])
    by_name = {i.name: i for i in infos}
    wanted = any(i.node_selector or i.tolerations or i.annotations for i in infos)
    ops: list[Obj] = []
    k = 0
    for c, count in enumerate(shape):
        entries = []
        for _ in range(count):
            info = by_name.get(view.info.pod_sets[k].name) if k < len(view.info.pod_sets) else None
            k += 1
            entry: Obj = {}
            if info is not None and info.node_selector:
                entry["nodeSelector"] = dict(info.node_selector)
            if info is not None and info.tolerations:
                entry["tolerations"] = [dict(t) for t in info.tolerations]
            if info is not None and info.annotations:
                entry["annotations"] = dict(info.annotations)
            entries.append(entry)
        path = f"/spec/components/{c}/podSetInfos"
        if wanted:
            ops.append({"op": "add", "path": path, "value": entries})
        elif c < len(written) and written[c]:
            ops.append({"op": "remove", "path": path})
    return ops


APPWRAPPER = Integration(
    ResourceRef(appwrappers.API_VERSION, appwrappers.KIND, "appwrappers"),
    (),
    _active,
    _finished,
    pods_ready=_ready,
    external=ExternalTemplates(read_directives, _keep, directive_ops),
)
