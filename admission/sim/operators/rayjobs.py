"""KubeRay's RayJob controller in the simulated cluster: a RayCluster, then a submitter Job.

As KubeRay's (ray-operator ``rayjob_controller.go``), for an unsuspended RayJob:

- **Initializing**: a RayCluster ``<rayjob>-<5 characters>`` is created through the API server (so
  Turnstile's webhooks see it, as Kueue's RayCluster webhook sees KubeRay's) from
  ``spec.rayClusterSpec``, with the RayJob's labels and annotations, KubeRay's
  ``ray.io/originated-from-cr-name`` and ``ray.io/originated-from-crd`` labels, owned by the RayJob;
  its name is ``status.rayClusterName``. Its pods are the cluster operator's
  (``admission.sim.operators.cluster``); its status is copied to ``status.rayClusterStatus``.
- **Running**, once the cluster's state is ``ready``: in ``K8sJobMode`` (the default) a batch Job
  named as the RayJob, owned by it, runs the submitter (``spec.submitterPodTemplate``, else KubeRay's
  default submitter pod) for the RayJob's simulated runtime (``turnstile.dev/sim-runtime``); in
  ``HTTPMode`` and ``InteractiveMode`` the Ray job runs in the cluster for that runtime from then.
- **Complete** (``jobStatus: SUCCEEDED``) once the submitter Job completes (the runtime is over);
  with ``shutdownAfterJobFinishes`` the cluster is deleted then (a queued RayJob must set it).
- **Suspended** (``spec.suspend``): the cluster and the submitter Job are deleted; ``Suspending``
  until both objects are gone (their pods may still be stopping, as with KubeRay: Turnstile looks
  at the pods themselves before it starts anything in their place), then ``Suspended`` with the
  cluster's name and status cleared (a resumed RayJob gets a new cluster).

Differences from KubeRay (docs/simulated-cluster.md): the cluster's name suffix is taken from the
RayJob's uid and generation, not random; no Ray dashboard is asked for the job's status (the submitter
Job's end, or the runtime, is the job's); no retries (``backoffLimit``), ``activeDeadlineSeconds``,
``ttlSecondsAfterFinished`` delay, deletion policies, sidecar submission mode or ``clusterSelector``
(which a queued RayJob may not use anyway). The Ray autoscaler is not simulated: a client patching
the RayCluster's worker ``replicas`` stands for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import hashlib
from typing import TYPE_CHECKING, Any

from admission.sim.operators.kubelet import RUNTIME_ANNOTATION
from admission.sim.operators.replicas import owner_reference
from admission.sim.operators.statuses import now_text
from admission.sim.server import resources
from admission.sim.server.objects import ApiError, Obj
from queues.podsets import kuberay

if TYPE_CHECKING:
    from admission.sim.operators.replicas import Replicas

RAYJOBS = next(r for r in resources.OPERATORS if r.kind == "RayJob")
RAYCLUSTERS = next(r for r in resources.OPERATORS if r.kind == "RayCluster")
JOBS = next(r for r in resources.BUILT_IN if r.plural == "jobs")
USER = {"username": "system:serviceaccount:kuberay:kuberay-operator", "groups": ["system:serviceaccounts"]}
ORIGIN_NAME, ORIGIN_KIND = "ray.io/originated-from-cr-name", "ray.io/originated-from-crd"
DONE = ("Complete", "Failed")


class RayJobs:
    """The controller, in ``replicas``' reconcile loop: woken by its RayJobs, their clusters (owned)
    and their submitter Jobs' pods (labelled with the RayJob's name)."""

    def __init__(self, replicas: Replicas, *, default_runtime: float | None = None) -> None:
        self.replicas = replicas
        self.default_runtime = default_runtime  # (``sim up --default-runtime``: a runtime not annotated)
        self.timers: dict[str, asyncio.TimerHandle] = {}  # RayJob uid -> the end of its HTTPMode run
        self.ended: set[str] = set()  # RayJob uids whose HTTPMode run is over (this attempt)
        replicas.register(RAYJOBS, self.reconcile, label=ORIGIN_NAME)
        replicas.wake_on(JOBS)

    async def reconcile(self, rj: Obj) -> None:
        ns, name, uid = rj["metadata"]["namespace"], rj["metadata"]["name"], rj["metadata"]["uid"]
        spec, status = rj.get("spec") or {}, dict(rj.get("status") or {})
        state = status.get("jobDeploymentStatus") or ""
        cluster = self._get(RAYCLUSTERS, ns, status.get("rayClusterName") or "")
        submitter = self._get(JOBS, ns, name)
        if submitter is not None and _controller(submitter) != uid:
            submitter = None  # (another object's Job of that name)
        if state in DONE:
            self._forget(uid)
            if cluster is not None and spec.get("shutdownAfterJobFinishes"):
                self._delete(RAYCLUSTERS, cluster)
            return
        if spec.get("suspend"):
            self._forget(uid)
            present = [(res, found) for res, found in ((RAYCLUSTERS, cluster), (JOBS, submitter)) if found is not None]
            for res, found in present:
                self._delete(res, found)
            if present:  # (their deletions bring it back)
                status["jobDeploymentStatus"] = "Suspending"
            elif state:  # as KubeRay: once both objects are gone (their pods may still stop)
                status.update(jobDeploymentStatus="Suspended", rayClusterName="", rayClusterStatus={})
                status.pop("jobStatus", None)
            self._write(rj, status)
            return
        if cluster is None:
            cluster = await self._make_cluster(rj)
            status.update(jobDeploymentStatus="Initializing", rayClusterName=cluster["metadata"]["name"],
                          jobStatus="PENDING", startTime=now_text())  # fmt: skip
        cluster_status = cluster.get("status") or {}
        status["rayClusterStatus"] = {
            k: v for k, v in cluster_status.items() if k in ("state", "readyWorkerReplicas", "desiredWorkerReplicas")
        }
        if cluster_status.get("state") == "ready" and status.get("jobDeploymentStatus") == "Initializing":
            status.update(jobDeploymentStatus="Running", jobStatus="RUNNING")
        if status.get("jobDeploymentStatus") == "Running":
            if spec.get("submissionMode", "K8sJobMode") == "K8sJobMode":
                if submitter is None:
                    submitter = await self._make_submitter(rj)
                finished = _finished(submitter)
            else:
                finished = self._http_run(rj)
            if finished is not None:
                status.update(jobDeploymentStatus="Complete" if finished else "Failed",
                              jobStatus="SUCCEEDED" if finished else "FAILED", endTime=now_text())  # fmt: skip
        self._write(rj, status)
        if status.get("jobDeploymentStatus") in DONE and spec.get("shutdownAfterJobFinishes"):
            self._delete(RAYCLUSTERS, cluster)

    # ----- what it makes ---------------------------------------------------------------------

    async def _make_cluster(self, rj: Obj) -> Obj:
        meta = rj["metadata"]
        # (a resumed RayJob's spec changed, so its generation: a new cluster, a new name)
        suffix = hashlib.sha256(f"{meta['uid']}/{meta.get('generation', 1)}".encode()).hexdigest()[:5]
        body = {
            "apiVersion": RAYCLUSTERS.api_version,
            "kind": RAYCLUSTERS.kind,
            "metadata": {
                "name": f"{meta['name']}-{suffix}",
                "labels": {**(meta.get("labels") or {}), ORIGIN_NAME: meta["name"], ORIGIN_KIND: "RayJob"},
                "annotations": dict(meta.get("annotations") or {}),
                "ownerReferences": [owner_reference(rj)],
            },
            "spec": copy.deepcopy((rj.get("spec") or {}).get("rayClusterSpec") or {}),
        }
        created, _ = await self.replicas.api.create(RAYCLUSTERS, meta["namespace"], body, user=USER)
        return created

    async def _make_submitter(self, rj: Obj) -> Obj:
        meta, spec = rj["metadata"], rj.get("spec") or {}
        template: dict[str, Any] = copy.deepcopy(dict(spec.get("submitterPodTemplate") or kuberay.DEFAULT_SUBMITTER))
        pod_meta = template.setdefault("metadata", {})
        pod_meta["labels"] = {**(pod_meta.get("labels") or {}), ORIGIN_NAME: meta["name"], ORIGIN_KIND: "RayJob"}
        template.setdefault("spec", {}).setdefault("restartPolicy", "Never")
        runtime = (meta.get("annotations") or {}).get(RUNTIME_ANNOTATION)
        body = {
            "apiVersion": JOBS.api_version,
            "kind": JOBS.kind,
            "metadata": {
                "name": meta["name"],
                "labels": {ORIGIN_NAME: meta["name"], ORIGIN_KIND: "RayJob"},
                "annotations": {RUNTIME_ANNOTATION: runtime} if runtime is not None else {},
                "ownerReferences": [owner_reference(rj)],
            },
            "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 2, "template": template},
        }
        try:
            created, _ = await self.replicas.api.create(JOBS, meta["namespace"], body, user=USER)
        except ApiError as exc:
            if exc.code != 409:
                raise
            return self.replicas.store.get(JOBS, meta["namespace"], meta["name"])
        return created

    def _http_run(self, rj: Obj) -> bool | None:
        """An HTTPMode (or InteractiveMode) job's run in the cluster: True once its runtime is over
        (timed from now, the first time it is asked), None while it runs."""
        uid = rj["metadata"]["uid"]
        if uid in self.ended:
            return True
        if uid not in self.timers:
            raw = (rj["metadata"].get("annotations") or {}).get(RUNTIME_ANNOTATION)
            seconds = float(raw) if raw is not None else self.default_runtime
            if seconds is None:
                return None  # (runs until deleted)
            scale = getattr(self.replicas.api, "time_scale", 1.0)
            self.timers[uid] = asyncio.get_running_loop().call_later(seconds * scale, self._end, rj)
        return None

    def _end(self, rj: Obj) -> None:
        uid = rj["metadata"]["uid"]
        self.timers.pop(uid, None)
        self.ended.add(uid)
        self.replicas.mark(RAYJOBS, rj["metadata"]["namespace"], rj["metadata"]["name"])

    def _forget(self, uid: str) -> None:
        timer = self.timers.pop(uid, None)
        if timer is not None:
            timer.cancel()
        self.ended.discard(uid)

    # ----- reading and writing -----------------------------------------------------------------

    def _get(self, res: Any, ns: str, name: str) -> Obj | None:
        if not name:
            return None
        try:
            return self.replicas.store.get(res, ns, name)
        except ApiError:
            return None

    def _delete(self, res: Any, obj: Obj) -> None:
        if not obj["metadata"].get("deletionTimestamp"):
            with contextlib.suppress(ApiError):
                self.replicas.store.delete(res, obj["metadata"]["namespace"], obj["metadata"]["name"])

    def _write(self, rj: Obj, status: dict[str, Any]) -> None:
        if status != (rj.get("status") or {}):
            rj["status"] = status
            self.replicas.store.replace(
                RAYJOBS, rj["metadata"]["namespace"], rj["metadata"]["name"], rj, subresource="status"
            )


def _controller(obj: Obj) -> str | None:
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("uid"))
    return None


def _finished(job: Obj) -> bool | None:
    """A submitter Job's end: True when Complete, False when Failed, None while it runs."""
    for c in (job.get("status") or {}).get("conditions") or []:
        if c.get("status") == "True" and c.get("type") in ("Complete", "Failed"):
            return bool(c.get("type") == "Complete")
    return None
