"""Plain Pods as workloads: Kueue's pod integration (KEP-976), over pods as plain dicts.

A pod cannot be suspended, so a queued pod is *held* by the scheduling gate ``GATE`` (added by
the webhook when it is created) and *started* by removing it, with its flavors' node selector
and tolerations added in the same write (the API server lets a gated pod's scheduling
directives be tightened, never loosened). An evicted pod is deleted: whoever made it (a
ReplicaSet, a StatefulSet) makes another, which queues afresh.

One pod is one workload (``namespace/<pod name>``, pod set ``main``), unless it carries the
group label ``GROUP_LABEL``: then every pod of that name in the namespace, up to the
``TOTAL_ANNOTATION`` count, is one workload (``namespace/<group>``) admitted all or nothing,
with one pod set per *role* (pods of the same shape; named by ``role_hash``, as Kueue's). A group
is queued once all its pods exist, or at its first pod with ``FAST_ADMISSION`` (a StatefulSet
creates its pods one by one). A serving group (``SERVING``) is never finished by its pods ending:
its owner replaces them.

Which pods are queued at all: those labelled with a LocalQueue, and in a managed namespace those
that ask for a managed resource (``manageJobsWithoutQueueName``, see ``queues.managed``); never a
pod whose controller is an integrated job (the job is queued, not its pods).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from queues import errors
from queues.errors import FieldError
from queues.podsets import jobs, pod_resources

GATE = "kueue.x-k8s.io/admission"  # the scheduling gate that holds a queued pod
MANAGED_LABEL = "kueue.x-k8s.io/managed"  # on every pod Turnstile holds (the controller watches these)
GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
TOTAL_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"
FAST_ADMISSION = "kueue.x-k8s.io/pod-group-fast-admission"  # queue the group at its first pod
SERVING = "kueue.x-k8s.io/pod-group-serving"  # pods are replaced, never finish the group
PARENT_ANNOTATION = "kueue.x-k8s.io/pod-suspending-parent"  # the serving kind whose template queued the pod
# On the pods of a serving workload (set by the webhook from the Deployment/StatefulSet): which
# service they serve, and the replicas it keeps against batch work of equal priority (see ``protected``)
SERVICE_LABEL = "turnstile.dev/service"
MIN_REPLICAS_LABEL = "turnstile.dev/min-replicas"
MIN_REPLICAS_ANNOTATION = "turnstile.dev/min-replicas"  # on the Deployment/StatefulSet, where users write it
ROLE_HASH_LENGTH = 8
ROLE_ANNOTATION = "kueue.x-k8s.io/role-hash"  # the pod's role, recorded by the webhook at creation
DONE_PHASES = ("Succeeded", "Failed")


def labels_of(pod: Mapping[str, Any]) -> Mapping[str, str]:
    return ((pod.get("metadata") or {}).get("labels")) or {}


def annotations_of(pod: Mapping[str, Any]) -> Mapping[str, str]:
    return ((pod.get("metadata") or {}).get("annotations")) or {}


def gates(pod: Mapping[str, Any]) -> list[str]:
    return [
        str(g.get("name")) for g in ((pod.get("spec") or {}).get("schedulingGates") or []) if isinstance(g, Mapping)
    ]


def gated(pod: Mapping[str, Any]) -> bool:
    return GATE in gates(pod)


def done(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in DONE_PHASES


def deleting(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def group_name(pod: Mapping[str, Any]) -> str | None:
    value = labels_of(pod).get(GROUP_LABEL)
    return value if isinstance(value, str) and value else None


def total_count(pod: Mapping[str, Any]) -> int:
    """The group's size from the pod's annotation; ``errors.Invalid`` naming the field when absent or bad."""
    raw = annotations_of(pod).get(TOTAL_ANNOTATION)
    where = f"metadata.annotations[{TOTAL_ANNOTATION}]"
    if raw is None:
        raise errors.Invalid([FieldError(where, f"required with label {GROUP_LABEL}: the number of pods in the group")])
    try:
        value = int(str(raw))
    except ValueError:
        value = 0
    if value < 1:
        raise errors.Invalid([FieldError(where, f"must be a whole number >= 1, not {raw!r}")])
    return value


def role_hash(pod: Mapping[str, Any]) -> str:
    """The pod's role in its group: a hash of what makes pods interchangeable for the scheduler (the
    pod's effective requests, node selector, affinity, tolerations, priority), as Kueue's role hash.
    The webhook records it on the pod at creation (``ROLE_ANNOTATION``), so the flavor's selector
    added when the pod is started does not change its role."""
    recorded = annotations_of(pod).get(ROLE_ANNOTATION)
    if isinstance(recorded, str) and recorded:
        return recorded
    spec = pod.get("spec") or {}
    problems: list[FieldError] = []
    requests = pod_resources.pod_requests(spec, "spec", problems) if isinstance(spec, Mapping) else {}
    shape = {
        # (zero requests left out: the hash recorded on pods by earlier versions stays the same)
        "requests": {r: v for r, v in requests.items() if v},
        "nodeSelector": spec.get("nodeSelector") or {},
        "affinity": spec.get("affinity") or {},
        "tolerations": spec.get("tolerations") or [],
        "priorityClassName": spec.get("priorityClassName") or "",
    }
    digest = hashlib.sha256(json.dumps(shape, sort_keys=True, default=str).encode()).hexdigest()
    return digest[:ROLE_HASH_LENGTH]


@dataclass(frozen=True, slots=True)
class Group:
    """The live pods of one group, as the controller or a scenario sees them."""

    namespace: str
    name: str
    pods: tuple[Mapping[str, Any], ...]  # not deleted ones first: ordering is the caller's

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def serving(self) -> bool:
        return any(annotations_of(p).get(SERVING) == "true" for p in self.pods)

    @property
    def fast(self) -> bool:
        return any(annotations_of(p).get(FAST_ADMISSION) == "true" for p in self.pods)


def group_problems(group: Group) -> list[FieldError]:
    """What makes a group impossible to queue: a total count missing or disagreeing between its
    pods, more pods than the count, pods naming different LocalQueues."""
    problems: list[FieldError] = []
    totals: dict[int, list[str]] = {}
    for pod in group.pods:
        name = str((pod.get("metadata") or {}).get("name"))
        try:
            totals.setdefault(total_count(pod), []).append(name)
        except errors.Invalid as exc:
            problems.extend(FieldError(f"pod {name}: {e.path}", e.message) for e in exc.errors)
    if len(totals) > 1:
        said = "; ".join(f"{t} on {', '.join(sorted(names)[:3])}" for t, names in sorted(totals.items()))
        problems.append(
            FieldError(
                f"metadata.annotations[{TOTAL_ANNOTATION}]",
                f"pods of group {group.name} disagree on the group's size ({said}); give every pod the same count",
            )
        )
    live = [p for p in group.pods if not done(p) or group.serving]
    if len(totals) == 1:
        (total,) = totals
        if len(live) > total:
            problems.append(
                FieldError(
                    f"metadata.labels[{GROUP_LABEL}]",
                    f"group {group.name} has {len(live)} pods but {TOTAL_ANNOTATION} says {total}",
                )
            )
    queues = {labels_of(p).get(jobs.QUEUE_LABEL) for p in group.pods}
    if len(queues) > 1:
        problems.append(
            FieldError(
                f"metadata.labels[{jobs.QUEUE_LABEL}]",
                f"pods of group {group.name} name different LocalQueues: {', '.join(sorted(str(q) for q in queues))}",
            )
        )
    return problems


def complete(group: Group) -> bool:
    """All of the group's pods exist (or its first does, with fast admission): it may be queued."""
    try:
        total = total_count(group.pods[0])
    except (errors.Invalid, IndexError):
        return False
    return group.fast or len(group.pods) >= total


def group_info(group: Group) -> jobs.JobInfo:
    """The group as one job: a pod set per role, its pods counted (the missing pods of a
    fast-admitted group counted in its first pod's role); ``errors.Invalid`` when it cannot be."""
    problems = group_problems(group)
    if problems:
        raise errors.Invalid(problems)
    total = total_count(group.pods[0])
    roles: dict[str, list[Mapping[str, Any]]] = {}
    for pod in group.pods:
        roles.setdefault(role_hash(pod), []).append(pod)
    pod_sets: list[jobs.PodSet] = []
    for index, (role, members) in enumerate(roles.items()):
        info = jobs.read_job(members[0], jobs.POD)
        count = len(members) + (total - len(group.pods) if index == 0 else 0)
        pod_sets.extend(dataclasses.replace(ps, name=role, count=count) for ps in info.pod_sets)
    first = group.pods[0]
    meta = first.get("metadata") or {}
    return jobs.JobInfo(
        api_version="v1",
        kind="Pod",
        namespace=group.namespace,
        name=group.name,
        labels=dict(meta.get("labels") or {}),
        annotations=dict(meta.get("annotations") or {}),
        pod_sets=tuple(pod_sets),
        priority_class_name=jobs.read_job(first, jobs.POD).priority_class_name,
    )


def ungate_patch(
    pod: Mapping[str, Any],
    node_selector: Mapping[str, str],
    tolerations: Sequence[Mapping[str, Any]],
    notes: Mapping[str, str],
    gate: str = GATE,
) -> list[dict[str, Any]]:
    """The JSON patch that starts a held pod: its flavors' node labels and tolerations added (a
    label the pod already selects on is left as it is), ``notes`` added to its annotations, and
    ``gate`` removed, guarded by a ``test`` so a second start of the same pod fails cleanly."""
    spec = pod.get("spec") or {}
    ops: list[dict[str, Any]] = []
    index = gates(pod).index(gate)
    ops.append({"op": "test", "path": f"/spec/schedulingGates/{index}/name", "value": gate})
    ops.append({"op": "remove", "path": f"/spec/schedulingGates/{index}"})
    current = spec.get("nodeSelector")
    added = {k: v for k, v in node_selector.items() if not isinstance(current, Mapping) or k not in current}
    if added and not isinstance(current, Mapping):
        ops.append({"op": "add", "path": "/spec/nodeSelector", "value": dict(added)})
    else:
        ops.extend(
            {"op": "add", "path": f"/spec/nodeSelector/{jobs.pointer_token(k)}", "value": v} for k, v in added.items()
        )
    have = [dict(t) for t in spec.get("tolerations") or [] if isinstance(t, Mapping)]
    new = [dict(t) for t in tolerations if dict(t) not in have]
    if new and spec.get("tolerations") is None:
        ops.append({"op": "add", "path": "/spec/tolerations", "value": new})
    else:
        ops.extend({"op": "add", "path": "/spec/tolerations/-", "value": t} for t in new)
    meta = pod.get("metadata") or {}
    if notes and not isinstance(meta.get("annotations"), Mapping):
        ops.append({"op": "add", "path": "/metadata/annotations", "value": dict(notes)})
    else:
        ops.extend(
            {"op": "add", "path": f"/metadata/annotations/{jobs.pointer_token(k)}", "value": v}
            for k, v in notes.items()
        )
    return ops


def service_of(labels: Mapping[str, str]) -> tuple[str, int] | None:
    """The service a workload's pods serve and its minimum replicas (default 1), or None for batch work."""
    service = labels.get(SERVICE_LABEL)
    if not service:
        return None
    try:
        minimum = int(labels.get(MIN_REPLICAS_LABEL, "1"))
    except ValueError:
        minimum = 1
    return service, max(0, minimum)


def min_replicas_problem(value: Any) -> str | None:
    """What is wrong with a ``turnstile.dev/min-replicas`` annotation, or None."""
    try:
        ok = int(str(value)) >= 0
    except ValueError:
        ok = False
    return None if ok else f"must be a whole number >= 0, not {value!r}"


def label_name(kind: str, name: str) -> str:
    """``<kind>-<name>`` as a label value (at most 63 characters: a longer one is cut and hashed):
    a StatefulSet's or LeaderWorkerSet group's pod group, the service a serving object's pods serve."""
    value = f"{kind.lower()}-{name}"
    if len(value) <= 63:
        return value
    return f"{value[:54]}-{hashlib.sha256(value.encode()).hexdigest()[:8]}"


def service_labels(kind: str, name: str, annotations: Mapping[str, Any]) -> dict[str, str]:
    """What the webhook puts on a serving object's pods for the serving rule: the service they serve
    and, when the object's annotation sets it (and is valid), its minimum replicas."""
    out = {SERVICE_LABEL: label_name(kind, name)}
    minimum = annotations.get(MIN_REPLICAS_ANNOTATION)
    if minimum is not None and min_replicas_problem(minimum) is None:
        out[MIN_REPLICAS_LABEL] = str(int(str(minimum)))
    return out
