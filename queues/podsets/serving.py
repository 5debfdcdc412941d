"""Serving objects in a scenario: Deployments, StatefulSets, LeaderWorkerSets and KServe InferenceServices.

Pure functions shared by the scenario reader and the simulated cluster, so both engines see the
same workloads the webhook and the operators make in a real cluster (docs/pods.md):

- a **Deployment**: its replicas are pod workloads ``<name>-<k>`` (``JobEntry.replicas``);
- a **KServe InferenceService** (raw deployment mode): the same, for its predictor Deployment
  ``<name>-predictor`` (``predictor`` builds it, as the simulated KServe controller does);
- a **StatefulSet**: one serving pod group ``statefulset-<name>`` of ``replicas`` pods;
- a **LeaderWorkerSet**: one serving pod group ``leaderworkerset-<name>-<i>`` per replica, of
  ``size`` pods (its leader and workers).

Serving workloads run until stopped (no ``runtime``). An evicted group is made again by its owner
under the same name (``JobEntry.regroups``): it waits in its queue again, as an evicted job does.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from typing import Any

from queues import errors
from queues.errors import FieldError
from queues.podsets import jobs, pods

DEPLOYMENT = ("apps/v1", "Deployment")
STATEFULSET = ("apps/v1", "StatefulSet")
LEADER_WORKER_SET = ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet")
INFERENCE_SERVICE = ("serving.kserve.io/v1beta1", "InferenceService")
KINDS = (DEPLOYMENT, STATEFULSET, LEADER_WORKER_SET, INFERENCE_SERVICE)
ISVC_LABEL = "serving.kserve.io/inferenceservice"
# predictor fields that configure the component, not its pods
_PREDICTOR_ONLY = {"model", "minReplicas", "maxReplicas", "scaleTarget", "scaleMetric", "canaryTrafficPercent"}


def predictor(isvc: Mapping[str, Any]) -> dict[str, Any]:
    """The predictor Deployment KServe's raw deployment mode makes for an InferenceService: named
    ``<name>-predictor``, ``minReplicas`` replicas (default 1), the InferenceService's labels and
    annotations, its pod from ``spec.predictor`` (``model`` becomes the ``kserve-container``)."""
    meta = isvc.get("metadata") or {}
    name = str(meta.get("name"))
    spec = (isvc.get("spec") or {}).get("predictor") or {}
    labels = {**(meta.get("labels") or {}), ISVC_LABEL: name, "component": "predictor"}
    notes = {k: v for k, v in (meta.get("annotations") or {}).items() if not k.startswith("kubectl.kubernetes.io/")}
    pod_spec = {k: copy.deepcopy(v) for k, v in spec.items() if k not in _PREDICTOR_ONLY}
    model = spec.get("model")
    if isinstance(model, Mapping):
        container = {
            "name": "kserve-container",
            "image": str(model.get("runtime") or "kserve/huggingfaceserver:latest"),
            "args": [f"--model_name={name}", *(model.get("args") or [])],
            "resources": copy.deepcopy(model.get("resources") or {}),
        }
        pod_spec["containers"] = [container, *(pod_spec.get("containers") or [])]
    replicas = spec.get("minReplicas", 1)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": f"{name}-predictor", "namespace": meta.get("namespace"), "labels": labels,
                     "annotations": notes},
        "spec": {
            "replicas": replicas if isinstance(replicas, int) and not isinstance(replicas, bool) else 1,
            "selector": {"matchLabels": {ISVC_LABEL: name}},
            "template": {"metadata": {"labels": dict(labels), "annotations": dict(notes)}, "spec": pod_spec},
        },
    }  # fmt: skip


def replicas(obj: Mapping[str, Any]) -> int:
    """An object's ``spec.replicas`` as its controller reads it (1 when absent or not a count)."""
    value = (obj.get("spec") or {}).get("replicas", 1)
    return value if isinstance(value, int) and value >= 0 else 1


def _whole(value: Any, path: str, problems: list[FieldError], *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        problems.append(FieldError(path, f"must be a whole number >= {minimum}, not {value!r}"))
        return minimum
    return value


def _pod_info(
    namespace: str, name: str, template: Mapping[str, Any], own: Mapping[str, str], kind: str, owner: str, notes: Any
) -> tuple[jobs.JobInfo, str]:
    """One of the object's pods as the webhook labels it (the template's labels, the object's queue
    and priority labels, the serving rule's service labels), and its role in a group (the hash the
    webhook records on the pod, from the same spec)."""
    labels = dict((template.get("metadata") or {}).get("labels") or {})
    labels.update({k: own[k] for k in (jobs.QUEUE_LABEL, jobs.PRIORITY_LABEL) if k in own})
    labels.update(pods.service_labels(kind, owner, notes if isinstance(notes, Mapping) else {}))
    pod = {"metadata": {"name": name, "namespace": namespace, "labels": labels}, "spec": template.get("spec")}
    return jobs.read_job(pod, jobs.POD), pods.role_hash({"spec": template.get("spec")})


def read(path: str, obj: Mapping[str, Any], problems: list[FieldError]) -> list[tuple[jobs.JobInfo, int | None, bool]]:
    """The workloads a serving object stands for: (job, replicas of a Deployment-like object or
    None for a group, whether an eviction makes it again under its name); [] with problems."""
    kind = (str(obj.get("apiVersion")), str(obj.get("kind")))
    if kind == INFERENCE_SERVICE:
        return read(path, predictor(obj), problems)
    raw_meta, raw_spec = obj.get("metadata"), obj.get("spec")
    meta: Mapping[str, Any] = raw_meta if isinstance(raw_meta, Mapping) else {}
    spec: Mapping[str, Any] = raw_spec if isinstance(raw_spec, Mapping) else {}
    name, namespace = meta.get("name"), str(meta.get("namespace") or "default")
    own, notes = meta.get("labels") or {}, meta.get("annotations") or {}
    before = len(problems)
    if not isinstance(name, str) or not name:
        problems.append(FieldError(f"{path}.metadata.name", f"required: the {kind[1]}'s name"))
    replicas = _whole(spec.get("replicas", 1), f"{path}.spec.replicas", problems)
    if kind == LEADER_WORKER_SET:
        raw_lwt = spec.get("leaderWorkerTemplate")
        lwt: Mapping[str, Any] = raw_lwt if isinstance(raw_lwt, Mapping) else {}
        size = _whole(lwt.get("size", 1), f"{path}.spec.leaderWorkerTemplate.size", problems, minimum=1)
        worker, leader = lwt.get("workerTemplate"), lwt.get("leaderTemplate") or lwt.get("workerTemplate")
        templates: list[tuple[str, Any]] = [("spec.leaderWorkerTemplate.workerTemplate", worker), ("", leader)]
    else:
        size, templates = 1, [("spec.template", spec.get("template"))]
    for where, template in templates:
        if where and (not isinstance(template, Mapping) or not isinstance(template.get("spec"), Mapping)):
            problems.append(FieldError(f"{path}.{where}.spec", "required: the pods' template"))
    if len(problems) > before:
        return []
    assert isinstance(name, str)
    try:
        if kind == DEPLOYMENT:
            info, _ = _pod_info(namespace, name, spec["template"], own, "Deployment", name, notes)
            return [(info, replicas, False)]
        if kind == STATEFULSET:
            member = _pod_info(namespace, name, spec["template"], own, "StatefulSet", name, notes)
            return [(_group(namespace, pods.label_name("StatefulSet", name), [(member, replicas)]), None, True)]
        leader = _pod_info(namespace, name, templates[1][1], own, "LeaderWorkerSet", name, notes)
        worker = _pod_info(namespace, name, templates[0][1], own, "LeaderWorkerSet", name, notes)
        return [
            (_group(namespace, pods.label_name("LeaderWorkerSet", f"{name}-{i}"), [(leader, 1), (worker, size - 1)]),
             None, True)
            for i in range(replicas)
        ]  # fmt: skip
    except errors.Invalid as exc:
        problems.extend(e.under(path) for e in exc.errors)
        return []


def _group(namespace: str, name: str, members: list[tuple[tuple[jobs.JobInfo, str], int]]) -> jobs.JobInfo:
    """A serving pod group as ``queues.podsets.pods.group_info`` reads it: a pod set per role, counted."""
    sets: dict[str, jobs.PodSet] = {}
    for (info, role), n in members:
        if n <= 0:
            continue
        (ps,) = info.pod_sets
        count = (sets[role].count if role in sets else 0) + n
        sets[role] = dataclasses.replace(ps, name=role, count=count)  # (its claims, topology... kept)
    first = members[0][0][0]
    return jobs.JobInfo(
        api_version="v1",
        kind="Pod",
        namespace=namespace,
        name=name,
        labels=first.labels,
        annotations={},
        pod_sets=tuple(sets.values()),
        priority_class_name=first.priority_class_name,
    )
