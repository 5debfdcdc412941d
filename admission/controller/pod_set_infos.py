"""What each pod set of a workload's job runs with: its own directives (what a restore puts back),
or those plus its flavors', its admission checks' annotations and, placed by topology, what pins
its pods (what a start writes); and the pods each partially admitted pod set runs. The enactor
writes these; the admission checks read them for their ProvisioningRequests.
"""

from __future__ import annotations

import dataclasses

from admission.controller.term import Term
from admission.jobs.base import JobView, PodSetInfo
from queues.cycle import provisioning
from queues.model import Admission, Workload
from queues.placement.pinning import PODSET_ANNOTATION, WORKLOAD_ANNOTATION


def run_infos(term: Term, wl: Workload, admission: Admission) -> list[PodSetInfo]:
    """Each pod set's own directives plus those of the flavors it was admitted to, the
    annotations that make its pods consume the capacity its ProvisioningRequests booked, the
    workload's name (``turnstile.dev/workload``), and, for a pod set placed by topology, the
    gate and pod set annotation that get each pod pinned to its node
    (``admission.controller.features.pinning``)."""
    flavors = term.flavors()
    notes = provisioning.pod_annotations(term.scheduler.config, wl)
    out = []
    for ps in wl.pod_sets:
        selector = dict(ps.constraints.node_selector)
        tolerations = [t.to_dict() for t in ps.tolerations]
        for name in sorted(set(admission.flavors.get(ps.name, {}).values())):
            flavor = flavors.get(name)
            if flavor is None:
                continue
            selector.update(flavor.node_labels)
            tolerations.extend(t.to_dict() for t in flavor.tolerations if t.to_dict() not in tolerations)
        # every pod names its workload (idle reclaim joins GPU metrics to workloads by it);
        # a placed pod set's also its pod set, which pinning reads
        annotations = {**notes.get(ps.name, {}), WORKLOAD_ANNOTATION: wl.key}
        placed = ps.name in admission.placement
        if placed:
            annotations[PODSET_ANNOTATION] = ps.name
        out.append(PodSetInfo(ps.name, selector, tolerations, annotations, topology_gate=placed))
    return out


def unplaced(info: PodSetInfo) -> PodSetInfo:
    """``info`` without what pins its pods to nodes."""
    notes = {k: v for k, v in info.annotations.items() if k != PODSET_ANNOTATION}
    return dataclasses.replace(info, annotations=notes, topology_gate=False)


def pod_counts(wl: Workload, admission: Admission | None) -> dict[str, int]:
    """The pods each partially admittable pod set runs: as admitted, or (no admission) its own count
    to restore. A pod set that is never admitted partially keeps whatever its job says."""
    granted = admission.counts if admission is not None else {}
    return {ps.name: granted.get(ps.name, ps.count) for ps in wl.pod_sets if ps.min_count is not None}


def own_infos(wl: Workload, view: JobView | None = None) -> list[PodSetInfo]:
    """Each pod set's own directives, which a restore puts back; none for a kind whose templates
    are elsewhere (``Integration.external``): there a restore writes nothing of its own."""
    if view is not None and view.integration.external is not None:
        return [PodSetInfo(ps.name, {}, []) for ps in wl.pod_sets]
    return [
        PodSetInfo(ps.name, dict(ps.constraints.node_selector), [t.to_dict() for t in ps.tolerations])
        for ps in wl.pod_sets
    ]
