"""What the webhook answers for plain Pods and for the serving kinds that make them.

**Pods** (``mutate_pod`` on CREATE): a pod naming a LocalQueue (or in a namespace with a ``default``
one), or one without a queue that the policy holds (a managed namespace, a managed resource), gets
the scheduling gate ``kueue.x-k8s.io/admission`` and the label ``kueue.x-k8s.io/managed=true`` (the
controller watches those). A pod whose controller is an integrated job is left alone: the job is
queued, not its pods. ``validate_pod``: a LocalQueue or WorkloadPriorityClass that does not exist
(as for jobs), a group's total count that is not a number or disagrees with the pods of the group
already created, Turnstile's gate added by hand to a pod it does not hold, and the gate removed by
anyone but Turnstile (which marks the pods it starts with ``turnstile.dev/admission``): refused,
naming the field and the fix.

**Deployment, StatefulSet and LeaderWorkerSet** (``mutate_parent`` on CREATE and UPDATE), as
Kueue's webhooks: the queue label is copied into the pod templates, with
``kueue.x-k8s.io/pod-suspending-parent``; a StatefulSet's pods form one group
(``statefulset-<name>``, total count = replicas, fast admission, serving), so it is admitted all or
nothing and never finishes by its pods; a LeaderWorkerSet's pods are grouped per replica (a leader
and its workers, ``leaderworkerset-<name>-<index>``, total count its ``size``): one workload per
group. The pods are labelled with the service they serve (``turnstile.dev/service``) and its
``turnstile.dev/min-replicas`` (from the parent's annotation): batch work of equal priority does not
preempt a service below it (``queues.cycle.preemption``). A KServe InferenceService needs nothing of its
own: its predictor Deployment carries its labels. ``validate_parent``: a queued StatefulSet scales
only to and from 0 (Kueue's rule: a group's size is fixed while it runs); the queue of a running
serving object cannot change.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping
from typing import Any

from admission.jobs.job_fields import ADMISSION_ANNOTATION
from admission.jobs.pods import POD
from admission.policy import Policy
from admission.webhook import review
from admission.webhook.review import Answer, Obj
from queues import errors
from queues.model import Config
from queues.podsets import appwrappers, jobs, pods, serving, sparkapps

PARENTS = {"Deployment": "deployment", "StatefulSet": "statefulset", "LeaderWorkerSet": "leaderworkerset"}
LWS_GROUP = "leaderworkerset.x-k8s.io"
# labels and annotation the LeaderWorkerSet controller puts on its pods (one group of pods per index)
LWS_NAME, LWS_GROUP_INDEX, LWS_SIZE = (
    "leaderworkerset.sigs.k8s.io/name",
    "leaderworkerset.sigs.k8s.io/group-index",
    "leaderworkerset.sigs.k8s.io/size",
)
# namespace, group -> the total counts its existing pods carry (the controller's pod memory)
GroupTotals = Callable[[str, str], set[int]]


def kind_of(request_kind: Any, obj: Obj) -> str | None:
    """``Pod``, ``Deployment``, ``StatefulSet`` or None for the object under review."""
    if isinstance(request_kind, Mapping) and request_kind.get("kind"):
        group, kind = str(request_kind.get("group") or ""), str(request_kind["kind"])
    else:
        group, kind = str(obj.get("apiVersion") or "").rpartition("/")[0], str(obj.get("kind"))
    if (group, kind) in (("", "Pod"), (LWS_GROUP, "LeaderWorkerSet")) or (group == "apps" and kind in PARENTS):
        return kind
    return None


def owned_by_job(obj: Obj, owners: Container[tuple[str, str]] = jobs.KINDS) -> bool:
    """The pod's (or Deployment's, StatefulSet's) controller is a job kind Turnstile queues (``owners``:
    the enabled integrations; a Job: a JobSet's pods), or it is a SparkApplication's (whose executors
    are owned by its driver pod, and carry its labels) or an AppWrapper's (labelled so by the
    AppWrapper controller, whatever made it), where those kinds are queued: its parent's workload
    holds it."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    if isinstance(labels, Mapping):
        if sparkapps.is_app_pod(labels) and (sparkapps.API_VERSION, "SparkApplication") in owners:
            return True
        if appwrappers.LABEL in labels and (appwrappers.API_VERSION, appwrappers.KIND) in owners:
            return True
    return jobs.owned_by_parent(obj.get("metadata") or {}, owners)


def _name(obj: Obj, namespace: str, kind: str) -> str:
    meta = obj.get("metadata") or {}
    return f"{kind} {namespace}/{meta.get('name') or meta.get('generateName') or ''}"


def mutate_pod(pod: Obj, namespace: str, config: Config, policy: Policy) -> Answer:
    answer = Answer()
    if owned_by_job(pod, policy.owners):
        return answer
    queue, add = review.queue_labels(pod, namespace, config)
    if queue is None:
        held = policy.hold_object(config, namespace, pod, jobs.POD, _name(pod, namespace, "Pod"))
        if held is None:
            return answer
        answer.warnings.append(held)
    add[pods.MANAGED_LABEL] = "true"
    notes: dict[str, str] = {}
    labels = (pod.get("metadata") or {}).get("labels") or {}
    if LWS_NAME in labels and LWS_GROUP_INDEX in labels and pods.group_name(pod) is None:
        # a LeaderWorkerSet's group of pods (a leader and its workers) is one workload, as in Kueue
        add[pods.GROUP_LABEL] = label_name("LeaderWorkerSet", f"{labels[LWS_NAME]}-{labels[LWS_GROUP_INDEX]}")
        size = ((pod.get("metadata") or {}).get("annotations") or {}).get(LWS_SIZE, "1")
        notes.update({pods.TOTAL_ANNOTATION: str(size), pods.SERVING: "true"})
    answer.patch.extend(review.add_map_entries(pod, "/metadata/labels", add))
    if pods.GROUP_LABEL in add or pods.group_name(pod) is not None:  # its role, before starting adds a selector
        notes[pods.ROLE_ANNOTATION] = pods.role_hash(pod)
    answer.patch.extend(review.add_map_entries(pod, "/metadata/annotations", notes))
    if not pods.gated(pod):
        spec = pod.get("spec") or {}
        if spec.get("schedulingGates"):
            answer.patch.append({"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": pods.GATE}})
        else:
            answer.patch.append({"op": "add", "path": "/spec/schedulingGates", "value": [{"name": pods.GATE}]})
    return answer


def validate_pod(
    operation: str,
    pod: Obj,
    old: Obj | None,
    namespace: str,
    config: Config,
    policy: Policy,
    group_totals: GroupTotals = lambda _ns, _group: set(),
) -> Answer:
    if owned_by_job(pod, policy.owners) or operation not in ("CREATE", "UPDATE"):
        return Answer()
    name = _name(pod, namespace, "Pod")
    labels = (pod.get("metadata") or {}).get("labels") or {}
    ours = labels.get(pods.MANAGED_LABEL) == "true"
    problems: list[str] = []
    if operation == "CREATE" and pods.gated(pod) and not ours:
        problems.append(
            f"spec.schedulingGates: {pods.GATE} is Turnstile's gate, removed only when Turnstile admits the pod; "
            f"a pod it does not queue would never be scheduled: add label {jobs.QUEUE_LABEL} or remove the gate"
        )
    if operation == "UPDATE" and old is not None and pods.gated(old) and not pods.gated(pod):
        notes = (pod.get("metadata") or {}).get("annotations") or {}
        if ADMISSION_ANNOTATION not in notes:
            queue = labels.get(jobs.QUEUE_LABEL) or "none"
            problems.append(
                f"spec.schedulingGates: {pods.GATE} is removed by Turnstile when the pod is admitted (LocalQueue "
                f"{queue}); removing it by hand would run the pod outside quota: wait for admission "
                "(kubectl get workloads) or delete the pod"
            )
    group = pods.group_name(pod)
    if group is not None and operation == "CREATE":
        try:
            total = pods.total_count(pod)
        except errors.Invalid as exc:
            problems.extend(str(e) for e in exc.errors)
        else:
            others = group_totals(namespace, group) - {total}
            if others:
                problems.append(
                    f"metadata.annotations[{pods.TOTAL_ANNOTATION}]: {total} disagrees with the pods of group "
                    f"{group} already created ({', '.join(str(t) for t in sorted(others))}); give every pod of the "
                    "group the same count"
                )
    if problems:
        return Answer(allowed=False, message=f"{name}: " + "; ".join(problems))
    if not ours and labels.get(jobs.QUEUE_LABEL) is None:
        return Answer()
    return review.validate(operation, pod, old, namespace, config, POD, policy=policy)


label_name = pods.label_name


def mutate_parent(kind: str, obj: Obj, namespace: str, config: Config, policy: Policy) -> Answer:
    answer = Answer()
    if owned_by_job(obj, policy.owners):
        return answer  # (an AppWrapper's component)
    queue, add = review.queue_labels(obj, namespace, config)
    templates = _templates(kind, obj)
    if not templates:
        return answer  # the API server (or the operator's schema) refuses it
    template = templates[0][1]
    if queue is None:
        pod = {"metadata": {"namespace": namespace, "name": "pod"}, "spec": template.get("spec") or {}}
        held = policy.hold_object(config, namespace, pod, jobs.POD, f"each pod of {_name(obj, namespace, kind)}")
        if held is not None:
            answer.warnings.append(held)
        return answer
    answer.patch.extend(review.add_map_entries(obj, "/metadata/labels", add))
    labels = {jobs.QUEUE_LABEL: queue}
    priority = add.get(jobs.PRIORITY_LABEL) or ((obj.get("metadata") or {}).get("labels") or {}).get(
        jobs.PRIORITY_LABEL
    )
    if priority:
        labels[jobs.PRIORITY_LABEL] = priority
    name = str((obj.get("metadata") or {}).get("name"))
    labels.update(pods.service_labels(kind, name, (obj.get("metadata") or {}).get("annotations") or {}))
    notes = {pods.PARENT_ANNOTATION: PARENTS[kind]}
    if kind == "StatefulSet":
        labels[pods.GROUP_LABEL] = label_name(kind, name)
        notes.update(
            {pods.TOTAL_ANNOTATION: str(serving.replicas(obj)), pods.FAST_ADMISSION: "true", pods.SERVING: "true"}
        )
    for pointer, tmpl in templates:
        meta = tmpl.get("metadata")
        if not isinstance(meta, dict):
            answer.patch.append(
                {"op": "add", "path": f"{pointer}/metadata", "value": {"labels": labels, "annotations": notes}}
            )
            continue
        have_labels, have_notes = meta.get("labels") or {}, meta.get("annotations") or {}
        answer.patch.extend(
            review.add_map_entries(
                obj, f"{pointer}/metadata/labels", {k: v for k, v in labels.items() if have_labels.get(k) != v}
            )
        )
        answer.patch.extend(
            review.add_map_entries(
                obj, f"{pointer}/metadata/annotations", {k: v for k, v in notes.items() if have_notes.get(k) != v}
            )
        )
    return answer


def _templates(kind: str, obj: Obj) -> list[tuple[str, dict[str, Any]]]:
    """(JSON pointer, pod template) of each pod template of a serving object."""
    spec = obj.get("spec") or {}
    if kind != "LeaderWorkerSet":
        template = spec.get("template")
        return [("/spec/template", template)] if isinstance(template, dict) else []
    lwt = spec.get("leaderWorkerTemplate") or {}
    return [
        (f"/spec/leaderWorkerTemplate/{key}", lwt[key])
        for key in ("leaderTemplate", "workerTemplate")
        if isinstance(lwt.get(key), dict)
    ]


def validate_parent(
    operation: str, kind: str, obj: Obj, old: Obj | None, namespace: str, config: Config, policy: Policy
) -> Answer:
    name = _name(obj, namespace, kind)
    queue = ((obj.get("metadata") or {}).get("labels") or {}).get(jobs.QUEUE_LABEL)
    old_queue = ((old or {}).get("metadata") or {}).get("labels", {}).get(jobs.QUEUE_LABEL) if old else None
    problems: list[str] = []
    minimum = ((obj.get("metadata") or {}).get("annotations") or {}).get(pods.MIN_REPLICAS_ANNOTATION)
    if minimum is not None and (problem := pods.min_replicas_problem(minimum)):
        problems.append(f"metadata.annotations[{pods.MIN_REPLICAS_ANNOTATION}]: {problem}")
    running = old is not None and (
        kind == "StatefulSet" or int((old.get("status") or {}).get("readyReplicas") or 0) > 0
    )
    if operation == "UPDATE" and running and queue != old_queue:
        problems.append(
            f"metadata.labels[{jobs.QUEUE_LABEL}]: cannot change from {old_queue!r} to {queue!r} while its pods "
            f"run; scale it to 0 first"
        )
    if operation == "UPDATE" and old is not None and kind == "StatefulSet" and queue is not None:
        before, after = serving.replicas(old), serving.replicas(obj)
        if before != after and before and after:
            problems.append(
                f"spec.replicas: a queued StatefulSet is one pod group, admitted whole: it scales only to and from 0 "
                f"(as Kueue); scale it to 0, then to {after}"
            )
    if problems:
        return Answer(allowed=False, message=f"{name}: " + "; ".join(problems))
    if queue is None:
        return Answer()
    # the queue and priority labels as for any job; the pod template as a pod would be read
    pod = {
        "metadata": {**(obj.get("metadata") or {}), "namespace": namespace},
        "spec": (next(iter(_templates(kind, obj)), ("", {}))[1]).get("spec") or {},
    }
    answer = review.validate(operation, pod, None, namespace, config, POD, policy=policy)
    if not answer.allowed:
        answer.message = answer.message.replace(_name(pod, namespace, "Pod"), name, 1)
    return answer
