"""Scenario files (``shared/spec/scenario.md``) read into typed, validated form.

``parse`` takes the document as loaded from YAML and returns a ``Scenario`` or raises
``errors.Invalid`` with every problem found, each with its path inside the file
(``jobs[3].object.spec.template.spec.containers[0].resources.requests.cpu``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from queues import efficiency, errors, podsready
from queues.cycle import usage_history
from queues.dra import charges, mappings, slices
from queues.errors import FieldError
from queues.kueue import api, fair_sharing_config
from queues.placement import topology
from queues.podsets import jobs, pod_resources, pods, serving, transformations
from queues.simulation import scenario_kinds as other_kinds
from queues.simulation import scenario_nodes
from queues.simulation.scenario_edits import MAX_SECONDS, Edit
from queues.simulation.scenario_edits import edits as _edits
from queues.simulation.scenario_edits import manifest as _manifest
from queues.simulation.scenario_edits import seconds as _time
from queues.simulation.scenario_jobs import BATCH_JOB, DEPLOYMENT, RAY_SCALED, SERVES, JobEntry, Part
from queues.simulation.scenario_jobs import group as _group
from queues.simulation.scenario_jobs import serving_entries as _serving

__all__ = ["MAX_SECONDS", "Edit", "JobEntry", "Part", "Scenario", "parse"]


@dataclass(slots=True)
class Scenario:
    name: str
    description: str
    manifests: list[api.KueueObject]
    namespaces: dict[str, dict[str, str]]
    jobs: list[JobEntry]
    edits: list[Edit]
    nodes: list[Mapping[str, Any]] = field(default_factory=list)
    autoscaler: Mapping[str, Any] | None = None
    # Kubernetes PriorityClasses among the manifests: name -> (value, globalDefault)
    pod_priorities: dict[str, tuple[int, bool]] = field(default_factory=dict)
    # Kueue's waitForPodsReady configuration (``queues.podsready``): on by default, as in Kueue
    pods_ready: podsready.WaitForPodsReady = field(default_factory=podsready.WaitForPodsReady)
    # Kubeflow Trainer runtimes among the manifests (a TrainJob's pods): (kind, namespace, name) -> object
    runtimes: dict[tuple[str, str | None, str], Mapping[str, Any]] = field(default_factory=dict)
    # Kueue's fairSharing configuration (``queues.cycle.fairsharing``): off unless the block is given
    fair_sharing: fair_sharing_config.FairSharing | None = None
    # Kueue's admissionFairSharing configuration (``queues.cycle.usage_history``): off unless given
    admission_fair_sharing: usage_history.AdmissionFairSharing | None = None
    # how TAS pod sets are packed: Compact (Turnstile's) or Kueue (``queues.placement.topology``)
    packing: str = "Compact"
    # GPU efficiency (``queues.efficiency``): each workload's utilisation trace, reclaim policies, budgets
    utilization: dict[str, efficiency.Trace] = field(default_factory=dict)
    # right-sizing (``queues.gpus.rightsizing``): each workload's GPU memory per GPU (MiB), ``gpuMemoryUsed``
    gpu_memory: dict[str, efficiency.Trace] = field(default_factory=dict)
    reclaim: tuple[efficiency.ReclaimPolicy, ...] = ()
    budgets: tuple[efficiency.Budget, ...] = ()
    # DRA (``queues.dra``): the deviceClassMappings and ResourceClaimTemplates that charge claims (and
    # the resourceTransformations applied before them), and the DeviceClass and ResourceClaimTemplate
    # objects as given (engine cluster creates them)
    devices: charges.Devices = field(default_factory=charges.Devices)
    device_objects: list[Mapping[str, Any]] = field(default_factory=list)


_TOP_FIELDS = {
    "name", "description", "manifests", "namespaces", "nodes", "autoscaler", "jobs", "edits", "waitForPodsReady",
    "fairSharing", "admissionFairSharing", "topologyPacking", "reclaim", "budgets", "deviceClassMappings",
    "resourceTransformations", "excludeResourcePrefixes", "quotaCheckStrategy",
}  # fmt: skip


MAX_JOBS = 250_000  # a scenario bigger than Kueue's large-scale benchmark (50,000) five times over


def parse(doc: Any) -> Scenario:
    """The scenario in ``doc`` or ``errors.Invalid`` listing every problem with its path."""
    if not isinstance(doc, Mapping):
        raise errors.Invalid([FieldError("", "a scenario must be a YAML mapping with name, manifests and jobs")])
    problems: list[FieldError] = []
    for key in doc:
        if key not in _TOP_FIELDS:
            problems.append(FieldError(str(key), f"unknown field; a scenario has {', '.join(sorted(_TOP_FIELDS))}"))
    name = doc.get("name")
    if not isinstance(name, str) or not name:
        problems.append(FieldError("name", "required: the scenario's name, used in reports"))
    description = doc.get("description") or ""
    manifests: list[api.KueueObject] = []
    pod_priorities: dict[str, tuple[int, bool]] = {}
    runtimes: dict[tuple[str, str | None, str], Mapping[str, Any]] = {}
    device_objects: list[Mapping[str, Any]] = []
    claim_templates: list[charges.ClaimTemplate] = []
    published: list[slices.Slice] = []
    raw_manifests = doc.get("manifests")
    seen: dict[tuple[str, str], str] = {}
    if not isinstance(raw_manifests, list):
        problems.append(FieldError("manifests", "required: a list of Kueue objects"))
    else:
        for i, raw in enumerate(raw_manifests):
            if isinstance(raw, Mapping) and (raw.get("apiVersion"), raw.get("kind")) == other_kinds.PRIORITY_CLASS:
                other_kinds.priority_class(raw, f"manifests[{i}]", pod_priorities, problems)
                continue
            if isinstance(raw, Mapping) and (raw.get("apiVersion"), raw.get("kind")) in other_kinds.DRA_KINDS:
                other_kinds.dra_object(raw, f"manifests[{i}]", device_objects, claim_templates, problems, published)
                continue
            if isinstance(raw, Mapping) and (raw.get("apiVersion"), raw.get("kind")) in other_kinds.TRAINING_RUNTIMES:
                other_kinds.runtime(raw, f"manifests[{i}]", runtimes, problems)
                continue
            obj = _manifest(raw, f"manifests[{i}]", problems)
            if obj is None:
                continue
            ident = (obj.kind, obj.key)
            if ident in seen:
                problems.append(
                    FieldError(
                        f"manifests[{i}].metadata.name", f"duplicate {obj.kind} {obj.key!r} (also {seen[ident]})"
                    )
                )
            seen[ident] = f"manifests[{i}]"
            manifests.append(obj)
    namespaces: dict[str, dict[str, str]] = {}
    for i, ns in enumerate(doc.get("namespaces") or []):
        if not isinstance(ns, Mapping) or not isinstance(ns.get("name"), str):
            problems.append(FieldError(f"namespaces[{i}].name", "required: the namespace's name"))
            continue
        labels = ns.get("labels") or {}
        if not isinstance(labels, Mapping) or not all(isinstance(v, str) for v in labels.values()):
            problems.append(FieldError(f"namespaces[{i}].labels", "must be a map of strings (quote numbers)"))
            continue
        namespaces[ns["name"]] = {str(k): v for k, v in labels.items()}
    priority_classes = {o.name for o in manifests if isinstance(o, api.WorkloadPriorityClass)}
    edits = _edits(doc.get("edits"), problems, priority_classes)
    job_entries: list[JobEntry] = []
    groups: dict[str, list[tuple[int, Part, jobs.JobInfo]]] = {}  # namespace/group -> its pods, in file order
    raw_jobs = doc.get("jobs")
    keys: dict[str, int] = {}
    utilization: dict[str, efficiency.Trace] = {}  # workload key -> its GPU utilisation trace
    gpu_memory: dict[str, efficiency.Trace] = {}  # workload key -> its GPU memory trace (MiB)
    if not isinstance(raw_jobs, list):
        problems.append(FieldError("jobs", "required: the timeline of job submissions (a list)"))
    elif len(raw_jobs) > MAX_JOBS:
        problems.append(
            FieldError("jobs", f"{len(raw_jobs):,} jobs; a scenario holds at most {MAX_JOBS:,} (split the timeline)")
        )
    else:
        for i, raw in enumerate(raw_jobs):
            path = f"jobs[{i}]"
            if not isinstance(raw, Mapping):
                problems.append(FieldError(path, "must be a mapping with at, runtime and object"))
                continue
            for key in raw:
                if key not in ("at", "runtime", "object", "utilization", "gpuMemoryUsed"):
                    problems.append(
                        FieldError(
                            f"{path}.{key}",
                            "unknown field; a job entry has at, runtime, object, utilization, gpuMemoryUsed",
                        )
                    )
            at = _time(raw.get("at"), f"{path}.at", problems)
            trace = efficiency.utilization(raw.get("utilization"), f"{path}.utilization", problems)
            used = efficiency.gpu_memory(raw.get("gpuMemoryUsed"), f"{path}.gpuMemoryUsed", problems)
            obj = raw.get("object")
            if isinstance(obj, Mapping) and (obj.get("apiVersion"), obj.get("kind")) in serving.KINDS:
                for entry in _serving(i, at, raw, problems):
                    if entry.job.key in keys:
                        problems.append(FieldError(f"{path}.object.metadata.name", f"duplicate {entry.job.key}"))
                    keys[entry.job.key] = i
                    job_entries.append(entry)
                    if trace is not None:  # (a Deployment's replicas take it as they are made)
                        utilization[entry.job.key] = trace
                    if used is not None:
                        gpu_memory[entry.job.key] = used
                continue
            if isinstance(obj, Mapping) and (kind := (obj.get("apiVersion"), obj.get("kind"))) in SERVES:
                runtime: float = MAX_SECONDS  # it serves until it is deleted (a ``cancel`` edit), as in Kueue
                if "runtime" in raw:
                    problems.append(FieldError(f"{path}.runtime", f"a {kind[1]} runs until it is deleted: remove "
                                               "runtime (a cancel edit deletes it)"))  # fmt: skip
            else:
                runtime = _time(raw.get("runtime"), f"{path}.runtime", problems, positive=True)
            is_pod = isinstance(obj, Mapping) and (obj.get("apiVersion"), obj.get("kind")) == ("v1", "Pod")
            try:
                info = jobs.read_job(obj, jobs.POD if is_pod else None, lambda k, ns, n: runtimes.get((k, ns, n)))
            except errors.Invalid as exc:
                problems.extend(e.under(f"{path}.object") for e in exc.errors)
                continue
            # as a user would kubectl apply it: what the API server refuses is refused here too
            if is_pod and isinstance(obj, Mapping):
                problems.extend(e.under(f"{path}.object") for e in pod_resources.pod_problems(obj.get("spec") or {}))
                if pods.group_name(obj) is not None:
                    key = f"{info.namespace}/{pods.group_name(obj)}"
                    if trace is not None:
                        utilization.setdefault(key, trace)
                    if used is not None:
                        gpu_memory.setdefault(key, used)
                    groups.setdefault(key, []).append((i, Part(i, at, runtime, obj), info))
                    continue
            else:
                problems.extend(e.under(f"{path}.object") for e in jobs.api_problems(raw["object"]))
                problems.extend(e.under(f"{path}.object") for e in jobs.creation_problems(info))
            if info.key in keys:
                problems.append(
                    FieldError(
                        f"{path}.object.metadata.name", f"duplicate job {info.key} (also jobs[{keys[info.key]}])"
                    )
                )
            keys[info.key] = i
            if info.priority_class is not None and info.priority_class not in priority_classes:
                problems.append(
                    FieldError(
                        f"{path}.object.metadata.labels[{jobs.PRIORITY_LABEL}]",
                        f"WorkloadPriorityClass {info.priority_class!r} is not defined in manifests or edits",
                    )
                )
            job_entries.append(JobEntry(i, at, runtime, info, raw["object"]))
            if trace is not None:
                utilization[info.key] = trace
            if used is not None:
                gpu_memory[info.key] = used
    for key, members in groups.items():
        group = _group(key, members, problems)
        if group is None:
            continue
        entry = group
        if key in keys:
            problems.append(FieldError(f"jobs[{entry.index}].object.metadata.labels[{pods.GROUP_LABEL}]",
                                       f"pod group {key} has the name of jobs[{keys[key]}]"))  # fmt: skip
        keys[key] = entry.index
        job_entries.append(entry)
    job_entries.sort(key=lambda e: e.index)
    deployments = {e.job.key for e in job_entries if (e.object.get("apiVersion"), e.object.get("kind")) == DEPLOYMENT}
    batch = {e.job.key for e in job_entries if (e.object.get("apiVersion"), e.object.get("kind")) == BATCH_JOB}
    ray = {e.job.key: e for e in job_entries if (e.object.get("apiVersion"), e.object.get("kind")) in RAY_SCALED}
    for edit in edits:
        where = f"edits[{edit.index}]"
        if edit.action != "scale":
            pass
        elif edit.name not in deployments | batch | set(ray):
            problems.append(FieldError(f"{where}.scale", f"no Deployment, Job or Ray job {edit.name!r} in jobs"))
        elif edit.name in batch and edit.replicas < 1:
            problems.append(FieldError(f"{where}.replicas", "a Job's parallelism must be >= 1"))
        elif (edit.name in ray) != bool(edit.group):
            problems.append(
                FieldError(
                    f"{where}.workerGroup",
                    "only a RayCluster's, RayJob's or RayService's scale names a worker group",
                )
            )
        elif edit.name in ray and edit.group.lower() not in {ps.name for ps in ray[edit.name].job.pod_sets} - {"head"}:
            problems.append(FieldError(f"{where}.workerGroup", f"no worker group {edit.group!r} in {edit.name}"))
        if edit.action == "cancel" and edit.name not in keys:
            problems.append(FieldError(f"edits[{edit.index}].cancel", f"no job {edit.name!r} in jobs"))
    nodes = scenario_nodes.parse(doc.get("nodes"), problems)
    for node in nodes:  # (the devices a DRA driver publishes for a node: its ResourceSlices)
        for obj in node.get("resourceSlices") or []:
            device_objects.append(obj)
            published.append(slices.Slice.from_object(obj))
    node_names = {str(n["name"]) for n in nodes}
    for edit in edits:
        if edit.kind == "Node" and edit.name not in node_names:
            field = {"delete": "delete.name", "gpuXid": "node"}.get(edit.action, edit.action)
            where = f"edits[{edit.index}].{field}"
            problems.append(FieldError(where, f"no node {edit.name!r} in nodes"))
    packing = doc.get("topologyPacking", topology.COMPACT)
    if packing not in topology.PACKINGS:
        problems.append(FieldError("topologyPacking", f"must be {' or '.join(topology.PACKINGS)}, not {packing!r}"))
        packing = topology.COMPACT
    autoscaler = doc.get("autoscaler")
    if autoscaler is not None and not isinstance(autoscaler, Mapping):
        problems.append(FieldError("autoscaler", "must be a mapping"))
        autoscaler = None
    pods_ready = podsready.WaitForPodsReady()
    try:
        pods_ready = podsready.parse(doc.get("waitForPodsReady"))
    except errors.Invalid as exc:
        problems.extend(exc.errors)
    fair = None
    try:
        fair = fair_sharing_config.parse(doc.get("fairSharing"))
    except errors.Invalid as exc:
        problems.extend(exc.errors)
    admission_fair = None
    try:
        admission_fair = usage_history.parse(doc.get("admissionFairSharing"))
    except errors.Invalid as exc:
        problems.extend(exc.errors)
    reclaim = efficiency.reclaim(doc.get("reclaim"), problems)
    budgets = efficiency.budgets(doc.get("budgets"), problems)
    device_mappings = mappings.NONE
    try:
        device_mappings = mappings.parse(doc.get("deviceClassMappings"))
    except errors.Invalid as exc:
        problems.extend(exc.errors)
    resources = transformations.NONE  # Kueue's resources.transformations, excludeResourcePrefixes, quotaCheckStrategy
    try:
        resources = transformations.parse(
            doc.get("resourceTransformations"),
            doc.get("excludeResourcePrefixes"),
            doc.get("quotaCheckStrategy"),
            path="resourceTransformations",
        )
    except errors.Invalid as exc:
        problems.extend(exc.errors)
    if problems:
        raise errors.Invalid(problems)
    own = [t for e in job_entries if (t := podsready.own_timeout(e.job.annotations)) is not None]
    if own:  # (a job's own timeout may be the longest wait: the simulation's horizon covers it)
        pods_ready = dataclasses.replace(pods_ready, longest_own_timeout=max(own))
    return Scenario(
        str(name),
        str(description),
        manifests,
        namespaces,
        job_entries,
        edits,
        nodes,
        autoscaler,
        pod_priorities,
        pods_ready,
        runtimes,
        fair,
        admission_fair,
        str(packing),
        utilization,
        gpu_memory,
        reclaim,
        budgets,
        charges.Devices.of(
            device_mappings,
            claim_templates,
            {
                str(o["metadata"]["name"]): slices.class_selectors(o)
                for o in device_objects
                if (o.get("apiVersion"), o.get("kind")) == other_kinds.DEVICE_CLASS
            },
            published,
            resources,
            {str(n["name"]): dict(n.get("labels") or {}) for n in nodes} if nodes else None,
        ),
        device_objects,
    )
