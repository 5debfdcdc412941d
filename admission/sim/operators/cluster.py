"""What runs in the simulated cluster: job operators, a scheduler and a kubelet.

- Operators (batch Job, the Kubeflow kinds, JobSet, RayCluster, TrainJob, SparkApplication):
  an unsuspended job gets its pods, one per replica, named ``<job>-<podset>-<i>`` (a
  SparkApplication's made through the API server, its driver's first:
  ``admission.sim.operators.spark``); a running batch Job follows changes to its ``parallelism`` at
  once (pods created up to it, those beyond it deleted), as the real Job controller does; suspending
  it deletes them and sets the Suspended condition; when every pod has succeeded the job completes,
  with the status its real controller sets (Job: Complete; Kubeflow: Succeeded; JobSet: Completed).
  A RayCluster's pods run until it is deleted or suspended; its ``status.state`` is ``ready`` while
  they run and ``suspended`` once a suspended one's pods are gone, as KubeRay's. A RayJob's cluster
  and submitter Job are KubeRay's RayJob controller's (``admission.sim.operators.rayjobs``).
- Scheduler: ``admission.sim.operators.kube_scheduler``.
- Kubelet: a bound pod runs for the seconds in its job's ``turnstile.dev/sim-runtime``
  annotation (times ``time_scale``), then succeeds; without the annotation it runs for
  ``default_runtime`` seconds (``sim up --default-runtime``), or forever when that is None; a pod
  with ``restartPolicy: Always`` (a Deployment's, a bare ``kubectl run`` pod's) runs until deleted
  unless annotated, as a server never succeeds.
  A deleted pod terminates gracefully: it keeps running, with a deletionTimestamp, until its
  containers stop (``termination_seconds`` after SIGTERM) or its grace period ends
  (``metadata.deletionGracePeriodSeconds``, else ``spec.terminationGracePeriodSeconds``, 30 by
  default), whichever is first (times ``time_scale``), holding its node's capacity meanwhile
  (the kubelet's finalizer stands for the grace period). A batch Job counts such pods in
  ``status.terminating``, not ``status.active``, as the real Job controller does from
  Kubernetes 1.29 (``JobPodReplacementPolicy``); with ``job_terminating=False`` it counts them
  nowhere, as a 1.28 server does, so only the pods themselves say they still run.
- Garbage collection: a deleted job's pods are deleted too.
- Dynamic Resource Allocation: ``admission.sim.operators.dra`` (claims made from templates,
  devices published for annotated nodes, allocated by the scheduler, freed with the pod).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from admission.sim.operators import dra, spark, statuses
from admission.sim.operators.kube_scheduler import NODES, Scheduler, free_capacity
from admission.sim.operators.kubelet import FOREVER, KUBELET_FINALIZER, PODS, RUNTIME_ANNOTATION, Kubelet
from admission.sim.operators.statuses import now_text, set_condition
from admission.sim.server import resources
from admission.sim.server.object_store import ObjectStore, Watcher
from admission.sim.server.objects import ApiError, Obj, Resource, clone
from admission.sim.server.schema import defaults
from queues import errors
from queues.podsets import jobs, sparkapps

__all__ = ["FOREVER", "NODES", "PODS", "RUNTIME_ANNOTATION", "Cluster", "free_capacity", "set_condition"]

JOB_UID_LABEL = "turnstile.dev/job-uid"
POD_SET_LABEL = statuses.POD_SET_LABEL

# Kinds whose pods are another object's, which its own operator runs: an AppWrapper's components
# (``admission.sim.operators.appwrappers``), a RayService's RayCluster (``admission.sim.operators.serving``),
# a RayJob's RayCluster and submitter Job (``admission.sim.operators.rayjobs``)
MADE_BY_CHILDREN = {"AppWrapper", "RayService", "RayJob"}
JOB_RESOURCES = tuple(
    r for r in resources.ALL if (r.api_version, r.kind) in jobs.KINDS and r.kind not in MADE_BY_CHILDREN
)
SPARK = jobs.KINDS[(sparkapps.API_VERSION, "SparkApplication")]
SPARK_RESOURCE = next(r for r in JOB_RESOURCES if r.kind == SPARK.kind)
DONE_CONDITION = {"Job": "Complete", "JobSet": "Completed", "TrainJob": "Complete"}  # Kubeflow's: Succeeded


def _walk(obj: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


class Cluster:
    """Reacts to the store's changes like the controllers and kubelets of a real cluster."""

    def __init__(
        self,
        store: ObjectStore,
        *,
        time_scale: float = 1.0,
        termination_seconds: float = 1.0,
        default_runtime: float | None = None,
    ) -> None:
        self.store = store
        self.time_scale = time_scale
        self.kubelet = Kubelet(
            store, time_scale=time_scale, termination_seconds=termination_seconds, default_runtime=default_runtime
        )
        self.job_terminating = True  # a Job's status.terminating is filled (1.29+); False: as 1.28
        self.watchers = [Watcher(r, None) for r in (*JOB_RESOURCES, PODS, NODES, dra.SLICES, dra.CLAIMS)]
        self.tasks: list[asyncio.Task[None]] = []
        self.dra = dra.Dra(store)
        self.scheduler = Scheduler(store, self._bound, self.dra)
        # a SparkApplication's pods, made through the API server (``admission.sim.operators.spark``): set by
        # the host, which has one; without it they are stored directly, as the other kinds' pods
        self.spark: spark.SparkPods | None = None
        store.index_label(JOB_UID_LABEL)

    async def start(self) -> None:
        for w in self.watchers:
            self.store.watchers.append(w)
            self.tasks.append(asyncio.create_task(self._consume(w)))

    async def stop(self) -> None:
        for w in self.watchers:
            with contextlib.suppress(ValueError):
                self.store.watchers.remove(w)
            w.queue.put_nowait(None)
        self.kubelet.stop()
        if self.spark is not None:
            await self.spark.stop()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    async def _consume(self, watcher: Watcher) -> None:
        while (event := await watcher.queue.get()) is not None:
            try:
                if event.resource in JOB_RESOURCES and event.type == "DELETED":
                    meta = event.obj["metadata"]
                    for pod in self._pods_of(meta["uid"], meta["namespace"]):
                        self.kubelet.terminate(pod)
                elif event.resource in JOB_RESOURCES:
                    self.reconcile_job(
                        event.resource, event.obj["metadata"]["namespace"], event.obj["metadata"]["name"]
                    )
                elif event.resource is PODS:
                    self._on_pod(event.type, event.obj)
                elif event.resource is NODES:
                    if event.type != "DELETED":
                        self.dra.publish(event.obj)  # (a node's devices, where its driver publishes them)
                    self.scheduler.schedule_pending()
                elif event.resource is dra.SLICES or (event.resource is dra.CLAIMS and event.type == "DELETED"):
                    self.scheduler.schedule_pending()  # devices published or freed
            except ApiError:
                continue  # the object changed or vanished meanwhile; a later event reconciles again

    @property
    def termination_seconds(self) -> float:
        """How long a pod's containers take to stop on SIGTERM (tests make them ignore it)."""
        return self.kubelet.termination_seconds

    @termination_seconds.setter
    def termination_seconds(self, seconds: float) -> None:
        self.kubelet.termination_seconds = seconds

    # ----- operators -------------------------------------------------------------------------

    def runtime(self, kind: str, namespace: str | None, name: str) -> Obj | None:
        """A Kubeflow Trainer runtime, as the Trainer controller finds a TrainJob's (``queues.podsets.trainjobs``)."""
        res = next((r for r in resources.ALL if r.kind == kind and r.group == "trainer.kubeflow.org"), None)
        if res is None:
            return None
        try:
            return self.store.get(res, namespace or "", name)
        except ApiError:
            return None

    def _pods_of(self, uid: str, namespace: str) -> list[Obj]:
        """The job's pods, in name order (from the store's index of the job-uid label)."""
        found = [p for p in self.store.labelled(PODS, JOB_UID_LABEL, uid) if p["metadata"]["namespace"] == namespace]
        return [clone(p) for p in sorted(found, key=lambda p: p["metadata"]["name"])]

    def reconcile_job(self, res: Resource, namespace: str, name: str) -> None:
        job = self.store.get(res, namespace, name)
        kind = jobs.kind_of(job)
        if kind is None:
            return
        status = job.setdefault("status", {})
        done = DONE_CONDITION.get(kind.kind, "Succeeded")
        if statuses.done(kind, status, done):
            return
        uid = job["metadata"]["uid"]
        pods = self._pods_of(uid, namespace)
        if bool(_walk(job, kind.suspend_path)):
            for pod in pods:
                self.kubelet.terminate(pod)
            statuses.count_pods(
                kind,
                job,
                self._pods_of(uid, namespace),
                suspended=True,
                runtimes=self.runtime,
                terminating_field=self.job_terminating,
            )
            # As the Job controller (KEP-2232): suspending clears startTime, so the job counts as never
            # started and its scheduling directives may change before it is resumed.
            status.pop("startTime", None)
            if kind.layout != "spark":  # (the Spark operator says it in applicationState)
                set_condition(status, "Suspended", "True", "JobSuspended", "Job suspended")
            self.store.replace(res, namespace, name, job, subresource="status")
            return
        pods = [p for p in pods if not p["metadata"].get("deletionTimestamp")] if pods else pods
        if not pods and any(self._pods_of(uid, namespace)):
            statuses.count_pods(
                kind, job, self._pods_of(uid, namespace), runtimes=self.runtime, terminating_field=self.job_terminating
            )  # resumed; old pods stop
            self.store.replace(res, namespace, name, job, subresource="status")
            return
        if not pods:
            try:
                templates = jobs.pod_templates(job, kind, self.runtime)
            except errors.Invalid:
                return
            runtime = (job["metadata"].get("annotations") or {}).get(RUNTIME_ANNOTATION)
            if kind.kind == "RayCluster":
                runtime = FOREVER
            bodies = [
                (ps_name, i, self._pod_body(job, ps_name, i, template, runtime))
                for ps_name, count, template in templates
                for i in range(count)
            ]
            if kind is SPARK and self.spark is not None:
                self.spark.start(job, bodies)  # (through the API server; their events reconcile the app)
            else:
                for _, _, body in bodies:
                    pods.append(self.store.create(PODS, namespace, body, namespaces=resources.NAMESPACES))
            # (the Spark operator says when it submitted the app; the others when the job started)
            status.setdefault("submissionTime" if kind.layout == "spark" else "startTime", now_text())
            if any(c.get("type") == "Suspended" for c in status.get("conditions", [])):
                set_condition(status, "Suspended", "False", "JobResumed", "Job resumed")
        elif kind.kind in ("Job", "RayCluster"):
            pods = self._follow_counts(job, kind, pods)
        succeeded = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Succeeded")
        statuses.count_pods(kind, job, pods, runtimes=self.runtime, terminating_field=self.job_terminating)
        completed = bool(pods) and succeeded == len(pods) and kind.layout != "ray"  # (a RayCluster serves)
        if completed and kind.layout == "spark":
            status.update(applicationState={"state": "COMPLETED"}, terminationTime=now_text())
        elif completed:
            status["completionTime"] = now_text()
            if kind.kind == "Job":
                set_condition(
                    status,
                    "SuccessCriteriaMet",
                    "True",
                    "CompletionsReached",
                    "Reached expected number of succeeded pods",
                )
            set_condition(
                status,
                done,
                "True",
                "CompletionsReached" if kind.kind == "Job" else "Succeeded",
                f"{kind.kind} completed",
            )
        self.store.replace(res, namespace, name, job, subresource="status")

    def _follow_counts(self, job: Obj, kind: jobs.Kind, pods: list[Obj]) -> list[Obj]:
        """As the real Job controller and KubeRay: a running Job whose ``parallelism`` changed (a
        RayCluster whose worker group's ``replicas`` its autoscaler changed) gets the pods it now asks
        for at once (created up to it), and its pods beyond it are deleted."""
        try:
            templates = jobs.pod_templates(job, kind, self.runtime)
        except errors.Invalid:
            return pods
        every = {p["metadata"]["name"] for p in self._pods_of(job["metadata"]["uid"], job["metadata"]["namespace"])}
        runtime = (
            FOREVER if kind.kind == "RayCluster" else (job["metadata"].get("annotations") or {}).get(RUNTIME_ANNOTATION)
        )
        kept = []
        counts = {ps_name: count for ps_name, count, _ in templates}
        for pod in pods:
            ps_name = pod["metadata"]["labels"].get(POD_SET_LABEL, "main")
            index = pod["metadata"]["name"].removeprefix(f"{job['metadata']['name']}-{ps_name}-")
            ended = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
            if index.isdigit() and int(index) >= counts.get(ps_name, 0) and not ended:
                self.kubelet.terminate(pod)
            else:
                kept.append(pod)
        for ps_name, count, template in templates:
            kept += self._missing(job, ps_name, count, template, runtime, every)
        return kept

    def _missing(
        self, job: Obj, ps_name: str, count: int, template: Any, runtime: str | None, every: set[str]
    ) -> list[Obj]:
        """Pods ``0..count-1`` of pod set ``ps_name`` not made yet, made now."""
        kept = []
        prefix = f"{job['metadata']['name']}-{ps_name}-"
        for i in range(count):
            if f"{prefix}{i}" not in every:
                body = self._pod_body(job, ps_name, i, template, runtime)
                kept.append(
                    self.store.create(PODS, job["metadata"]["namespace"], body, namespaces=resources.NAMESPACES)
                )
        return kept

    def _pod_body(self, job: Obj, ps_name: str, index: int, template: Any, runtime: str | None) -> Obj:
        """The pod the job's operator makes for pod ``index`` of pod set ``ps_name``, owned by the job."""
        meta = template.get("metadata") or {}
        ranks = statuses.rank_labels(job, ps_name, index)
        labels = {
            **(meta.get("labels") or {}),
            "job-name": job["metadata"]["name"],
            JOB_UID_LABEL: job["metadata"]["uid"],
            POD_SET_LABEL: ps_name,
            **ranks,
        }
        annotations = {**(meta.get("annotations") or {}), **ranks}
        if runtime is not None:
            annotations[RUNTIME_ANNOTATION] = runtime
        owner = {
            "apiVersion": job["apiVersion"],
            "kind": job["kind"],
            "name": job["metadata"]["name"],
            "uid": job["metadata"]["uid"],
            "controller": True,
        }
        if jobs.kind_of(job) is SPARK:
            labels = spark.pod_labels(job, labels)
        labels.update(statuses.controller_labels(job, ps_name))
        body = {
            "metadata": {
                "name": f"{job['metadata']['name']}-{ps_name}-{index}",
                "labels": labels,
                "annotations": annotations,
                "ownerReferences": [owner],
                "finalizers": [KUBELET_FINALIZER],
            },
            "spec": clone(template["spec"]),
            "status": {"phase": "Pending"},
        }
        defaults.default(PODS, body)  # as a pod created through the API server
        return body

    def _job_of(self, pod: Obj) -> tuple[Resource, Obj] | None:
        app = (pod["metadata"].get("labels") or {}).get(sparkapps.APP_NAME_LABEL)
        if app is not None:  # (a Spark executor's owner is its driver pod)
            try:
                return SPARK_RESOURCE, self.store.get(SPARK_RESOURCE, pod["metadata"]["namespace"], app)
            except ApiError:
                return None
        for owner in pod["metadata"].get("ownerReferences") or []:
            for res in JOB_RESOURCES:
                if res.api_version == owner.get("apiVersion") and res.kind == owner.get("kind"):
                    try:
                        return res, self.store.get(res, pod["metadata"]["namespace"], owner["name"])
                    except ApiError:
                        return None
        return None

    # ----- scheduler and kubelet -----------------------------------------------------------------

    def _on_pod(self, kind: str, pod: Obj) -> None:
        key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        if kind == "DELETED":
            self.scheduler.forget(pod["metadata"]["namespace"], pod["metadata"]["name"])
            self.kubelet.forget(key)
            self.dra.release(pod)
            owner = self._job_of(pod)
            if owner is not None:  # a terminated pod is gone: the job's counts change
                self.reconcile_job(owner[0], pod["metadata"]["namespace"], owner[1]["metadata"]["name"])
            self.scheduler.schedule_pending()
            return
        if pod["metadata"].get("deletionTimestamp"):
            if KUBELET_FINALIZER in (pod["metadata"].get("finalizers") or []) and key not in self.kubelet.stopping:
                self.kubelet.stop_later(pod["metadata"]["namespace"], pod["metadata"]["name"])  # deleted by a client
            return
        phase = (pod.get("status") or {}).get("phase")
        if phase == "Pending" and not pod["spec"].get("nodeName"):
            if dra.claims_of(pod) and self.dra.make_claims(pod):
                return  # (its status changed: that event tries it)
            if not pod["spec"].get("schedulingGates"):  # a gated pod is not considered by the scheduler
                self.scheduler.try_pod(pod)
        elif phase == "Succeeded":
            self.dra.release(pod)
            owner = self._job_of(pod)
            if owner is not None:
                self.reconcile_job(owner[0], pod["metadata"]["namespace"], owner[1]["metadata"]["name"])
            self.scheduler.schedule_pending()

    def _bound(self, pod: Obj) -> None:
        """A pod the scheduler bound: its Ready pods count in its job's status (what PodsReady
        reads), and the kubelet runs it."""
        owner = self._job_of(pod)
        if owner is not None:
            self.reconcile_job(owner[0], pod["metadata"]["namespace"], owner[1]["metadata"]["name"])
        self.kubelet.run(pod)
