"""ProvisioningRequests for workloads that hold quota with admission checks still to pass.

Two-phase admission (``queues.cycle.provisioning`` has the semantics). For a workload whose quota
reservation must pass ProvisioningRequest checks, this keeps, per check, one
``autoscaling.x-k8s.io/v1`` ProvisioningRequest named ``<job>-<check>-<attempt>`` and a
``PodTemplate`` per pod set that needs capacity (the job's own template with the flavor's node
labels and tolerations, as the job will run), owned by the job and labelled with its uid.

It is level-triggered like the enactor: ``sync(job uid)`` compares the requests that exist
with those the workload's state calls for (the current attempt's while it holds quota; none
once it is evicted, finished or gone) and creates or deletes the difference. An informer on
ProvisioningRequests reports every change of a request's conditions; in the leader's next step
(``decide``, a capability's hook) what they mean becomes the scheduler's check decisions
(``queues.cycle.provisioning.verdict``), and after it (``stepped``) the jobs the step touched are
synced. A cluster without the ProvisioningRequest CRD is fine: the informer keeps retrying
quietly, and only a ClusterQueue that names a check needs it.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from admission.controller.capability import Capability, Loop, StepContext, Stepped
from admission.controller.term import Term
from admission.controller.workqueue import Retry, WorkQueue
from admission.jobs.base import JobView, PodSetInfo
from admission.jobs.job_fields import pointer_get
from admission.kube.client import Kube, KubeError, Obj, ResourceRef
from admission.kube.informer import Informer
from queues.cycle import provisioning
from queues.cycle.decisions import Decision
from queues.kueue import workload_crd
from queues.model import Workload
from queues.podsets import jobs, kuberay, layouts, trainjobs

log = logging.getLogger(__name__)

PROVISIONING_REQUESTS = ResourceRef("autoscaling.x-k8s.io/v1", "ProvisioningRequest", "provisioningrequests")
POD_TEMPLATES = ResourceRef("v1", "PodTemplate", "podtemplates")
JOB_UID_LABEL = "turnstile.dev/job-uid"


class Checks(Capability):
    """Admission checks' ProvisioningRequests, and their verdicts in the leader's steps."""

    def __init__(
        self,
        kube: Kube,
        *,
        views: dict[str, JobView],
        current_term: Callable[[], Term | None],
        run_infos: Callable[[Term, Workload], list[PodSetInfo]],
        changed: Callable[[str], None],
        workers: int = 4,
        runtimes: trainjobs.Runtimes | None = None,
        backoff_scale: float = 1.0,
    ) -> None:
        self.kube = kube
        self.runtimes = runtimes  # a TrainJob's training runtime, where its pod templates are
        self.views = views  # job uid -> view
        self.current_term = current_term
        self.run_infos = run_infos  # the pod sets' directives as the job will run (the enactor's)
        self.changed = changed  # a request of this job uid changed: a step is due
        self.dirty: dict[str, None] = {}  # job uids whose requests changed since the last step
        self.backoff_scale = backoff_scale  # wall seconds per second of a retry's backoff
        self.requests: dict[str, dict[str, Obj]] = {}  # job uid -> request name -> request
        self.job_of: dict[tuple[str, str], str] = {}  # (namespace, request name) -> job uid
        self.informer = Informer(
            kube, PROVISIONING_REQUESTS, self._on_request, label_selector=JOB_UID_LABEL, optional=True
        )
        self.queue = WorkQueue(self.sync, workers=workers, name="checks")
        self.created = 0

    # ----- the capability's hooks (``admission.controller.capability``) -------------------------

    def start(self) -> None:
        self.queue.start()

    async def stop(self) -> None:
        await self.queue.stop()

    def optional_informers(self) -> Sequence[Informer]:
        return (self.informer,)

    def loops(self) -> Sequence[Loop]:
        return (("informer-provisioningrequests", self.informer.run),)

    def term_began(self, term: Term) -> None:
        """Every request's verdict is looked at again; requests to make, or to clean up, after a
        restart (those of a job whose workload finished while no term ran go)."""
        self.dirty.update(dict.fromkeys(self.requests))
        for uid in self.requests:
            self.request(uid)
        for uid, row in term.rows.items():
            if _has_checks(term.held(row.key)):
                self.request(uid)

    def decide(self, step: StepContext) -> Sequence[Decision]:
        """Admission checks whose ProvisioningRequests changed: what their conditions mean for the
        workloads (``queues.cycle.provisioning.verdict``), as scheduler decisions."""
        sched = step.term.scheduler
        dirty, self.dirty = self.dirty, {}
        out: list[Decision] = []
        for uid in dirty:
            row = step.term.rows.get(uid)
            wl = sched.workloads.get(row.key) if row is not None else None
            if wl is None or wl.admission is None:
                continue
            attempt = wl.retries + 1
            # Every check that applies, passed ones too: a booking can expire before the job
            # starts, and a started job's capacity can be revoked.
            for request in provisioning.requests(sched.config, wl):
                check, name, spec = request.check, request.name, request.spec
                conditions = self.conditions(uid, name)
                if conditions is None or wl.admission is None:
                    continue
                verdict = provisioning.verdict(
                    conditions, attempt=attempt, strategy=spec.retry_strategy, started=wl.started
                )
                if verdict.state == provisioning.READY:
                    sched.retries.check_passed(wl.key, check)
                elif verdict.state == provisioning.PENDING:
                    sched.retries.check_waiting(wl.key, provisioning.waiting_message(name, verdict.message))
                elif verdict.state == provisioning.RETRY:
                    until = sched.now + provisioning.backoff(attempt, spec.retry_strategy) * self.backoff_scale
                    if (evict := sched.retries.check_retry(wl.key, verdict.message, until)) is not None:
                        out.append(evict)
                elif (evict := sched.retries.check_rejected(wl.key, verdict.message)) is not None:
                    out.append(evict)
        return out

    def stepped(self, step: StepContext, outcome: Stepped) -> None:
        """Sync the requests of the jobs the step touched that have (or had) checks, and of those
        it forgot (their requests and PodTemplates go too)."""
        for uid in outcome.forgotten:
            if uid in self.requests:
                self.request(uid)
        for key in outcome.touched:
            row = step.term.by_key.get(key)
            if row is not None and (row.uid in self.requests or _has_checks(step.term.held(key))):
                self.request(row.uid)

    # ----- requests -------------------------------------------------------------------------------

    def request(self, uid: str) -> None:
        self.queue.request(uid)

    def _on_request(self, kind: str, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        name = str(meta.get("name"))
        where = (str(meta.get("namespace") or ""), name)
        # A deletion noticed on a relist carries only uid, namespace and name: find its job by name.
        label = str((meta.get("labels") or {}).get(JOB_UID_LABEL, ""))
        uid = workload_crd.job_uid_of(label) if label else self.job_of.get(where, "")
        if not uid:
            return
        if kind == "DELETED":
            self.job_of.pop(where, None)
        else:
            self.job_of[where] = uid
        if kind == "DELETED":
            mine = self.requests.get(uid, {})
            mine.pop(name, None)
            if not mine:
                self.requests.pop(uid, None)
        else:
            self.requests.setdefault(uid, {})[name] = obj
        self.dirty[uid] = None
        self.changed(uid)

    def conditions(self, uid: str, name: str) -> list[Mapping[str, Any]] | None:
        """The conditions of request ``name`` of job ``uid``; None if it does not exist (yet)."""
        pr = self.requests.get(uid, {}).get(name)
        if pr is None:
            return None
        return list((pr.get("status") or {}).get("conditions") or [])

    # ----- level-triggered sync -------------------------------------------------------------------

    async def sync(self, uid: str) -> None:
        """Make the job's requests those its workload calls for (see the module docstring)."""
        term = self.current_term()
        if term is None:
            return  # the next term looks at every job again
        if not term.valid():
            term.park(self.request, uid)  # (no request made or deleted on a possibly stale term)
            return
        row = term.rows.get(uid)
        wl = term.held(row.key) if row is not None else None  # as committed: a request costs real capacity
        wanted = {r.name: r for r in provisioning.requests(term.scheduler.config, wl)} if wl is not None else {}
        have = dict(self.requests.get(uid, {}))
        for name, pr in have.items():
            if name not in wanted:
                await self._delete(pr)
        view = self.views.get(uid)
        missing = [name for name in wanted if name not in have]
        if not missing or wl is None or view is None or view.info is None or wl.started:
            return
        job = await self._get_job(view)
        if job is None:
            return
        for name in missing:
            await self._create(term, wl, view, job, wanted[name])

    async def _get_job(self, view: JobView) -> Obj | None:
        try:
            return await self.kube.get(view.integration.ref, view.namespace, view.object_name)
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise Retry(str(exc), after=exc.retry_after) from exc

    async def _create(self, term: Term, wl: Workload, view: JobView, job: Obj, wanted: provisioning.Request) -> None:
        name, check, spec = wanted.name, wanted.check, wanted.spec
        assert view.info is not None and wl.admission is not None
        owner = {
            "apiVersion": view.integration.ref.api_version,
            "kind": view.integration.ref.kind,
            "name": view.object_name,
            "uid": view.object_uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
        labels = {JOB_UID_LABEL: workload_crd.uid_label(view.uid)}
        infos = {i.name: i for i in self.run_infos(term, wl)}
        counts = {ps.name: ps.count for ps in wl.running_pod_sets}
        pod_sets = []
        for ps in provisioning.pod_sets_needing(wl.pod_sets, spec.managed_resources):
            template = copy.deepcopy(_template(view, job, ps, self.runtimes))
            pod = template.setdefault("spec", {})
            info = infos.get(ps)
            if info is not None:
                if info.node_selector:
                    pod["nodeSelector"] = dict(info.node_selector)
                if info.tolerations:
                    pod["tolerations"] = [dict(t) for t in info.tolerations]
            template_name = provisioning.template_name(name, ps)
            await self._create_object(
                POD_TEMPLATES,
                view.namespace,
                {
                    "apiVersion": "v1",
                    "kind": "PodTemplate",
                    "metadata": {"name": template_name, "labels": labels, "ownerReferences": [owner]},
                    "template": template,
                },
            )
            pod_sets.append({"podTemplateRef": {"name": template_name}, "count": counts[ps]})
        parameters = dict(spec.parameters)
        annotations = (job.get("metadata") or {}).get("annotations") or {}
        for key, value in annotations.items():
            if str(key).startswith(provisioning.PARAMETER_PREFIX):
                parameters[str(key)[len(provisioning.PARAMETER_PREFIX) :]] = str(value)
        request: Obj = {
            "apiVersion": "autoscaling.x-k8s.io/v1",
            "kind": "ProvisioningRequest",
            "metadata": {"name": name, "labels": labels, "ownerReferences": [owner]},
            "spec": {"provisioningClassName": spec.provisioning_class_name, "podSets": pod_sets},
        }
        if parameters:
            request["spec"]["parameters"] = parameters
        created = await self._create_object(PROVISIONING_REQUESTS, view.namespace, request)
        if created is not None:
            self.created += 1
            log.info("%s: ProvisioningRequest %s created for check %s", wl.key, name, check)

    async def _create_object(self, ref: ResourceRef, namespace: str, obj: Obj) -> Obj | None:
        try:
            return await self.kube.create(ref, namespace, obj)
        except KubeError as exc:
            if exc.status == 409:
                return None  # made by an earlier try (or term): it is there
            if exc.temporary:
                raise Retry(str(exc), after=exc.retry_after) from exc
            raise Retry(f"creating {ref.kind} {obj['metadata']['name']}: {exc}") from exc

    async def _delete(self, pr: Obj) -> None:
        """A request and the PodTemplates it points to."""
        meta = pr["metadata"]
        for ps in (pr.get("spec") or {}).get("podSets") or []:
            ref = (ps.get("podTemplateRef") or {}).get("name")
            if ref:
                await self._delete_object(POD_TEMPLATES, meta["namespace"], str(ref))
        await self._delete_object(PROVISIONING_REQUESTS, meta["namespace"], meta["name"])

    async def _delete_object(self, ref: ResourceRef, namespace: str, name: str) -> None:
        try:
            await self.kube.delete(ref, namespace, name)
        except KubeError as exc:
            if exc.status == 404:
                return
            raise Retry(f"deleting {ref.kind} {namespace}/{name}: {exc}", after=exc.retry_after) from exc


def _template(view: JobView, job: Obj, pod_set: str, runtimes: trainjobs.Runtimes | None = None) -> Obj:
    """The pod template of a pod set: in the job (a TrainJob's: in its runtime; a SparkApplication's:
    built from its Spark pod spec), or for a pod workload one of the pods of that set."""
    if view.pods is None:
        path = view.info.template_paths.get(pod_set) if view.info is not None else None
        if view.integration.external is not None or view.integration.kind.directives is not layouts.POD_TEMPLATE:
            found = jobs.pod_templates(job, view.integration.kind, runtimes)
            return dict(next((t for name, _, t in found if name == pod_set), {}))
        if path is None:  # made by the kind's operator from its defaults (a RayJob's submitter)
            return copy.deepcopy(dict(kuberay.DEFAULT_SUBMITTER)) if view.info is not None else {}
        return dict(pointer_get(job, path) or {})
    pod = next((p.obj for p in view.pods if p.pod_set == pod_set), job)
    meta = pod.get("metadata") or {}
    return {"metadata": {k: meta[k] for k in ("labels", "annotations") if k in meta}, "spec": pod.get("spec") or {}}


def _has_checks(wl: Workload | None) -> bool:
    return wl is not None and bool(wl.checks)
