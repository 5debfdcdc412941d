"""The Spark operator's SparkApplication (``sparkoperator.k8s.io/v1beta2``): its pods from its spec.

A SparkApplication has no pod templates of the usual shape: ``spec.driver`` and ``spec.executor``
are Spark pod specs (``coreRequest``, ``memory`` in Java's notation, ``gpu``, ``nodeSelector``,
``tolerations``, ``sidecars``, an optional pod ``template``, ...) from which the operator and Spark
build one driver pod and ``spec.executor.instances`` executor pods. Kueue reads them into two pod
sets, ``driver`` (1) and ``executor`` (the instances), by building each pod as the operator's pod
defaulter does (Kueue's ``sparkapplication_podset.go``), and so does ``pod_template`` here:

- the Spark container is the one named ``spark-kubernetes-driver`` (``executor`` or
  ``spark-kubernetes-executor`` for an executor), else the first; without a template it is the
  only one;
- ``coreRequest`` is its CPU request, ``memory`` its memory request (``512m`` -> ``512Mi``),
  ``coreLimit`` and ``memoryLimit`` its limits, ``gpu: {name, quantity}`` a limit (so a request) of
  that resource;
- ``sidecars`` and ``initContainers`` are added, ``nodeSelector`` (the role's and the app's
  ``spec.nodeSelector``), ``tolerations``, ``affinity`` and ``priorityClassName`` set, and the
  template's metadata merged with the role's ``labels`` and ``annotations`` (where topology requests
  are read).

Where Turnstile differs from Kueue: a role's ``template`` is the base of its pod (its containers'
resources are charged too, as Spark keeps them: Kueue builds the pod from an empty one, so a GPU
asked in a template is not charged there); the app-wide ``spec.nodeSelector`` constrains both pod
sets, as the operator applies it. Like Kueue, neither charges Spark's memory overhead nor ``cores``
without ``coreRequest`` (docs/job-kinds.md says what that means for sizing).

As Kueue's webhook: only ``mode: cluster`` is queued, and dynamic allocation is refused (the
executors' count is fixed when admitted). Turnstile writes the flavors' directives into the role's
``nodeSelector``, ``tolerations`` and ``annotations`` (``DIRECTIVES``), moving the app-wide selector
into both roles, as Kueue's ``RunWithPodSetsInfo`` does (the operator takes one or the other).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator, Mapping
from typing import Any

from queues import quantity
from queues.errors import FieldError

API_VERSION = "sparkoperator.k8s.io/v1beta2"
DRIVER, EXECUTOR = "driver", "executor"
DRIVER_CONTAINER = "spark-kubernetes-driver"
EXECUTOR_CONTAINERS = ("executor", "spark-kubernetes-executor")  # the operator's names; Spark 3's default second
APP_NAME_LABEL = "sparkoperator.k8s.io/app-name"  # on every pod the operator and Spark make for an app
LAUNCHED_LABEL = "sparkoperator.k8s.io/launched-by-spark-operator"  # "true" on those pods
ROLE_LABEL = "spark-role"  # driver | executor
_JAVA_UNITS = {"k": "Ki", "m": "Mi", "g": "Gi", "t": "Ti", "p": "Pi"}


def java_memory(value: str) -> str:
    """Spark's memory notation as a Kubernetes quantity (the operator's
    ``ConvertJavaMemoryStringToK8sMemoryString``): ``512m`` -> ``512Mi``, ``2g`` -> ``2Gi``; a
    Kubernetes quantity is left as it is."""
    text = value.strip()
    match = re.fullmatch(r"(\d+)([kmgtp])b?", text.lower())
    return f"{match.group(1)}{_JAVA_UNITS[match.group(2)]}" if match else text


def pod_labels(app: str) -> dict[str, str]:
    """The labels the operator puts on every pod of app ``app`` (besides the app's own labels and
    ``spark-role``): how a pod is known as a SparkApplication's when its owner is the driver pod."""
    return {APP_NAME_LABEL: app, LAUNCHED_LABEL: "true"}


def is_app_pod(labels: Mapping[str, Any]) -> bool:
    """Whether a pod with these labels is a SparkApplication's driver or executor (queued with its app)."""
    return labels.get(LAUNCHED_LABEL) == "true" and APP_NAME_LABEL in labels and ROLE_LABEL in labels


def templates(spec: Mapping[str, Any], problems: list[FieldError]) -> Iterator[tuple[str, int, Mapping[str, Any], str]]:
    """The driver's and the executors' pod sets: (name, pod count, pod template, the role's path)."""
    if spec.get("mode", "cluster") != "cluster":
        problems.append(
            FieldError(
                "spec.mode", f"only cluster mode is queued, as in Kueue (it is {spec.get('mode')!r}): set cluster"
            )
        )
    dynamic = spec.get("dynamicAllocation")
    if isinstance(dynamic, Mapping) and dynamic.get("enabled") is True:
        problems.append(
            FieldError(
                "spec.dynamicAllocation.enabled",
                "a queued SparkApplication cannot allocate executors dynamically (its quota is fixed when it is "
                "admitted, as in Kueue); set it to false and size spec.executor.instances",
            )
        )
    for role in (DRIVER, EXECUTOR):
        path = f"spec.{role}"
        role_spec = spec.get(role)
        if not isinstance(role_spec, Mapping):
            problems.append(FieldError(path, f"required: the {role}'s Spark pod spec"))
            continue
        count = 1
        if role == EXECUTOR:
            instances = role_spec.get("instances", 0)
            if instances is None:
                instances = 0
            if isinstance(instances, bool) or not isinstance(instances, int) or instances < 0:
                problems.append(FieldError(f"{path}.instances", f"must be a whole number >= 0, not {instances!r}"))
                instances = 0  # (its pod is still read: every problem is said at once)
            count = instances
        template = pod_template(spec, role, role_spec, path, problems)
        if template is not None:
            yield role, count, template, path


def pod_template(
    app: Mapping[str, Any], role: str, role_spec: Mapping[str, Any], path: str, problems: list[FieldError]
) -> Mapping[str, Any] | None:
    """The pod the operator and Spark make for ``role`` (see the module docstring), or None with
    ``problems`` naming what is wrong."""
    before = len(problems)
    base = role_spec.get("template")
    if base is not None and not isinstance(base, Mapping):
        problems.append(FieldError(f"{path}.template", "must be a pod template"))
        return None
    pod: dict[str, Any] = copy.deepcopy(dict(base)) if base else {}
    meta = pod.setdefault("metadata", {})
    spec = pod.setdefault("spec", {})
    if not isinstance(meta, dict) or not isinstance(spec, dict):
        problems.append(FieldError(f"{path}.template", "metadata and spec must be objects"))
        return None
    containers = spec.setdefault("containers", [])
    if not isinstance(containers, list) or not all(isinstance(c, dict) for c in containers):
        problems.append(FieldError(f"{path}.template.spec.containers", "must be a list of containers"))
        return None
    names = (DRIVER_CONTAINER,) if role == DRIVER else EXECUTOR_CONTAINERS
    if not containers:
        containers.append({"name": names[-1] if role == EXECUTOR else DRIVER_CONTAINER})
    main = next((c for c in containers if c.get("name") in names), containers[0])
    for key, where in (("initContainers", "initContainers"), ("sidecars", "containers")):
        extra = role_spec.get(key) or []
        if not isinstance(extra, list):
            problems.append(FieldError(f"{path}.{key}", "must be a list of containers"))
            continue
        have = spec.setdefault(where, [])
        for c in extra:
            if isinstance(c, Mapping) and not any(
                h.get("name") == c.get("name") and h.get("image") == c.get("image") for h in have
            ):
                have.append(copy.deepcopy(dict(c)))
    if isinstance(role_spec.get("priorityClassName"), str) and role_spec["priorityClassName"]:
        spec["priorityClassName"] = role_spec["priorityClassName"]
    selector = dict(spec.get("nodeSelector") or {})
    shared, own = app.get("nodeSelector"), role_spec.get("nodeSelector")
    for where, value in (("spec.nodeSelector", shared), (f"{path}.nodeSelector", own)):
        if value is not None and not isinstance(value, Mapping):
            problems.append(FieldError(where, "must be a map of node labels"))
        elif value:
            selector.update(value)
    if selector:
        spec["nodeSelector"] = selector
    if isinstance(role_spec.get("affinity"), Mapping):
        spec["affinity"] = copy.deepcopy(dict(role_spec["affinity"]))
    tolerations = role_spec.get("tolerations")
    if tolerations:
        if not isinstance(tolerations, list):
            problems.append(FieldError(f"{path}.tolerations", "must be a list of tolerations"))
        else:
            spec["tolerations"] = [*(spec.get("tolerations") or []), *copy.deepcopy(tolerations)]
    resources = main.setdefault("resources", {})
    for field, section, resource, convert in (
        ("coreRequest", "requests", "cpu", str),
        ("coreLimit", "limits", "cpu", str),
        ("memory", "requests", "memory", java_memory),
        ("memoryLimit", "limits", "memory", java_memory),
    ):
        value = role_spec.get(field)
        if value is None:
            continue
        amount = convert(str(value)) if isinstance(value, (str, int)) and not isinstance(value, bool) else ""
        if not amount or not _is_quantity(amount):
            problems.append(FieldError(f"{path}.{field}", f"must be a quantity such as 1, 500m or 2g, not {value!r}"))
            continue
        resources.setdefault(section, {})[resource] = amount
    gpu = role_spec.get("gpu")
    if isinstance(gpu, Mapping) and gpu.get("name"):
        count = gpu.get("quantity")
        if isinstance(count, bool) or not isinstance(count, int):
            problems.append(FieldError(f"{path}.gpu.quantity", f"must be a whole number, not {count!r}"))
        elif count > 0:
            resources.setdefault("limits", {})[str(gpu["name"])] = str(count)
    elif gpu is not None and not isinstance(gpu, Mapping):
        problems.append(FieldError(f"{path}.gpu", "must be {name: <resource>, quantity: <n>}"))
    labels = {**(meta.get("labels") or {}), **(role_spec.get("labels") or {})}
    notes = {**(meta.get("annotations") or {}), **(role_spec.get("annotations") or {})}
    labels[ROLE_LABEL] = role
    meta["labels"] = labels
    if notes:
        meta["annotations"] = notes
    return pod if len(problems) == before else None


def _is_quantity(text: str) -> bool:
    try:
        quantity.parse_milli(text)
    except ValueError:
        return False
    return True
