"""Reading job objects into pod sets: what a job asks of the queue.

Pure functions over the job as a user would ``kubectl apply`` it (a dict), shared by the
simulator, the controller and the webhook. Which kinds exist and where each keeps its pod
templates is ``queues.podsets.layouts``; here a template becomes a ``PodSet`` with requests.

A pod's request is Kubernetes' effective request (``queues.podsets.pod_resources``).

Partial admission (Kueue's, KEP-420): a batch Job annotated ``kueue.x-k8s.io/job-min-parallelism``
may be admitted with fewer pods than its parallelism, down to that minimum; its pod set carries
``min_count``.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Container, Mapping
from dataclasses import dataclass, field
from typing import Any

from queues import errors, podsready, selectors
from queues.errors import FieldError
from queues.podsets import layouts, topology_requests, trainjobs
from queues.podsets.layouts import KINDS, POD, Kind
from queues.podsets.markings import ELASTIC_JOB, elastic, elastic_kind, unsupported_markings
from queues.podsets.pod_resources import PodClaim, Requests, pod_claims, pod_requests, resource_rules
from queues.podsets.topology_requests import Request

# re-exported: callers name kinds and Kueue's markings through ``jobs``
__all__ = ["ELASTIC_JOB", "KINDS", "POD", "Kind", "elastic", "unsupported_markings"]

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
MIN_PARALLELISM = "kueue.x-k8s.io/job-min-parallelism"  # partial admission of a batch Job
COMPLETIONS_EQUAL_PARALLELISM = "kueue.x-k8s.io/job-completions-equal-parallelism"
DEFAULT_QUEUE = "default"


@dataclass(frozen=True, slots=True)
class PodSet:
    """Identical pods of one workload: ``count`` pods each requesting ``requests``."""

    name: str
    count: int
    requests: Mapping[str, int]
    constraints: selectors.NodeConstraints = field(default_factory=selectors.NodeConstraints)
    tolerations: tuple[selectors.Toleration, ...] = ()
    min_count: int | None = None  # partial admission: the fewest pods it may be admitted with
    topology: Request | None = None  # its pod template's podset-*-topology annotations (``queues.placement.topology``)
    # Devices claimed through DRA (``spec.resourceClaims``): charged into ``requests`` by
    # ``queues.dra`` when the workload is made, or ``unaccounted`` says why they could not be (the
    # workload then waits, Misconfigured: never admitted with its devices uncounted)
    claims: tuple[PodClaim, ...] = ()
    unaccounted: str | None = None
    devices: Mapping[str, int] = field(default_factory=dict)  # the part of ``requests`` its claims were charged
    # what one pod is charged instead on a flavor whose nodes serve only some alternatives of its
    # claims' prioritized lists (flavor -> resource -> milli-units; ``queues.dra.alternatives``)
    by_flavor: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    # what its containers asked, where Kueue's resource transformations made ``requests`` something
    # else (``queues.podsets.transformations``); None: they are ``requests`` (but the devices)
    container_requests: Mapping[str, int] | None = None

    def total(self) -> Requests:
        return {r: v * self.count for r, v in self.requests.items() if v}

    def devices_on(self, flavor: str) -> Mapping[str, int]:
        """What its claims are charged per pod on ``flavor`` (``devices``, less ``by_flavor``'s reductions)."""
        narrowed = self.by_flavor.get(flavor, {})
        return {r: v - (self.requests.get(r, 0) - narrowed[r]) if r in narrowed else v for r, v in self.devices.items()}

    def on(self, flavor: str, resource: str) -> int:
        """What its pods are charged of ``resource`` on ``flavor`` (``by_flavor``, else ``requests``)."""
        narrowed = self.by_flavor.get(flavor) or self.requests
        return narrowed.get(resource, self.requests.get(resource, 0)) * self.count

    @property
    def node_requests(self) -> Mapping[str, int]:
        """What one pod asks of a node's allocatable capacity: its containers' requests, without
        its DRA claims' charge (devices come from ResourceSlices, not from a node's capacity) or
        what resource transformations made of them (a node has the real resources)."""
        if self.container_requests is not None:
            return self.container_requests
        if not self.devices:
            return self.requests
        return {r: left for r, v in self.requests.items() if (left := v - self.devices.get(r, 0)) > 0}

    @property
    def placed_requests(self) -> Mapping[str, int]:
        """What one pod takes of a node where Turnstile places it by topology: its containers'
        requests and its DRA claims' charge, which the node's ResourceSlices offer
        (``queues.dra.node_capacity``), so its pods go where their devices are."""
        if not self.devices:
            return self.node_requests
        placed = dict(self.node_requests)
        for r, v in self.devices.items():
            placed[r] = placed.get(r, 0) + v
        return placed


@dataclass(frozen=True, slots=True)
class JobInfo:
    """What the queue needs to know about one job."""

    api_version: str
    kind: str
    namespace: str
    name: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    pod_sets: tuple[PodSet, ...]
    template_paths: Mapping[str, str] = field(default_factory=dict)  # pod set -> JSON pointer of its pod template
    priority_class_name: str | None = None  # the first pod template's spec.priorityClassName (Kubernetes')

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def queue_name(self) -> str | None:
        return self.labels.get(QUEUE_LABEL) or self.annotations.get(QUEUE_LABEL) or None

    @property
    def priority_class(self) -> str | None:
        """The WorkloadPriorityClass the job names (Kueue's label)."""
        return self.labels.get(PRIORITY_LABEL) or None

    @property
    def elastic(self) -> bool:
        """An elastic job (``elastic``): resized in place when its pods change in number."""
        return elastic_kind(self.api_version, self.kind, self.annotations)


def owned_by_parent(meta: Mapping[str, Any], owners: Container[tuple[str, str]] = KINDS) -> bool:
    """Whether an object's controller (its ``ownerReferences`` entry with ``controller: true``) is an
    integrated kind queued here (``owners``: the enabled integrations' (apiVersion, kind), all of them
    by default): then its parent's workload holds its pods (an AppWrapper's component, a JobSet's
    Job), and the object is never queued on its own, as in Kueue. A child of a kind whose integration
    is not enabled is not a part (Kueue's ``IsOwnerManagedByKueueForObject``): queued on its own."""
    return parent_of(meta, owners) is not None


def parent_of(meta: Mapping[str, Any], owners: Container[tuple[str, str]] = KINDS) -> str | None:
    """The uid of the parent an object is a part of (``owned_by_parent``), else None."""
    for ref in meta.get("ownerReferences") or []:
        if (
            isinstance(ref, Mapping)
            and ref.get("controller")
            and (str(ref.get("apiVersion")), str(ref.get("kind"))) in owners
        ):
            return str(ref.get("uid") or "")
    return None


def supported_kinds() -> list[str]:
    """The kinds a scenario's job entry may be: the integrated jobs, a Pod, a Deployment."""
    return [*(f"{k.api_version} {k.kind}" for k in KINDS.values()), "v1 Pod", "apps/v1 Deployment"]


def with_counts(pod_sets: tuple[PodSet, ...], counts: Mapping[str, int]) -> tuple[PodSet, ...]:
    """The pod sets with some counts replaced (a partial admission's)."""
    if not counts:
        return pod_sets
    return tuple(dataclasses.replace(ps, count=counts[ps.name]) if ps.name in counts else ps for ps in pod_sets)


def kind_of(obj: Mapping[str, Any]) -> Kind | None:
    return KINDS.get((str(obj.get("apiVersion")), str(obj.get("kind"))))


def read_job(obj: Any, kind: Kind | None = None, runtimes: trainjobs.Runtimes | None = None) -> JobInfo:
    """A job object's identity and pod sets, or ``errors.Invalid`` listing every problem.

    ``kind`` is the kind the caller read the object as (an informer knows the resource it
    listed; a webhook has the review's kind): a real API server's list items carry no
    ``apiVersion``/``kind``, so only a file a user wrote is read by its own TypeMeta. ``runtimes``
    finds the training runtime a TrainJob names (``queues.podsets.trainjobs``)."""
    if not isinstance(obj, Mapping):
        raise errors.Invalid([FieldError("", "must be a Kubernetes object (a mapping)")])
    kind = kind or kind_of(obj)
    if kind is None:
        raise errors.Invalid(
            [
                FieldError(
                    "kind",
                    f"{obj.get('apiVersion')} {obj.get('kind')} is not an integrated job kind; "
                    f"use one of: {', '.join(supported_kinds())}",
                )
            ]
        )
    problems: list[FieldError] = []
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        raise errors.Invalid([FieldError("metadata", "required: a job needs metadata.name")])
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        problems.append(FieldError("metadata.name", "required: the job's name"))
    namespace = meta.get("namespace") or "default"
    if not isinstance(namespace, str):
        problems.append(FieldError("metadata.namespace", "must be a string"))
    labels = _string_map(meta.get("labels"), "metadata.labels", problems)
    annotations = _string_map(meta.get("annotations"), "metadata.annotations", problems)
    spec = obj.get("spec")
    pod_sets: list[PodSet] = []
    template_paths: dict[str, str] = {}
    pod_priority: str | None = None
    if not isinstance(spec, Mapping):
        problems.append(FieldError("spec", "required: the job's spec"))
    else:
        found = layouts.templates(kind, obj, problems, runtimes) if kind is not POD else iter([("main", 1, obj, "")])
        for ps_name, count, template, path in found:
            spec_path = f"{path}{kind.directives.pod_spec}" if path else "spec"
            ps = _pod_set(ps_name, count, template["spec"], spec_path, problems)
            if ps is not None and (meta := template.get("metadata")) and isinstance(meta, Mapping):
                ps = _with_topology(ps, meta.get("annotations"), path or "", problems)
            if pod_priority is None and isinstance(template["spec"].get("priorityClassName"), str):
                pod_priority = template["spec"]["priorityClassName"] or None
            if ps is not None:
                pod_sets.append(ps)
                if path is not None:
                    template_paths[ps_name] = sys.intern(json_pointer(path))
        if not pod_sets and not problems:
            problems.append(FieldError("spec", "the job defines no pods"))
        if len(pod_sets) > layouts.MAX_POD_SETS:
            problems.append(
                FieldError(
                    "spec",
                    f"the job has {len(pod_sets)} pod sets ({', '.join(p.name for p in pod_sets)}); a workload holds "
                    f"at most {layouts.MAX_POD_SETS} (as Kueue's): merge groups of identical pods",
                )
            )
        if kind.layout == "job" and pod_sets and MIN_PARALLELISM in annotations:
            pod_sets[0] = _partial(pod_sets[0], annotations[MIN_PARALLELISM], problems)
    podsready.own_timeout(annotations, problems)  # (a job's own waitForPodsReady timeout: a duration)
    if problems:
        raise errors.Invalid(problems)
    return JobInfo(
        api_version=kind.api_version,
        kind=kind.kind,
        namespace=sys.intern(str(namespace)),
        name=str(name),
        labels=labels,
        annotations=annotations,
        pod_sets=tuple(pod_sets),
        template_paths=template_paths,
        priority_class_name=pod_priority,
    )


def _partial(ps: PodSet, raw: str, problems: list[FieldError]) -> PodSet:
    """The Job's pod set with its ``min_count`` from the annotation: a whole number from 1 to the
    Job's pods count (a running Job admitted partially has parallelism = what it was admitted with,
    so equal is fine here; a new Job must ask for fewer, which the webhook checks)."""
    where = f"metadata.annotations[{MIN_PARALLELISM}]"
    try:
        value = int(raw)
    except ValueError:
        problems.append(FieldError(where, f"must be a whole number of pods, not {raw!r}"))
        return ps
    if not 1 <= value <= ps.count:
        problems.append(
            FieldError(where, f"must be between 1 and the Job's parallelism {ps.count} (it is {value}); lower it")
        )
        return ps
    return dataclasses.replace(ps, min_count=value)


def creation_problems(info: JobInfo) -> list[FieldError]:
    """What Kueue's webhook refuses when such a job is created, beyond reading it: a minimum
    parallelism must be below the Job's parallelism (otherwise it could never run partially); an
    elastic job may neither run partially nor ask for a required or preferred topology."""
    out = []
    if info.elastic and any(ps.min_count is not None for ps in info.pod_sets):
        out.append(
            FieldError(
                f"metadata.annotations[{MIN_PARALLELISM}]",
                f"partial admission and elastic job ({ELASTIC_JOB}) cannot be used together; remove one",
            )
        )
    if info.elastic and any(
        ps.topology is not None and ps.topology.mode in ("required", "preferred") for ps in info.pod_sets
    ):
        out.append(
            FieldError(
                "metadata.annotations of its pod templates",
                f"a required or preferred topology is not supported with elastic jobs ({ELASTIC_JOB}); remove one",
            )
        )
    for ps in info.pod_sets:
        if ps.min_count is not None and ps.min_count >= ps.count:
            out.append(
                FieldError(
                    f"metadata.annotations[{MIN_PARALLELISM}]",
                    f"must be less than the Job's parallelism {ps.count} (it is {ps.min_count}); a Job that may "
                    "start with fewer pods names the fewest it can run with",
                )
            )
    return out


def pointer_token(key: str) -> str:
    """One RFC 6901 reference token: ``~`` and ``/`` escaped (``turnstile.dev~1admission``)."""
    return key.replace("~", "~0").replace("/", "~1")


def json_pointer(path: str) -> str:
    """A field path as reported in errors (``spec.replicatedJobs[0].template``) as an RFC 6901 pointer."""
    parts = re.sub(r"\[(\d+)\]", r".\1", path).split(".")
    return "".join("/" + pointer_token(p) for p in parts if p)


def _string_map(value: Any, path: str, problems: list[FieldError]) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        problems.append(FieldError(path, "must be a map of strings"))
        return {}
    out = {}
    for k, v in value.items():
        if not isinstance(v, str):
            problems.append(FieldError(f"{path}[{k}]", f"must be a string, not {v!r} (quote it in YAML)"))
        else:
            out[sys.intern(str(k))] = sys.intern(v)  # keys and values repeat across thousands of jobs
    return out


def pod_templates(
    obj: Mapping[str, Any], kind: Kind | None = None, runtimes: trainjobs.Runtimes | None = None
) -> list[tuple[str, int, Mapping[str, Any]]]:
    """(pod set name, pod count, pod template) of every pod set of a job, for whatever runs its pods
    (a TrainJob's with Turnstile's runtime patch applied, as the Trainer makes them)."""
    kind = kind or kind_of(obj)
    spec = obj.get("spec")
    if kind is None or not isinstance(spec, Mapping):
        return []
    problems: list[FieldError] = []
    found = [
        (name, count, template)
        for name, count, template, _ in layouts.templates(kind, obj, problems, runtimes, patched=True)
    ]
    if problems:
        raise errors.Invalid(problems)
    return found


def api_problems(obj: Mapping[str, Any], kind: Kind | None = None) -> list[FieldError]:
    """What a real API server refuses in a job's pod templates (for a custom kind: in the pods its
    operator would create): the resource rules of every container. Empty when it would accept it."""
    kind = kind or kind_of(obj)
    spec = obj.get("spec")
    if kind is None or not isinstance(spec, Mapping):
        return []
    problems: list[FieldError] = []
    out: list[FieldError] = []
    for _, _, template, path in layouts.templates(kind, obj, problems):
        if path is None:
            continue  # made by the kind's operator from its own defaults
        pod = template.get("spec") or {}
        for section in ("containers", "initContainers"):
            for i, c in enumerate(pod.get(section) or []):
                if isinstance(c, Mapping):
                    where = f"{path}{kind.directives.pod_spec}.{section}[{i}].resources"
                    out.extend(resource_rules(c.get("resources"), where))
    return out


def _with_topology(ps: PodSet, annotations: Any, path: str, problems: list[FieldError]) -> PodSet:
    """The pod set with what its template's annotations ask of a topology (``queues.podsets.topology_requests``)."""
    if not isinstance(annotations, Mapping) or not any(a in annotations for a in topology_requests.ANNOTATIONS):
        return ps
    plain = {str(k): str(v) for k, v in annotations.items()}
    request, wrong = topology_requests.request_of(plain, ps.count, path or "metadata")
    problems.extend(wrong)
    return dataclasses.replace(ps, topology=request) if request is not None else ps


def _pod_set(
    name: str, count: int, pod_spec: Mapping[str, Any], path: str, problems: list[FieldError]
) -> PodSet | None:
    before = len(problems)
    requests = pod_requests(pod_spec, path, problems)
    tolerations = tuple(
        selectors.Toleration.from_dict(t) for t in pod_spec.get("tolerations") or () if isinstance(t, Mapping)
    )
    if len(problems) > before:
        return None
    claims = pod_claims(pod_spec, path, problems)
    if len(problems) > before:
        return None
    return PodSet(
        name=name,
        count=count,
        requests=requests,
        constraints=selectors.NodeConstraints.from_pod_spec(pod_spec),
        tolerations=tolerations,
        claims=claims,
    )
