"""What the real API server fills in when a built-in object is created (defaulting and the registry's
``PrepareForCreate``), so clients see the objects they would see on a real cluster.

- ``default`` (before admission webhooks, as the scheme's defaulting runs at decoding): a Job gets
  ``parallelism``/``completions`` (1 each when both are absent), ``backoffLimit`` 6,
  ``completionMode`` NonIndexed, ``suspend`` false, ``podReplacementPolicy`` TerminatingOrFailed
  (the 1.29+ feature gate), its labels from the template's when it has none; a pod template or a
  Pod gets ``dnsPolicy``, ``schedulerName``, ``terminationGracePeriodSeconds`` 30, an empty
  ``securityContext``, and per container ``terminationMessagePath``/``Policy`` and
  ``imagePullPolicy``. A Pod's containers with limits but no requests get requests equal to
  their limits.
- ``prepare`` (once the object has its uid, after the mutating webhooks): a Job without a manual
  selector gets ``spec.selector`` on ``batch.kubernetes.io/controller-uid`` and its template the
  ``controller-uid``/``job-name`` labels (both spellings), which its pods carry, so
  ``kubectl logs job/NAME`` and ``kubectl get pods -l job-name=NAME`` find them. A Pod starts
  ``Pending`` with its QoS class, and one with scheduling gates gets ``PodScheduled=False``
  reason ``SchedulingGated`` (the pod strategy's ``PrepareForCreate``).
"""

from __future__ import annotations

from typing import Any

from admission.sim.server import resources
from admission.sim.server.object_store import ObjectStore
from admission.sim.server.objects import ApiError, Obj, Resource

CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
JOB_NAME = "batch.kubernetes.io/job-name"


def _pod_spec(spec: Any) -> None:
    if not isinstance(spec, dict):
        return
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("securityContext", {})
    for key in ("containers", "initContainers"):
        for c in spec.get(key) or []:
            if not isinstance(c, dict):
                continue
            c.setdefault("terminationMessagePath", "/dev/termination-log")
            c.setdefault("terminationMessagePolicy", "File")
            image = str(c.get("image") or "")
            tag = image.rsplit("/", 1)[-1]
            latest = "@" not in tag and (":" not in tag or tag.endswith(":latest"))
            c.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
            c.setdefault("resources", {})


def _requests_from_limits(spec: Any) -> None:
    for key in ("containers", "initContainers"):
        for c in (spec.get(key) or []) if isinstance(spec, dict) else []:
            resources = c.get("resources") if isinstance(c, dict) else None
            if isinstance(resources, dict) and isinstance(resources.get("limits"), dict):
                requests = resources.setdefault("requests", {})
                if isinstance(requests, dict):
                    for name, value in resources["limits"].items():
                        requests.setdefault(name, value)


def default(res: Resource, obj: Obj) -> None:
    """The scheme's defaults for ``obj`` (changed in place); kinds without defaults are left alone."""
    if (res.group, res.kind) == ("batch", "Job"):
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return
        if spec.get("completions") is None and spec.get("parallelism") is None:
            spec["completions"] = 1
            spec["parallelism"] = 1
        spec.setdefault("parallelism", 1)
        spec.setdefault("backoffLimit", 2147483647 if spec.get("backoffLimitPerIndex") is not None else 6)
        spec.setdefault("completionMode", "NonIndexed")
        spec.setdefault("suspend", False)
        spec.setdefault("podReplacementPolicy", "Failed" if spec.get("podFailurePolicy") else "TerminatingOrFailed")
        template = spec.get("template")
        if isinstance(template, dict):
            labels = (template.get("metadata") or {}).get("labels")
            meta = obj.setdefault("metadata", {})
            if labels and not meta.get("labels"):
                meta["labels"] = dict(labels)
            _pod_spec(template.get("spec"))
    elif (res.group, res.kind) == ("", "Pod"):
        _pod_spec(obj.get("spec"))
        _requests_from_limits(obj.get("spec"))
    elif (res.group, res.kind) == ("", "PodTemplate"):
        _pod_spec((obj.get("template") or {}).get("spec"))


def prepare(res: Resource, obj: Obj) -> None:
    """What the registry adds once ``obj`` has its uid (see the module docstring)."""
    if (res.group, res.kind) == ("", "Pod"):
        _prepare_pod(obj)
        return
    if (res.group, res.kind) != ("batch", "Job"):
        return
    spec = obj.get("spec")
    if not isinstance(spec, dict) or spec.get("manualSelector"):
        return
    meta = obj.get("metadata") or {}
    uid, name = str(meta.get("uid")), str(meta.get("name"))
    spec["selector"] = {"matchLabels": {CONTROLLER_UID: uid}}
    template = spec.setdefault("template", {})
    template_meta = template.setdefault("metadata", {})
    labels = template_meta.setdefault("labels", {})
    labels.update({CONTROLLER_UID: uid, JOB_NAME: name, "controller-uid": uid, "job-name": name})


def _prepare_pod(pod: Obj) -> None:
    raw = pod.get("spec")
    spec: Obj = raw if isinstance(raw, dict) else {}
    status: Obj = {"phase": "Pending", "qosClass": qos_class(spec)}
    if spec.get("schedulingGates"):
        status["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "SchedulingGated",
                "message": "Scheduling is blocked due to non-empty scheduling gates",
                "lastProbeTime": None,
                "lastTransitionTime": (pod.get("metadata") or {}).get("creationTimestamp"),
            }
        ]
    pod["status"] = status


def qos_class(spec: Any) -> str:
    """Kubernetes' QoS class: Guaranteed when every container's cpu and memory requests equal
    their limits, BestEffort when none sets any, else Burstable."""
    containers = [c for key in ("containers", "initContainers") for c in (spec.get(key) or []) if isinstance(c, dict)]
    any_set, guaranteed = False, bool(containers)
    for c in containers:
        resources = c.get("resources") or {}
        requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
        for name in ("cpu", "memory"):
            any_set = any_set or name in requests or name in limits
            if name not in limits or str(requests.get(name, limits[name])) != str(limits[name]):
                guaranteed = False
    return "Guaranteed" if guaranteed else ("Burstable" if any_set else "BestEffort")


def pod_priority(store: ObjectStore, pod: Obj) -> None:
    """The Priority admission plugin: ``spec.priority`` from the PriorityClass the pod names (or
    the one marked ``globalDefault``); a name that does not exist, or a priority given that differs
    from the class's, is refused, as on a real server."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return
    classes = {str(o["metadata"]["name"]): o for o in store.list(resources.PRIORITY_CLASSES, None)[0]}
    name = spec.get("priorityClassName")
    if name:
        found = classes.get(str(name))
        if found is None:
            raise ApiError(
                403, "Forbidden", f'pods "{(pod.get("metadata") or {}).get("name")}" is forbidden: '
                f"no PriorityClass with name {name} was found",
            )  # fmt: skip
    else:
        found = next((o for o in classes.values() if o.get("globalDefault")), None)
        if found is not None:
            spec["priorityClassName"] = found["metadata"]["name"]
    computed = int(found.get("value") or 0) if found is not None else 0
    given = spec.get("priority")
    if given is not None and given != computed:
        raise ApiError(
            403, "Forbidden", f'pods "{(pod.get("metadata") or {}).get("name")}" is forbidden: the integer value '
            f"of priority ({given}) must not be provided in pod spec; priority admission controller computed "
            f"{computed} from the given PriorityClass name",
        )  # fmt: skip
    spec["priority"] = computed
