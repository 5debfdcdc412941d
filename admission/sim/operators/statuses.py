"""Job statuses as each real operator writes them, for the simulated cluster's operators (``cluster``).

Batch Job (active, ready, terminating, succeeded), the Kubeflow kinds (``replicaStatuses`` and the
``Running`` condition), JobSet and TrainJob (Ready child Jobs per replicated job), KubeRay (a
RayCluster's ``state``), the Spark operator (a
SparkApplication's ``applicationState`` and ``executorState``): what Turnstile reads as "active",
"finished" and PodsReady (waitForPodsReady), as Kueue reads them. A bound pod is Running and Ready.
The labels and annotations the real controllers put on their pods are here too: a pod's rank, and
what finds a Job's or RayCluster's pods.
"""

from __future__ import annotations

import datetime as dt

from admission.sim.server.objects import Obj
from queues import errors
from queues.podsets import jobs, trainjobs

POD_SET_LABEL = "turnstile.dev/pod-set"


def now_text() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def set_condition(status: Obj, kind: str, value: str, reason: str, message: str = "") -> None:
    """Set a condition; unchanged if it already says the same (so reconciling twice writes nothing)."""
    for c in status.get("conditions", []):
        if c.get("type") == kind and c.get("status") == value and c.get("reason") == reason:
            return
    conditions = [c for c in status.get("conditions", []) if c.get("type") != kind]
    conditions.append(
        {
            "type": kind,
            "status": value,
            "reason": reason,
            "message": message,
            "lastTransitionTime": now_text(),
            "lastProbeTime": now_text(),
        }
    )
    status["conditions"] = conditions


def done(kind: jobs.Kind, status: Obj, condition: str) -> bool:
    if kind.layout == "spark":
        return (status.get("applicationState") or {}).get("state") in ("COMPLETED", "FAILED")
    return any(c.get("type") == condition and c.get("status") == "True" for c in status.get("conditions", []))


def _ray_status(
    kind: jobs.Kind,
    status: Obj,
    counts: dict[str, dict[str, int]],
    all_ready: bool,
    suspended: bool,
    expected: dict[str, int],
) -> None:
    """KubeRay's status of a RayCluster: its state and worker counts (``desiredWorkerReplicas`` from
    its spec, as KubeRay's). (A RayJob's is ``admission.sim.operators.rayjobs``'.)"""
    live = sum(c["active"] for c in counts.values())
    workers = sum(c["running"] for ps, c in counts.items() if ps != "head")
    desired = sum(n for ps, n in expected.items() if ps != "head")
    status.update(readyWorkerReplicas=workers, availableWorkerReplicas=workers, desiredWorkerReplicas=desired)
    if suspended and not live:
        status["state"] = "suspended"
    elif not suspended and all_ready:
        status["state"] = "ready"


def _spark_status(status: Obj, pods: list[Obj], suspended: bool) -> None:
    """The Spark operator's status: the app's state (``SUBMITTED`` until its driver runs, then
    ``RUNNING``; ``SUSPENDING`` while a suspended app's pods stop, then ``SUSPENDED``) and each
    executor's state by pod name."""
    live = [p for p in pods if (p.get("status") or {}).get("phase") in ("Pending", "Running")]
    state = {"Pending": "PENDING", "Running": "RUNNING", "Succeeded": "COMPLETED", "Failed": "FAILED"}
    status["executorState"] = {
        p["metadata"]["name"]: state.get(str((p.get("status") or {}).get("phase")), "UNKNOWN")
        for p in pods
        if p["metadata"]["labels"].get(POD_SET_LABEL) == "executor" and not p["metadata"].get("deletionTimestamp")
    }
    driver_runs = any(
        p["metadata"]["labels"].get(POD_SET_LABEL) == "driver" and (p.get("status") or {}).get("phase") == "Running"
        for p in live
    )
    if suspended:
        status["applicationState"] = {"state": "SUSPENDING" if live else "SUSPENDED"}
    elif live:
        status["applicationState"] = {"state": "RUNNING" if driver_runs else "SUBMITTED"}


def _replicated(job: Obj, runtimes: trainjobs.Runtimes | None) -> list[Obj]:
    """A TrainJob's replicated jobs, as its runtime builds them."""
    problems: list[errors.FieldError] = []
    return list(trainjobs.resolve(job, runtimes, problems).get("replicatedJobs") or [])


def _expected(job: Obj, runtimes: trainjobs.Runtimes | None = None) -> dict[str, int]:
    try:
        return {name: count for name, count, _ in jobs.pod_templates(job, runtimes=runtimes)}
    except errors.Invalid:
        return {}


def count_pods(
    kind: jobs.Kind,
    job: Obj,
    pods: list[Obj],
    suspended: bool = False,
    runtimes: trainjobs.Runtimes | None = None,
    *,
    terminating_field: bool = True,
) -> None:
    """Active, Ready and succeeded pods in the status shape of the kind's real controller (a bound
    pod is Running and Ready here): what Kueue reads as PodsReady too. A Job's deleted pods that
    still run are ``status.terminating`` (1.29+); ``terminating_field=False``: counted nowhere (1.28)."""
    status = job.setdefault("status", {})
    counts: dict[str, dict[str, int]] = {}
    terminating = 0
    for pod in pods:
        ps = pod["metadata"]["labels"].get(POD_SET_LABEL, "main")
        phase = (pod.get("status") or {}).get("phase")
        entry = counts.setdefault(ps, {"active": 0, "running": 0, "succeeded": 0})
        deleting = bool(pod["metadata"].get("deletionTimestamp"))
        if phase in ("Pending", "Running") and deleting and kind.kind == "Job":
            terminating += 1
        elif phase in ("Pending", "Running"):
            entry["active"] += 1
            entry["running"] += int(phase == "Running" and not deleting)
        elif phase == "Succeeded":
            entry["succeeded"] += 1
    expected = _expected(job, runtimes)
    all_ready = bool(expected) and all(
        counts.get(ps, {}).get("running", 0) + counts.get(ps, {}).get("succeeded", 0) >= n for ps, n in expected.items()
    )
    if kind.kind == "Job":
        if terminating_field:
            status["terminating"] = terminating
        else:
            status.pop("terminating", None)
        status["active"] = sum(c["active"] for c in counts.values())
        status["ready"] = sum(c["running"] for c in counts.values())
        status["succeeded"] = sum(c["succeeded"] for c in counts.values())
    elif kind.layout == "ray":
        _ray_status(kind, status, counts, all_ready and not suspended, suspended, expected)
    elif kind.layout == "spark":
        _spark_status(status, pods, suspended)
    elif kind.kind in ("JobSet", "TrainJob"):
        # (a TrainJob's status mirrors its JobSet's: ``jobsStatus``, with each replicated job's replicas)
        replicated = job["spec"].get("replicatedJobs") if kind.kind == "JobSet" else _replicated(job, runtimes)
        replicas = {str(rj.get("name")): int(rj.get("replicas") or 1) for rj in replicated or []}
        field = "replicatedJobsStatus" if kind.kind == "JobSet" else "jobsStatus"
        status[field] = []
        for ps, c in sorted(counts.items()):
            per_job = max(1, expected.get(ps, 1) // max(1, replicas.get(ps, 1)))
            status[field].append(
                {"name": ps, "active": c["active"], "succeeded": c["succeeded"] // per_job,
                 "ready": c["running"] // per_job, "failed": 0, "suspended": 0, "replicas": replicas.get(ps, 1)}
            )  # fmt: skip
    else:
        by_lower = {r.lower(): r for r in kind.replica_order}
        status["replicaStatuses"] = {
            by_lower.get(ps, ps): {"active": c["active"], "succeeded": c["succeeded"]}
            for ps, c in sorted(counts.items())
        }
        running = all_ready and not suspended and any(c["running"] for c in counts.values())
        set_condition(status, "Running", "True" if running else "False", "JobRunning" if running else "JobNotRunning")


def rank_labels(job: Obj, ps_name: str, index: int) -> dict[str, str]:
    """A pod's rank, where its real controller writes it (label and annotation alike): an Indexed
    Job's completion index, a Kubeflow replica's index, a JobSet's job index and the completion
    index within that Job (``queues.placement.pinning`` reads them)."""
    kind = jobs.kind_of(job)
    spec = job.get("spec") or {}
    if kind is None:
        return {}
    if kind.layout == "job":
        indexed = spec.get("completionMode") == "Indexed"
        return {"batch.kubernetes.io/job-completion-index": str(index)} if indexed else {}
    if kind.layout == "replicas":
        return {"training.kubeflow.org/replica-index": str(index)}
    if kind.layout == "jobset":
        for rjob in spec.get("replicatedJobs") or []:
            if isinstance(rjob, dict) and rjob.get("name") == ps_name:
                per_job = max(1, int(((rjob.get("template") or {}).get("spec") or {}).get("parallelism") or 1))
                return {
                    "jobset.sigs.k8s.io/job-index": str(index // per_job),
                    "batch.kubernetes.io/job-completion-index": str(index % per_job),
                }
    return {}


def controller_labels(job: Obj, ps_name: str) -> dict[str, str]:
    """The labels a batch Job's controller (KubeRay, for a RayCluster) puts on the pods it makes:
    what finds them (an elastic job's ungater lists them by these)."""
    uid, name = job["metadata"]["uid"], job["metadata"]["name"]
    if (job.get("apiVersion"), job.get("kind")) == ("batch/v1", "Job"):
        return {"batch.kubernetes.io/controller-uid": uid, "controller-uid": uid, "batch.kubernetes.io/job-name": name}
    if (job.get("apiVersion"), job.get("kind")) == ("ray.io/v1", "RayCluster"):
        head = ps_name == "head"
        return {"ray.io/cluster": name, "ray.io/group": "headgroup" if head else ps_name,
                "ray.io/node-type": "head" if head else "worker", "ray.io/is-ray-node": "yes"}  # fmt: skip
    return {}
