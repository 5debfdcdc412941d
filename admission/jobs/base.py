"""The one protocol every integrated job kind implements (Kueue's GenericJob, on plain JSON).

An ``Integration`` knows where its kind lives in the API, which field suspends it, which
conditions mean it is over, and how to count its active pods; the pod sets themselves come
from the pure core (``queues.jobs.read_job``). ``view`` reduces a job object to the few
fields the controller keeps in memory (``JobView``), so tens of thousands of jobs cost little.
``patch`` builds the single RFC 6902 patch that runs a job with its flavors' scheduling
directives (``run``) or suspends it and restores its own (``restore``): one mechanism for
admission and eviction, valid for built-in and custom resources alike.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from admission.kube.client import Obj, ResourceRef
from queues import errors, jobs

ADMISSION_ANNOTATION = "turnstile.dev/admission"  # on a running job: which admission started it


@dataclass(frozen=True, slots=True)
class PodSetInfo:
    """What a pod set's template must carry: node selector and tolerations (Kueue's PodSetInfo)."""

    name: str
    node_selector: Mapping[str, str]
    tolerations: Sequence[Mapping[str, Any]]


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
    problems: tuple[str, ...] = ()
    # pod set -> (its template has a nodeSelector, has tolerations)
    template_fields: dict[str, tuple[bool, bool]] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def _walk(obj: Any, path: Sequence[str]) -> Any:
    for key in path:
        obj = obj.get(key) if isinstance(obj, Mapping) else None
    return obj


def _pointer_get(obj: Any, pointer: str) -> Any:
    for part in pointer.strip("/").split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(obj, list) and part.isdigit() and int(part) < len(obj):
            obj = obj[int(part)]
        elif isinstance(obj, Mapping):
            obj = obj.get(part)
        else:
            return None
    return obj


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def condition_true(obj: Obj, kinds: Sequence[str]) -> bool:
    return any(
        c.get("type") in kinds and c.get("status") == "True"
        for c in (_walk(obj, ("status", "conditions")) or [])
        if isinstance(c, Mapping)
    )


@dataclass(frozen=True, slots=True)
class Integration:
    """One job kind. A new kind is a module that builds one of these."""

    ref: ResourceRef
    finished_conditions: tuple[str, ...]
    count_active: Callable[[Obj], int]

    @property
    def kind(self) -> jobs.Kind:
        return jobs.KINDS[(self.ref.api_version, self.ref.kind)]

    @property
    def suspend_pointer(self) -> str:
        return "/" + "/".join(self.kind.suspend_path)

    def is_suspended(self, obj: Obj) -> bool:
        return bool(_walk(obj, self.kind.suspend_path))

    def finished(self, obj: Obj) -> bool:
        return condition_true(obj, self.finished_conditions)

    def is_active(self, obj: Obj) -> bool:
        return self.count_active(obj) > 0

    def view(self, obj: Obj) -> JobView:
        meta = obj.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        info: jobs.JobInfo | None = None
        problems: tuple[str, ...] = ()
        fields: dict[str, tuple[bool, bool]] = {}
        try:
            info = jobs.read_job(obj)
        except errors.Invalid as exc:
            problems = tuple(str(p) for p in exc.errors)
        else:
            for ps, pointer in info.template_paths.items():
                spec = _pointer_get(obj, pointer + "/spec") or {}
                fields[ps] = ("nodeSelector" in spec, "tolerations" in spec)
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
            problems=problems,
            template_fields=fields,
        )

    def patch(self, view: JobView, *, suspend: bool, infos: Sequence[PodSetInfo], admission: str | None) -> list[Obj]:
        """The JSON patch that sets the suspend field, every pod set's directives and the admission mark.

        ``run_with_podsets_info`` is ``suspend=False`` with the flavors' directives and an
        admission; ``restore_podsets_info`` is ``suspend=True`` with the job's own and none.
        """
        assert view.info is not None, "only a well-formed job is admitted"
        ops: list[Obj] = [{"op": "add", "path": self.suspend_pointer, "value": suspend}]
        for info in infos:
            base = view.info.template_paths[info.name] + "/spec"
            has_selector, has_tolerations = view.template_fields.get(info.name, (False, False))
            for key, value, present in (
                ("nodeSelector", dict(info.node_selector), has_selector),
                ("tolerations", [dict(t) for t in info.tolerations], has_tolerations),
            ):
                if value:
                    ops.append({"op": "add", "path": f"{base}/{key}", "value": value})
                elif present:
                    ops.append({"op": "remove", "path": f"{base}/{key}"})
        path = f"/metadata/annotations/{_escape(ADMISSION_ANNOTATION)}"
        if admission is not None:
            if view.has_annotations:
                ops.append({"op": "add", "path": path, "value": admission})
            else:
                ops.append({"op": "add", "path": "/metadata/annotations", "value": {ADMISSION_ANNOTATION: admission}})
        elif view.admission is not None:
            ops.append({"op": "remove", "path": path})
        return ops
