"""Elastic jobs' pods: started up to the count their workload is admitted for, never beyond.

Why: an elastic job (``kueue.x-k8s.io/elastic-job: "true"`` on a batch Job or an autoscaling
RayCluster, RayJob or RayService, ``queues.cycle.elastic``) is resized while it runs, so its controller makes pods
whenever its ``parallelism`` (a worker group's ``replicas``) grows, before the quota for them is
admitted. Its pods carry Kueue's ``kueue.x-k8s.io/elastic-job`` scheduling
gate (the webhook adds it to the pod template at creation, as Kueue's Job webhook does); this lifts
it, as Kueue's ElasticJobUngater does, from as many of the oldest gated pods as the admission has
room for: ungated live pods never outnumber the admitted count. A scale-up's pods thus wait, gated,
until the growth is admitted; a scale-down needs nothing here (the Job controller deletes pods).

The enactor calls ``ungate`` for a running elastic job on each of its events (a Job's ``status.active``
counts its pending pods, so a new pod brings an event); the job's pods are listed by the labels its
controller puts on them (its kind's ``PodsOf``: a Job's ``batch.kubernetes.io/controller-uid``,
a Ray job's ``ray.io/cluster``, each pod's pod set from ``ray.io/group``), one list per look.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from admission.controller.workqueue import Retry
from admission.jobs.base import JobView
from admission.jobs.pods import POD
from admission.kube import client as kube_client
from admission.kube.client import Kube, KubeError, Obj
from queues.cycle.elastic import ELASTIC_GATE
from queues.model import Workload
from queues.podsets import pods


def _live(pod: Obj) -> bool:
    return not pods.done(pod) and not pods.deleting(pod)


def to_ungate(items: list[Obj], admitted: Mapping[str, int], pod_set: Callable[[Obj], str]) -> list[Obj]:
    """Which gated pods may start: in each pod set, the oldest, as many as its ``admitted`` count
    leaves room for beside its live pods already ungated (none when they fill it)."""
    out: list[Obj] = []
    for name, count in admitted.items():
        live = [p for p in items if _live(p) and pod_set(p) == name]
        gated = sorted(
            (p for p in live if ELASTIC_GATE in pods.gates(p)),
            key=lambda p: (str((p.get("metadata") or {}).get("creationTimestamp") or ""), str(p["metadata"]["name"])),
        )
        out += gated[: max(0, count - (len(live) - len(gated)))]
    return out


async def ungate(kube: Kube, view: JobView, held: Workload, may_start: Callable[[], bool]) -> bool:
    """Lift the elastic gate from ``view``'s pods up to ``held``'s admitted counts, once
    ``may_start`` says no preempted workload's pods still run in its quota tree (a growth may be
    admitted into quota an eviction just freed: never a GPU double-booked). True: fewer of its
    pods exist than it asks for, so look again soon (a RayCluster's status may not change when
    KubeRay makes them, and nothing else would bring its next event)."""
    found = view.integration.pods_of
    if found is None or view.info is None or view.pod_selector is None:
        return view.info is not None and found is not None  # (no pods to find yet: look again soon)
    admitted = {ps.name: ps.count for ps in held.running_pod_sets}
    path = POD.ref.path(view.namespace)
    try:
        listed = await kube.request("GET", path, query={"labelSelector": view.pod_selector})
    except KubeError as exc:
        raise Retry(f"{view.key}: cannot list its pods to start those admitted ({exc})", after=exc.retry_after) from exc
    items = list(listed.get("items") or [])
    starting = to_ungate(items, admitted, found.pod_set)
    if starting and not may_start():
        return False  # (the victims' pod events bring it back)
    for pod in starting:
        name = str(pod["metadata"]["name"])
        patch = pods.ungate_patch(pod, {}, (), {}, gate=ELASTIC_GATE)
        try:
            await kube.request(
                "PATCH", POD.ref.path(view.namespace, name), body=patch, content_type=kube_client.JSON_PATCH
            )
        except KubeError as exc:
            if exc.status in (404, 409, 422):  # gone, or changed since listed: its event brings us back
                continue
            raise Retry(f"Pod {view.namespace}/{name}: {exc}", after=exc.retry_after) from exc
    made = sum(1 for p in items if not pods.deleting(p))  # (done ones too)
    return made < sum(ps.count for ps in view.info.pod_sets)
