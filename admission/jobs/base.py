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
from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass, field

from admission.jobs import directive_ops
from admission.jobs.directive_ops import PodSetInfo
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
from admission.jobs.pod_refs import PodRef, PodsOf
from admission.kube.client import Obj, ResourceRef
from queues import errors
from queues.model import SharedShapes
from queues.placement.pinning import TOPOLOGY_GATE
from queues.podsets import jobs, pods, trainjobs

# (PodSetInfo is directive_ops', PodRef and PodsOf pod_refs': named here as every caller names them)
__all__ = ["ExternalTemplates", "Integration", "JobView", "PodRef", "PodSetInfo", "PodsOf"]


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
    ready_pods: int | None = None  # how many are, where its status counts them (an elastic Job's admitted ones)
    problems: tuple[str, ...] = ()
    version: str = ""  # metadata.resourceVersion (compared for equality only)
    queue_label: str | None = None  # kueue.x-k8s.io/queue-name, read even when the job is malformed
    # a part's (its controller is a queued kind, an AppWrapper's component: never queued itself): that uid
    parent: str | None = None
    # pod set -> its template's (nodeSelector, tolerations) as they are; None where absent
    # (only pod sets that have either: most jobs have none, and a controller holds 100,000 views)
    directives: dict[str, tuple[dict[str, str] | None, list[Obj] | None]] = field(default_factory=dict)
    # pod set -> (whether its template's metadata has annotations, the POD_ANNOTATIONS among them);
    # only pod sets whose template has metadata at all
    template_meta: dict[str, tuple[bool, dict[str, str]]] = field(default_factory=dict)
    # pod set -> its template's scheduling gates, where it has any
    gates: dict[str, list[str]] = field(default_factory=dict)
    # a job-wide node selector its operator adds to every pod (a SparkApplication's ``spec.nodeSelector``,
    # ``Directives.shared_selector``), as it is; None where absent
    shared_selector: dict[str, str] | None = None
    external: Obj | None = None  # an ExternalTemplates kind's part its writer needs (``Integration.external``)
    pod_selector: str | None = None  # an elastic kind's: the label selector of its pods (``PodsOf``)
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

    @property
    def part(self) -> bool:
        """Its controller is a queued kind (``parent``): its parent's workload holds its pods."""
        return self.parent is not None

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
            if self.shared_selector is not None:
                selector = {**self.shared_selector, **(selector or {})}
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
    ready_count: Callable[[Obj], int] | None = None  # how many pods are Ready or done, where it says
    # its pod templates are not in the job (see ``ExternalTemplates``): its directives are written
    # in a patch of their own, before it is unsuspended, and a restore writes none
    external: ExternalTemplates | None = None
    pods_of: PodsOf | None = None  # an elastic kind's (``queues.podsets.markings.ELASTIC_KINDS``)

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
    def pins_pods(self) -> bool:
        """Whether its pod sets' templates can carry Turnstile's topology gate (see ``Directives``):
        else a pod set placed by topology has its nodes held but its pods are not pinned."""
        return self.external is None and self.kind.directives.gates is not None

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

    def _pod_selector(self, obj: Obj, info: jobs.JobInfo | None) -> str | None:
        """An elastic job's pods' selector (``PodsOf``): kept for those only (a controller holds
        100,000 views)."""
        if self.pods_of is None or info is None or not info.elastic:
            return None
        return self.pods_of.selector(obj)

    def is_active(self, obj: Obj) -> bool:
        return self.count_active(obj) > 0

    def view(
        self,
        obj: Obj,
        shapes: SharedShapes | None = None,
        runtimes: trainjobs.Runtimes | None = None,
        previous: JobView | None = None,
        owners: Container[tuple[str, str]] = jobs.KINDS,
    ) -> JobView:
        """What the controller keeps of ``obj``; pod sets equal to earlier jobs' are shared via ``shapes``;
        ``runtimes`` finds a TrainJob's training runtime. With ``previous`` (the same job's last view),
        what was read from its spec, labels and annotations is reused when none of them changed (the
        API server bumps ``metadata.generation`` on every spec change): a job's status updates, most
        of its events, cost no parsing of its pod templates. ``owners``: the enabled integrations'
        kinds, whose children are parts (``JobView.part``)."""
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
                ready_pods=None if self.ready_count is None else self.ready_count(obj),
                version=str(meta.get("resourceVersion") or ""),
                shared_selector=self._shared_selector(obj),
                parent=jobs.parent_of(meta, owners),
                pod_selector=self._pod_selector(obj, previous.info),
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
            where = self.kind.directives
            for ps, pointer in info.template_paths.items():
                selector = pointer_get(obj, pointer + where.node_selector)
                tolerations = pointer_get(obj, pointer + where.tolerations)
                if selector is not None or tolerations is not None:
                    directives[ps] = (selector, tolerations)
                held = pointer_get(obj, pointer + where.gates) if where.gates is not None else None
                if held:
                    gates[ps] = pods.gates({"spec": {"schedulingGates": held}})
                meta_ = pointer_get(obj, pointer + where.annotations_holder)
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
            ready_pods=None if self.ready_count is None else self.ready_count(obj),
            problems=problems,
            version=str(meta.get("resourceVersion") or ""),
            queue_label=queue_label(meta),
            parent=jobs.parent_of(meta, owners),
            directives=directives,
            template_meta=template_meta,
            gates=gates,
            shared_selector=self._shared_selector(obj),
            external=self.external.keep(obj) if self.external is not None else None,
            pod_selector=self._pod_selector(obj, info),
            keep_until=annotations.get(KEEP_UNTIL),
            source=source,
            created=str(meta.get("creationTimestamp") or ""),
        )

    def _shared_selector(self, obj: Obj) -> dict[str, str] | None:
        pointer = self.kind.directives.shared_selector
        found = pointer_get(obj, pointer) if pointer is not None else None
        return dict(found) if isinstance(found, Mapping) else None

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
        where = self.kind.directives
        written = False
        for info in infos:
            if info.name not in view.info.template_paths:
                continue
            written = True
            pointer = view.info.template_paths[info.name]
            written_now = directive_ops.Written(
                *view.directives.get(info.name, (None, None)),
                view.template_meta.get(info.name),
                view.gates.get(info.name, []),
            )
            ops.extend(directive_ops.pod_set_ops(written_now, info, pointer, where))
        if written and where.shared_selector is not None and view.shared_selector is not None:
            # (its pod sets' selectors now hold it: the operator takes one or the other, as Kueue moves it)
            ops.append({"op": "remove", "path": where.shared_selector})
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
