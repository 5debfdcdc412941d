"""Kubeflow Trainer's TrainJob (``trainer.kubeflow.org/v1alpha1``): its pods come from the runtime it names.

A TrainJob says little itself: ``spec.runtimeRef`` names a ``ClusterTrainingRuntime`` (the default
kind) or a namespaced ``TrainingRuntime`` whose ``spec.template`` is a JobSet template, and
``spec.trainer`` overrides the training nodes (``numNodes``, ``resourcesPerNode``, ``image``). The
Trainer controller builds a JobSet from the two; Kueue reads the TrainJob's pod sets from that JobSet
(one per replicated job: ``dataset-initializer``, ``model-initializer``, ``node``, ...), and so does
Turnstile: ``resolve`` builds the JobSet's spec, which ``queues.podsets.layouts`` reads as any JobSet.

Which replicated job runs the training nodes: the one whose pod template is labelled
``trainer.kubeflow.org/trainjob-ancestor-step: trainer`` (Trainer's ancestor label), else the one
named ``node``. It runs ``numNodes`` pods (the TrainJob's ``spec.trainer.numNodes``, else the
runtime's ``mlPolicy.numNodes``, else 1), and its container named ``node`` (else its first) takes
``resourcesPerNode`` as its resources.

Admission writes the flavors' node labels and tolerations where Trainer lets another manager write
them: a ``spec.runtimePatches`` entry of manager ``kueue.x-k8s.io/manager`` (Kueue's), one patch per
replicated job; restoring empties it. Pods and templates are plain dicts, as everywhere in the core.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

from queues.errors import FieldError

API_VERSION = "trainer.kubeflow.org/v1alpha1"
CLUSTER_RUNTIME = "ClusterTrainingRuntime"
RUNTIME = "TrainingRuntime"
ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
MANAGER = "kueue.x-k8s.io/manager"  # the runtime patch Turnstile owns (Kueue's manager name)

# (kind, namespace or None for a cluster runtime, name) -> the runtime object, or None if absent
Runtimes = Callable[[str, str | None, str], Mapping[str, Any] | None]


def runtime_ref(obj: Mapping[str, Any]) -> tuple[str, str | None, str] | None:
    """The runtime a TrainJob names: (kind, namespace for a TrainingRuntime, name); None if it names none."""
    spec = obj.get("spec") or {}
    ref = spec.get("runtimeRef") if isinstance(spec, Mapping) else None
    if not isinstance(ref, Mapping) or not isinstance(ref.get("name"), str) or not ref["name"]:
        return None
    kind = str(ref.get("kind") or CLUSTER_RUNTIME)
    namespace = str((obj.get("metadata") or {}).get("namespace") or "default") if kind == RUNTIME else None
    return kind, namespace, ref["name"]


def resolve(obj: Mapping[str, Any], runtimes: Runtimes | None, problems: list[FieldError]) -> Mapping[str, Any]:
    """The JobSet spec the Trainer would build for TrainJob ``obj`` (without any runtime patch), or
    an empty spec with the problems said (a runtime that does not exist names the fix)."""
    ref = runtime_ref(obj)
    if ref is None:
        problems.append(FieldError("spec.runtimeRef.name", "required: the (Cluster)TrainingRuntime to run"))
        return {}
    kind, namespace, name = ref
    if kind not in (CLUSTER_RUNTIME, RUNTIME):
        problems.append(FieldError("spec.runtimeRef.kind", f"must be {CLUSTER_RUNTIME} or {RUNTIME}, not {kind!r}"))
        return {}
    runtime = runtimes(kind, namespace, name) if runtimes is not None else None
    if runtime is None:
        where = f" in namespace {namespace}" if namespace else ""
        problems.append(
            FieldError(
                "spec.runtimeRef.name",
                f"{kind} {name!r} does not exist{where}; create it first (kubectl get {kind.lower()}s) or name "
                "one that does",
            )
        )
        return {}
    rspec = runtime.get("spec") or {}
    template = (rspec.get("template") or {}).get("spec") if isinstance(rspec, Mapping) else None
    if not isinstance(template, Mapping) or not isinstance(template.get("replicatedJobs"), list):
        problems.append(FieldError("spec.runtimeRef.name", f"{kind} {name!r} has no spec.template.spec.replicatedJobs"))
        return {}
    jobset = copy.deepcopy(dict(template))
    trainer = (obj.get("spec") or {}).get("trainer") or {}
    ml = rspec.get("mlPolicy") or {}
    nodes = trainer.get("numNodes", ml.get("numNodes", 1)) if isinstance(trainer, Mapping) else 1
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        problems.append(FieldError("spec.trainer.numNodes", f"must be a whole number >= 1, not {nodes!r}"))
        nodes = 1
    node = _trainer_job(jobset["replicatedJobs"])
    if node is not None:
        job_spec = node.setdefault("template", {}).setdefault("spec", {})
        job_spec["parallelism"] = job_spec["completions"] = nodes
        resources = trainer.get("resourcesPerNode") if isinstance(trainer, Mapping) else None
        containers = ((job_spec.get("template") or {}).get("spec") or {}).get("containers") or []
        if isinstance(resources, Mapping) and containers:
            target: dict[str, Any] = next(
                (c for c in containers if isinstance(c, dict) and c.get("name") == "node"), containers[0]
            )
            target["resources"] = copy.deepcopy(dict(resources))
    return jobset


def _trainer_job(replicated: list[Any]) -> dict[str, Any] | None:
    for rj in replicated:
        labels = ((rj.get("template") or {}).get("metadata") or {}).get("labels") or {} if isinstance(rj, dict) else {}
        if labels.get(ANCESTOR) == "trainer":
            return rj  # type: ignore[no-any-return]
    return next((rj for rj in replicated if isinstance(rj, dict) and rj.get("name") == "node"), None)


def own_patch(obj: Mapping[str, Any]) -> tuple[int, Mapping[str, Any]] | None:
    """(index, entry) of Turnstile's runtime patch in ``spec.runtimePatches``, if the TrainJob has one."""
    patches = (obj.get("spec") or {}).get("runtimePatches") or []
    for i, patch in enumerate(patches if isinstance(patches, list) else []):
        if isinstance(patch, Mapping) and patch.get("manager") == MANAGER:
            return i, patch
    return None


def patched_directives(obj: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Per replicated job, the pod spec fields (``nodeSelector``, ``tolerations``) and pod annotations
    Turnstile's runtime patch sets: ``{name: {"nodeSelector": ..., "tolerations": ..., "annotations": ...}}``."""
    found = own_patch(obj)
    if found is None:
        return {}
    out: dict[str, dict[str, Any]] = {}
    spec = ((found[1].get("trainingRuntimeSpec") or {}).get("template") or {}).get("spec") or {}
    for rj in spec.get("replicatedJobs") or []:
        pod = (((rj.get("template") or {}).get("spec") or {}).get("template")) or {}
        out[str(rj.get("name"))] = {
            "nodeSelector": (pod.get("spec") or {}).get("nodeSelector"),
            "tolerations": (pod.get("spec") or {}).get("tolerations"),
            "annotations": (pod.get("metadata") or {}).get("annotations"),
        }
    return out


def patch_entry(
    directives: Mapping[str, tuple[dict[str, str], list[dict[str, Any]], dict[str, str]]],
) -> dict[str, Any]:
    """Turnstile's runtime patch setting, per replicated job, (nodeSelector, tolerations, annotations)."""
    replicated = []
    for name, (selector, tolerations, notes) in directives.items():
        pod: dict[str, Any] = {"spec": {}}
        if selector:
            pod["spec"]["nodeSelector"] = dict(selector)
        if tolerations:
            pod["spec"]["tolerations"] = [dict(t) for t in tolerations]
        if notes:
            pod["metadata"] = {"annotations": dict(notes)}
        replicated.append({"name": name, "template": {"spec": {"template": pod}}})
    return {"manager": MANAGER, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": replicated}}}}


def apply_patches(jobset: Mapping[str, Any], obj: Mapping[str, Any]) -> dict[str, Any]:
    """The JobSet spec with Turnstile's runtime patch applied (what the Trainer controller creates):
    node selectors merged, tolerations appended, annotations merged."""
    out = copy.deepcopy(dict(jobset))
    directives = patched_directives(obj)
    for rj in out.get("replicatedJobs") or []:
        d = directives.get(str(rj.get("name")))
        if not d:
            continue
        pod = rj.setdefault("template", {}).setdefault("spec", {}).setdefault("template", {})
        spec = pod.setdefault("spec", {})
        if d["nodeSelector"]:
            spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **d["nodeSelector"]}
        if d["tolerations"]:
            spec["tolerations"] = [*(spec.get("tolerations") or []), *d["tolerations"]]
        if d["annotations"]:
            meta = pod.setdefault("metadata", {})
            meta["annotations"] = {**(meta.get("annotations") or {}), **d["annotations"]}
    return out
