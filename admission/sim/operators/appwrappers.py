"""The AppWrapper controller (project CodeFlare) in the simulated cluster.

An unsuspended AppWrapper gets its components: each ``spec.components[i].template`` created through the
API server (so admission webhooks see it, as Turnstile's do) as the controller's service account,
owned by the AppWrapper, labelled ``workload.codeflare.dev/appwrapper: <name>`` (on the object and on
every pod template, so its pods carry it too), with its pod sets' ``podSetInfos`` merged into their
templates (``queues.podsets.appwrappers.apply_infos``); the simulated cluster's own operators then run
them (a PyTorchJob's pods, a Deployment's ReplicaSet). Its status follows Kueue's reading:

- ``QuotaReserved`` and ``ResourcesDeployed`` True while its components exist, ``PodsReady`` True once
  as many of its pods run (or have succeeded) as its pod sets count, ``phase`` ``Running``;
- ``Succeeded`` once all of them have succeeded (never, for a component that serves: a Deployment);
- suspended: its components are deleted (their pods with them), ``phase`` ``Suspending`` until its pods
  are gone, then ``Suspended`` with ``QuotaReserved`` False.

Differences from the real controller (docs/simulated-cluster.md): no retries, health checks, warm-up or
grace periods (``Resetting``, ``Failed``), no success TTL (succeeded components are kept), components
named by their template's ``metadata.name`` (else ``<appwrapper>-<i>``).
"""

from __future__ import annotations

import copy
import logging
from typing import TYPE_CHECKING, Any

from admission.sim.operators.kubelet import RUNTIME_ANNOTATION
from admission.sim.operators.replicas import PODS, owner_reference
from admission.sim.operators.statuses import now_text
from admission.sim.server import resources
from admission.sim.server.objects import ApiError, Obj, Resource
from queues.podsets import appwrappers, layouts

if TYPE_CHECKING:
    from admission.sim.operators.replicas import Replicas

log = logging.getLogger(__name__)

APPWRAPPERS = next(r for r in resources.OPERATORS if r.kind == appwrappers.KIND)
USER = {
    "username": "system:serviceaccount:appwrapper-system:appwrapper-controller-manager",
    "groups": ["system:serviceaccounts"],
}
SERVES = {("apps/v1", "Deployment"), ("apps/v1", "StatefulSet")}  # components that never complete


def install(replicas: Replicas) -> None:
    """Run the AppWrapper controller in ``replicas``' reconcile loop (its pods, by their label, wake it)."""
    replicas.register(APPWRAPPERS, lambda obj: _reconcile(replicas, obj), label=appwrappers.LABEL)


def _resource(template: Obj) -> Resource | None:
    return next(
        (r for r in resources.ALL if r.api_version == template.get("apiVersion") and r.kind == template.get("kind")),
        None,
    )


def _component_name(aw: Obj, i: int, template: Obj) -> str:
    return str((template.get("metadata") or {}).get("name") or f"{aw['metadata']['name']}-{i}")


def component(aw: Obj, i: int) -> Obj:
    """Component ``i`` as the controller creates it (see the module docstring)."""
    spec = aw.get("spec") or {}
    raw = spec["components"][i]
    template = copy.deepcopy(raw["template"])
    pod_sets = [ps for _, ps in layouts.appwrapper_pod_sets(aw) if ps.component == i]
    infos = list(raw.get("podSetInfos") or [])
    label = {appwrappers.LABEL: aw["metadata"]["name"]}
    # (the simulation's runtime, on the AppWrapper, is its components' and their pods')
    runtime = {k: v for k, v in (aw["metadata"].get("annotations") or {}).items() if k == RUNTIME_ANNOTATION}
    infos = [
        {
            **(info if isinstance(info, dict) else {}),
            "labels": {**((info or {}).get("labels") or {}), **label},
            "annotations": {**((info or {}).get("annotations") or {}), **runtime},
        }
        for info in (infos + [{}] * (len(pod_sets) - len(infos)))
    ]
    body = appwrappers.apply_infos(template, pod_sets, infos)
    meta = body.setdefault("metadata", {})
    meta["name"] = _component_name(aw, i, template)
    meta["labels"] = {**(meta.get("labels") or {}), **label}
    meta["annotations"] = {**(meta.get("annotations") or {}), **runtime}
    meta["ownerReferences"] = [owner_reference(aw)]
    return body


async def _reconcile(rc: Replicas, aw: Obj) -> None:
    ns, name = aw["metadata"]["namespace"], aw["metadata"]["name"]
    spec = aw.get("spec") or {}
    raw = spec.get("components") or []
    pod_sets = layouts.appwrapper_pod_sets(aw)
    if not pod_sets:
        return  # (the webhook refuses an AppWrapper that cannot be read)
    existing: list[tuple[int, Resource, Obj | None, Obj]] = []  # (component index, its kind, it as it is, its entry)
    for i, comp in enumerate(raw):
        res = _resource(comp.get("template") or {})
        if res is None:
            continue
        try:
            found: Obj | None = rc.store.get(res, ns, _component_name(aw, i, comp["template"]))
        except ApiError:
            found = None
        existing.append((i, res, found, comp))
    pods = [p for p in rc.store.list(PODS, ns)[0] if (p["metadata"].get("labels") or {}).get(appwrappers.LABEL) == name]
    live = [p for p in pods if (p.get("status") or {}).get("phase") in ("Pending", "Running")]
    status: dict[str, Any] = dict(aw.get("status") or {})
    if spec.get("suspend"):
        for _, res, found, _ in existing:
            if found is not None and not found["metadata"].get("deletionTimestamp"):
                rc.store.delete(res, ns, found["metadata"]["name"])
        gone = not live and all(found is None for _, _, found, _ in existing)
        phase = "Suspended" if gone else "Suspending"
        _set(status, phase, quota=not gone, deployed=not gone, ready=False)
    else:
        for i, res, found, _ in existing:
            if found is None and status.get("phase") not in ("Succeeded",):
                try:
                    await rc.api.create(res, ns, component(aw, i), user=USER)
                except ApiError as exc:
                    if exc.code != 409:
                        raise
        expected = sum(ps.count for _, ps in pod_sets)
        running = sum(
            1
            for p in live
            if (p.get("status") or {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
        )
        done = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Succeeded")
        serves = any((c["template"].get("apiVersion"), c["template"].get("kind")) in SERVES for _, _, _, c in existing)
        succeeded = bool(expected) and done >= expected and not serves
        _set(
            status, "Succeeded" if succeeded else "Running", quota=True, deployed=True, ready=running + done >= expected
        )
    if status != (aw.get("status") or {}):
        aw["status"] = status
        rc.store.replace(APPWRAPPERS, ns, name, aw, subresource="status")


def _set(status: dict[str, Any], phase: str, *, quota: bool, deployed: bool, ready: bool) -> None:
    status["phase"] = phase
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    for kind, value in (("QuotaReserved", quota), ("ResourcesDeployed", deployed), ("PodsReady", ready)):
        text = "True" if value else "False"
        if (conditions.get(kind) or {}).get("status") != text:
            conditions[kind] = {"type": kind, "status": text, "reason": phase, "message": "",
                                "lastTransitionTime": now_text()}  # fmt: skip
    status["conditions"] = list(conditions.values())
