"""The one protocol every integrated job kind implements (Kueue's GenericJob, on plain JSON).

An ``Integration`` knows where its kind lives in the API, which field suspends it, which
conditions mean it is over, and how to count its active pods; the pod sets themselves come
from the pure core (``queues.podsets.jobs.read_job``). ``view`` reduces a job object to the few
fields the controller keeps in memory (``JobView``), so tens of thousands of jobs cost little.
``patch`` builds the single RFC 6902 patch that runs a job with its flavors' scheduling
directives (``run``) or suspends it and restores its own (``restore``): one mechanism for
admission and eviction, valid for built-in and custom resources alike.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from admission.jobs.job_fields import (
    ADMISSION_ANNOTATION,
    KEEP_UNTIL,
    POD_ANNOTATIONS,
    condition_true,
    pointer_get,
    queue_label,
    read_from,
    walk,
)
from admission.kube.client import Obj, ResourceRef
from queues import errors
from queues.model import SharedShapes
from queues.placement.pinning import TOPOLOGY_GATE
from queues.podsets import jobs, pods, trainjobs


@dataclass(frozen=True, slots=True)
class PodSetInfo:
    """What a pod set's template must carry: node selector, tolerations, the annotations of
    admission checks and topology placement (Kueue's PodSetInfo; ``POD_ANNOTATIONS`` are
    Turnstile's to set and remove) and whether its pods wait for pinning (``TOPOLOGY_GATE``)."""

    name: str
    node_selector: Mapping[str, str]
    tolerations: Sequence[Mapping[str, Any]]
    annotations: Mapping[str, str] = field(default_factory=dict)
    topology_gate: bool = False  # placed by topology: its pods are pinned to their nodes (``queues.placement.pinning``)


@dataclass(slots=True)
class JobView:
    """The controller's memory of one job: identity, state, pod sets and what its templates hold."""

    integration: Integration
    uid: str
    namespace: str
    name: str
    suspended: bool
    finished: bool
    active: bool
    admission: str | None  # the ADMISSION_ANNOTATION, when the job was started by Turnstile
    has_annotations: bool
    info: jobs.JobInfo | None  # None: the job is malformed, see ``problems``
    started: bool = False  # status.startTime is set (a batch Job's template is then immutable)
    ready: bool = False  # every pod is Ready or done (waitForPodsReady), as its kind's status says
    problems: tuple[str, ...] = ()
    version: str = ""  # metadata.resourceVersion (compared for equality only)
    queue_label: str | None = None  # kueue.x-k8s.io/queue-name, read even when the job is malformed
    # pod set -> its template's (nodeSelector, tolerations) as they are; None where absent
    # (only pod sets that have either: most jobs have none, and a controller holds 100,000 views)
    directives: dict[str, tuple[dict[str, str] | None, list[Obj] | None]] = field(default_factory=dict)
    # pod set -> (whether its template's metadata has annotations, the POD_ANNOTATIONS among them);
    # only pod sets whose template has metadata at all
    template_meta: dict[str, tuple[bool, dict[str, str]]] = field(default_factory=dict)
    # pod set -> its template's scheduling gates, where it has any
    gates: dict[str, list[str]] = field(default_factory=dict)
    external: Obj | None = None  # an ExternalTemplates kind's part its writer needs (``Integration.external``)
    keep_until: str | None = None  # turnstile.dev/keep-until: kept from idle reclaim until then (RFC 3339)
    # what the pod sets were read from: (metadata.generation, a hash of labels and annotations);
    # an event that changes neither (a status update) reuses them (``Integration.view``'s ``previous``)
    source: tuple[int, int] | None = None
    # a workload of plain Pods (``admission.controller.watch.podgroups``): its pods, which the enactor
    # ungates or deletes one by one; None for a job, which is suspended and resumed as a whole
    pods: tuple[PodRef, ...] | None = None
    # the Kubernetes object Events and owner references name: the job itself, or a group's first pod
    object_name: str = ""
    object_uid: str = ""
    created: str = ""  # metadata.creationTimestamp (kueue_workload_creation_latency_seconds)
    key: str = field(init=False)  # namespace/name, the workload's key (made once: it is used everywhere)

    def __post_init__(self) -> None:
        self.key = f"{self.namespace}/{self.name}"
        self.object_name = self.object_name or self.name
        self.object_uid = self.object_uid or self.uid

    def carries(self, infos: Sequence[PodSetInfo], counts: Mapping[str, int] | None = None) -> bool:
        """Whether every pod template already holds exactly these scheduling directives (and the
        job runs ``counts`` pods, where given)."""
        if (
            counts
            and self.info is not None
            and self.integration.count_pointer is not None
            and any(counts.get(ps.name, ps.count) != ps.count for ps in self.info.pod_sets)
        ):
            return False
        for info in infos:
            if (
                self.integration.external is None
                and self.info is not None
                and info.name not in self.info.template_paths
            ):
                continue  # no template in the job to carry them (see ``patch``)
            selector, tolerations = self.directives.get(info.name, (None, None))
            if (selector or {}) != dict(info.node_selector) or (tolerations or []) != [
                dict(t) for t in info.tolerations
            ]:
                return False
            if self.template_meta.get(info.name, (False, {}))[1] != dict(info.annotations):
                return False
            if (TOPOLOGY_GATE in self.gates.get(info.name, ())) != info.topology_gate:
                return False
        return True


@dataclass(frozen=True, slots=True)
class PodRef:
    """One pod of a pod workload, as the enactor needs it."""

    name: str
    uid: str
    pod_set: str  # ``main``, or the pod's role in its group
    gated: bool  # held by Turnstile's scheduling gate
    live: bool  # neither finished nor being deleted
    obj: Obj  # the pod as last seen (an ungating patch is computed from it)

    @property
    def running(self) -> bool:
        """Ungated and alive: it runs (or is being scheduled) under some admission."""
        return self.live and not self.gated


@dataclass(frozen=True, slots=True)
class ExternalTemplates:
    """For a kind whose pod templates are not in the job (a TrainJob's are in its training runtime):
    where its scheduling directives are written instead (``admission.jobs.trainjob``). ``read``: per
    pod set, the (nodeSelector, tolerations, pod annotations) written; ``keep``: the part of the job
    the writer needs later (kept in ``JobView.external``); ``ops``: the JSON patch operations that
    make the job carry exactly these infos (empty infos: none)."""

    read: Callable[[Obj], dict[str, tuple[dict[str, str] | None, list[Obj] | None, dict[str, str]]]]
    keep: Callable[[Obj], Obj]
    ops: Callable[[JobView, Sequence[PodSetInfo]], list[Obj]]


@dataclass(frozen=True, slots=True)
class Integration:
    """One job kind. A new kind is a module that builds one of these."""

    ref: ResourceRef
    finished_conditions: tuple[str, ...]
    count_active: Callable[[Obj], int]
    # for a kind whose end is a status field rather than a condition (RayJob): when it is over
    is_finished: Callable[[Obj], bool] | None = None
    # partial admission: the field that sets how many pods the job runs (a batch Job's parallelism)
    count_pointer: str | None = None
    # waitForPodsReady: whether every pod of the running job is Ready (or done), from its status as
    # Kueue reads it; None: never said (the job counts as Ready)
    pods_ready: Callable[[Obj, jobs.JobInfo], bool] | None = None
    # its pod templates are not in the job (see ``ExternalTemplates``): its directives are written
    # in a patch of their own, before it is unsuspended, and a restore writes none
    external: ExternalTemplates | None = None

    @property
    def kind(self) -> jobs.Kind:
        if (self.ref.api_version, self.ref.kind) == (jobs.POD.api_version, jobs.POD.kind):
            return jobs.POD
        return jobs.KINDS[(self.ref.api_version, self.ref.kind)]

    @property
    def framework(self) -> str:
        """Kueue's name for the integration (``integrations.frameworks``): ``batch/job``,
        ``kubeflow.org/pytorchjob``, ``jobset.x-k8s.io/jobset``, ``ray.io/rayjob``."""
        return self.kind.framework

    @property
    def built_in(self) -> bool:
        """Served by every API server (no CRD to install)."""
        return self.ref.api_version.rpartition("/")[0] in ("", "batch", "apps")

    @property
    def suspend_pointer(self) -> str:
        return "/" + "/".join(self.kind.suspend_path)

    def is_suspended(self, obj: Obj) -> bool:
        if not self.kind.suspend_path:  # a pod: held by Turnstile's scheduling gate
            return pods.gated(obj)
        return bool(walk(obj, self.kind.suspend_path))

    def finished(self, obj: Obj) -> bool:
        if self.is_finished is not None:
            return self.is_finished(obj)
        return condition_true(obj, self.finished_conditions)

    def is_active(self, obj: Obj) -> bool:
        return self.count_active(obj) > 0

    def view(
        self,
        obj: Obj,
        shapes: SharedShapes | None = None,
        runtimes: trainjobs.Runtimes | None = None,
        previous: JobView | None = None,
    ) -> JobView:
        """What the controller keeps of ``obj``; pod sets equal to earlier jobs' are shared via ``shapes``;
        ``runtimes`` finds a TrainJob's training runtime. With ``previous`` (the same job's last view),
        what was read from its spec, labels and annotations is reused when none of them changed (the
        API server bumps ``metadata.generation`` on every spec change): a job's status updates, most
        of its events, cost no parsing of its pod templates."""
        meta = obj.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        # (a TrainJob's pod sets come from its runtime too, an external kind's from other objects)
        source = read_from(meta) if self.external is None and self.kind.layout != "trainjob" else None
        if source is not None and previous is not None and previous.source == source and previous.info is not None:
            return dataclasses.replace(
                previous,
                suspended=self.is_suspended(obj),
                finished=self.finished(obj),
                active=self.is_active(obj),
                admission=annotations.get(ADMISSION_ANNOTATION),
                has_annotations=bool(annotations),
                started=bool((obj.get("status") or {}).get("startTime")),
                ready=self.pods_ready is None or self.pods_ready(obj, previous.info),
                version=str(meta.get("resourceVersion") or ""),
            )
        info: jobs.JobInfo | None = None
        problems: tuple[str, ...] = ()
        directives: dict[str, tuple[dict[str, str] | None, list[Obj] | None]] = {}
        template_meta: dict[str, tuple[bool, dict[str, str]]] = {}
        gates: dict[str, list[str]] = {}
        try:
            info = jobs.read_job(obj, self.kind, runtimes)
        except errors.Invalid as exc:
            problems = tuple(str(p) for p in exc.errors)
        else:
            if shapes is not None:
                info = dataclasses.replace(info, pod_sets=shapes.share(info.pod_sets)[0])
            if self.external is not None:
                for ps, (selector, tolerations, written) in self.external.read(obj).items():
                    if selector is not None or tolerations is not None:
                        directives[ps] = (selector, tolerations)
                    template_meta[ps] = (bool(written), {k: v for k, v in written.items() if k in POD_ANNOTATIONS})
            for ps, pointer in info.template_paths.items():
                spec = pointer_get(obj, pointer + "/spec") or {}
                selector, tolerations = spec.get("nodeSelector"), spec.get("tolerations")
                if selector is not None or tolerations is not None:
                    directives[ps] = (selector, tolerations)
                if spec.get("schedulingGates"):
                    gates[ps] = pods.gates({"spec": spec})
                meta_ = pointer_get(obj, pointer + "/metadata")
                if isinstance(meta_, Mapping):
                    notes = meta_.get("annotations")
                    ours = {k: str(notes[k]) for k in POD_ANNOTATIONS if isinstance(notes, Mapping) and k in notes}
                    template_meta[ps] = (isinstance(notes, Mapping), ours)
        return JobView(
            integration=self,
            uid=str(meta.get("uid")),
            namespace=str(meta.get("namespace") or "default"),
            name=str(meta.get("name")),
            suspended=self.is_suspended(obj),
            finished=self.finished(obj),
            active=self.is_active(obj),
            admission=annotations.get(ADMISSION_ANNOTATION),
            has_annotations=bool(annotations),
            info=info,
            started=bool((obj.get("status") or {}).get("startTime")),
            ready=info is not None and (self.pods_ready is None or self.pods_ready(obj, info)),
            problems=problems,
            version=str(meta.get("resourceVersion") or ""),
            queue_label=queue_label(meta),
            directives=directives,
            template_meta=template_meta,
            gates=gates,
            external=self.external.keep(obj) if self.external is not None else None,
            keep_until=annotations.get(KEEP_UNTIL),
            source=source,
            created=str(meta.get("creationTimestamp") or ""),
        )

    def patch(
        self,
        view: JobView,
        *,
        suspend: bool | None,
        infos: Sequence[PodSetInfo],
        admission: str | None,
        counts: Mapping[str, int] | None = None,
    ) -> list[Obj]:
        """The JSON patch that sets the suspend field, the pod sets' directives and the admission mark.

        Kueue's operations are three uses of it: ``run_with_podsets_info`` (``suspend=False``,
        the flavors' directives, an admission), ``suspend`` (``suspend=True``, no directives: a
        running Job's template cannot change; the admission mark kept) and
        ``restore_podsets_info`` (``suspend=None``, the job's own directives and no mark, once
        it is suspended). So a job without the mark always carries its own directives.

        ``counts``: the pods each pod set runs (a partial admission's, or the job's own to restore),
        where they differ from what the job says now (``count_ops``). A pod set without a template
        in the job (a RayJob's default submitter, made by KubeRay) takes no directives.
        """
        assert view.info is not None, "only a well-formed job is admitted"
        ops: list[Obj] = []
        if suspend is not None:
            ops.append({"op": "add", "path": self.suspend_pointer, "value": suspend})
        ops.extend(self.count_ops(view, counts or {}))
        if self.external is not None:
            ops.extend(self.external.ops(view, infos))
            infos = ()
        for info in infos:
            if info.name not in view.info.template_paths:
                continue
            base = view.info.template_paths[info.name] + "/spec"
            selector, tolerations = view.directives.get(info.name, (None, None))
            for key, value, present in (
                ("nodeSelector", dict(info.node_selector), selector is not None),
                ("tolerations", [dict(t) for t in info.tolerations], tolerations is not None),
            ):
                if value:
                    ops.append({"op": "add", "path": f"{base}/{key}", "value": value})
                elif present:
                    ops.append({"op": "remove", "path": f"{base}/{key}"})
            ops.extend(_annotation_ops(view, info, view.info.template_paths[info.name]))
            ops.extend(_gate_ops(view, info, base))
        path = f"/metadata/annotations/{jobs.pointer_token(ADMISSION_ANNOTATION)}"
        if admission is not None and admission == view.admission:
            pass  # kept as it is
        elif admission is not None:
            if view.has_annotations:
                ops.append({"op": "add", "path": path, "value": admission})
            else:
                ops.append({"op": "add", "path": "/metadata/annotations", "value": {ADMISSION_ANNOTATION: admission}})
        elif view.admission is not None:
            ops.append({"op": "remove", "path": path})
        return ops

    def count_ops(self, view: JobView, counts: Mapping[str, int]) -> list[Obj]:
        """Operations that make the job run ``counts`` pods (Kueue's partial admission of a batch
        Job: its parallelism, and its completions too when the Job asks them kept equal)."""
        assert view.info is not None
        if self.count_pointer is None or not counts:
            return []
        ops: list[Obj] = []
        for ps in view.info.pod_sets:
            wanted = counts.get(ps.name)
            if wanted is not None and wanted != ps.count:
                ops.append({"op": "add", "path": self.count_pointer, "value": wanted})
                if view.info.annotations.get(jobs.COMPLETIONS_EQUAL_PARALLELISM) == "true":
                    ops.append({"op": "add", "path": "/spec/completions", "value": wanted})
        return ops


def _gate_ops(view: JobView, info: PodSetInfo, spec: str) -> list[Obj]:
    """JSON patch operations that add or remove ``TOPOLOGY_GATE`` on a template (``spec``: its
    spec's pointer); gates of others are left as they are."""
    current = view.gates.get(info.name, [])
    if info.topology_gate and TOPOLOGY_GATE not in current:
        if current:
            return [{"op": "add", "path": f"{spec}/schedulingGates/-", "value": {"name": TOPOLOGY_GATE}}]
        return [{"op": "add", "path": f"{spec}/schedulingGates", "value": [{"name": TOPOLOGY_GATE}]}]
    if not info.topology_gate and TOPOLOGY_GATE in current:
        index = current.index(TOPOLOGY_GATE)
        if len(current) == 1:
            return [{"op": "remove", "path": f"{spec}/schedulingGates"}]
        return [
            {"op": "test", "path": f"{spec}/schedulingGates/{index}/name", "value": TOPOLOGY_GATE},
            {"op": "remove", "path": f"{spec}/schedulingGates/{index}"},
        ]
    return []


def _annotation_ops(view: JobView, info: PodSetInfo, template: str) -> list[Obj]:
    """JSON patch operations that make the template's POD_ANNOTATIONS exactly ``info.annotations``."""
    meta = view.template_meta.get(info.name)
    has_meta, has_notes, current = (meta is not None, meta[0], meta[1]) if meta is not None else (False, False, {})
    wanted = dict(info.annotations)
    if wanted == current:
        return []
    if not has_meta:
        return [{"op": "add", "path": f"{template}/metadata", "value": {"annotations": wanted}}] if wanted else []
    if not has_notes:
        return [{"op": "add", "path": f"{template}/metadata/annotations", "value": wanted}] if wanted else []
    ops: list[Obj] = []
    base = f"{template}/metadata/annotations/"
    for key in POD_ANNOTATIONS:
        if key in wanted and current.get(key) != wanted[key]:
            ops.append({"op": "add", "path": base + jobs.pointer_token(key), "value": wanted[key]})
        elif key not in wanted and key in current:
            ops.append({"op": "remove", "path": base + jobs.pointer_token(key)})
    return ops
