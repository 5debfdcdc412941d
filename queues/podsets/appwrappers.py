"""An AppWrapper (``workload.codeflare.dev/v1beta2``, project CodeFlare): a group of Kubernetes objects
admitted as one workload.

An AppWrapper's ``spec.components`` each hold an object's ``template`` (a PyTorchJob, a Deployment, a
Job, ...), which the AppWrapper controller creates once the AppWrapper is unsuspended and deletes when
it is suspended. Its pod sets are its components' (Kueue's ``appwrapper_controller.go``, through the
AppWrapper library's ``GetComponentPodSpecs``), in component order, named ``<appwrapper>-<k>`` for the
k-th over all components:

- a component that declares ``podSets`` (each a ``path`` to a pod template within the component, such
  as ``template.spec.template``, and ``replicas``, default 1) has exactly those;
- one that declares none has what its kind has: an integrated job kind's pod sets as Turnstile reads
  that kind (``queues.podsets.layouts``), a Deployment's or StatefulSet's ``replicas`` pods of its
  template, a Pod's one.

Admission writes each pod set's directives where the AppWrapper controller takes them:
``spec.components[i].podSetInfos[j]`` (``annotations``, ``labels``, ``nodeSelector``, ``tolerations``,
``schedulingGates``), one per pod set of the component; the controller merges them into the
component's pod templates when it creates it (``apply_infos``). Restoring clears them, as Kueue's
``ClearPodSetInfos``. Pods and templates are plain dicts, as everywhere in the core.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from queues.errors import FieldError

API_VERSION = "workload.codeflare.dev/v1beta2"
KIND = "AppWrapper"
LABEL = "workload.codeflare.dev/appwrapper"  # the controller's label on its components and their pods

# a component's pod sets, where its kind says them (an integrated job kind, a Deployment, a
# StatefulSet, a Pod): (count, template, its field path) each, or None for another kind
# (``queues.podsets.layouts.component_pod_sets``, passed in: layouts reads AppWrappers through here)
Infer = Callable[[Mapping[str, Any], list[FieldError]], list[tuple[int, Mapping[str, Any], str | None]] | None]


@dataclass(frozen=True, slots=True)
class ComponentPodSet:
    """One pod set of one component: its index among the component's, its pods, its template, and
    where that template is in the component's object (a field path such as
    ``spec.pytorchReplicaSpecs.Master.template``; None where its operator makes the pod)."""

    component: int
    index: int
    count: int
    template: Mapping[str, Any]
    path: str | None


def _parts(path: str) -> list[str | int]:
    """``template.spec.replicatedJobs[0].template`` -> ``["template", "spec", "replicatedJobs", 0, "template"]``."""
    out: list[str | int] = []
    for part in path.split("."):
        match = re.fullmatch(r"([^\[\]]+)((?:\[\d+\])*)", part)
        if match is None:
            raise ValueError(part)
        out.append(match.group(1))
        out.extend(int(i) for i in re.findall(r"\[(\d+)\]", match.group(2)))
    return out


def _get(obj: Any, parts: Sequence[str | int]) -> Any:
    for part in parts:
        if isinstance(part, int):
            obj = obj[part] if isinstance(obj, list) and part < len(obj) else None
        else:
            obj = obj.get(part) if isinstance(obj, Mapping) else None
    return obj


def component_pod_sets(spec: Mapping[str, Any], problems: list[FieldError], infer: Infer) -> Iterator[ComponentPodSet]:
    """Every pod set of every component, in order (see the module docstring)."""
    components = spec.get("components")
    if not isinstance(components, list) or not components:
        problems.append(FieldError("spec.components", "required: the wrapped objects"))
        return
    for i, component in enumerate(components):
        where = f"spec.components[{i}]"
        template = component.get("template") if isinstance(component, Mapping) else None
        if not isinstance(template, Mapping) or not template.get("apiVersion") or not template.get("kind"):
            problems.append(FieldError(f"{where}.template", "required: an object with apiVersion and kind"))
            continue
        declared = component.get("podSets")
        if declared is not None:
            yield from _declared(i, template, declared, where, problems)
            continue
        inner: list[FieldError] = []
        inferred = infer(template, inner)
        if inferred is None:
            problems.append(
                FieldError(
                    f"{where}.podSets",
                    f"required for a {template['kind']} ({template['apiVersion']}): say where its pod templates "
                    "are ({path: template.spec.template, replicas: N} each)",
                )
            )
        for j, (count, found, path) in enumerate(inferred or ()):
            yield ComponentPodSet(i, j, count, found, path)
        problems.extend(e.under(f"{where}.template") for e in inner)


def _declared(
    i: int, template: Mapping[str, Any], declared: Any, where: str, problems: list[FieldError]
) -> Iterator[ComponentPodSet]:
    if not isinstance(declared, list) or not declared:
        problems.append(FieldError(f"{where}.podSets", "must be a list of {path, replicas}"))
        return
    for j, ps in enumerate(declared):
        at = f"{where}.podSets[{j}]"
        path = ps.get("path") if isinstance(ps, Mapping) else None
        if not isinstance(path, str) or not path.startswith("template."):
            problems.append(
                FieldError(f"{at}.path", "required: where the pod template is, such as template.spec.template")
            )
            continue
        try:
            found = _get({"template": template}, _parts(path))
        except ValueError:
            found = None
        if not isinstance(found, Mapping) or not isinstance(found.get("spec"), Mapping):
            problems.append(FieldError(f"{at}.path", f"{path} is not a pod template (with a spec) in the component"))
            continue
        replicas = ps.get("replicas", 1)
        if replicas is None:
            replicas = 1
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
            problems.append(FieldError(f"{at}.replicas", f"must be a whole number >= 0, not {replicas!r}"))
            continue
        yield ComponentPodSet(i, j, replicas, found, path.removeprefix("template."))


def pod_set_name(appwrapper: str, k: int) -> str:
    """Kueue's name for the k-th pod set of an AppWrapper."""
    return f"{appwrapper}-{k}"


def apply_infos(obj: Mapping[str, Any], pod_sets: Sequence[ComponentPodSet], infos: Sequence[Any]) -> dict[str, Any]:
    """The component object as the AppWrapper controller creates it: each pod set's ``podSetInfos``
    entry merged into its template (node selector and labels and annotations merged, tolerations and
    scheduling gates added), and the component's pods labelled with their AppWrapper by the caller."""
    out: dict[str, Any] = json.loads(json.dumps(obj))  # (a copy sharing nothing, even where the input did)
    for ps, info in zip(pod_sets, infos, strict=False):
        if not isinstance(info, Mapping) or ps.path is None:
            continue
        target = _get(out, _parts(ps.path)) if ps.path else out
        if not isinstance(target, dict):
            continue
        meta = target.setdefault("metadata", {})
        spec = target.setdefault("spec", {})
        for key, into in (("labels", meta), ("annotations", meta), ("nodeSelector", spec)):
            if info.get(key):
                field = "labels" if key == "labels" else key
                into[field] = {**(into.get(field) or {}), **info[key]}
        for key in ("tolerations", "schedulingGates"):
            if info.get(key):
                spec[key] = [*(spec.get(key) or []), *(x for x in info[key] if x not in (spec.get(key) or []))]
    return out
