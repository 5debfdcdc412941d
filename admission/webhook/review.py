"""What the webhook answers: the decisions on one job, from an in-memory view of the queues.

``mutate`` (on CREATE): a job that names a LocalQueue, or lives in a namespace with a
LocalQueue named ``default`` (then it gets the label), is suspended through its kind's field;
without a priority-class label it gets the WorkloadPriorityClass named ``default`` if there is
one. A job without a queue in a managed namespace that asks for a managed resource is held
suspended too, with a warning naming the fix (``admission.policy``). Pods and the serving kinds
that make them are answered by ``admission.webhook.pods``.

``validate`` rejects a queue label naming a LocalQueue that does not exist (listing those that do)
when ``missing_queue`` is ``refuse`` (by default, as Kueue, such a job is held suspended with a
warning, so GitOps tools may apply a job before its LocalQueue), an unknown priority class, and
changing the queue of a job that is running; it warns about GPU containers without CPU/memory
requests, GPU jobs without a queue in a namespace that has LocalQueues, and jobs that can never fit
their ClusterQueue. Objects of other kinds pass unchanged; a malformed job is left to the API
server's own validation.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from admission.jobs import BY_KIND, job_fields
from admission.jobs.base import Integration
from admission.jobs.job_fields import KEEP_UNTIL
from admission.policy import DEFAULT_POLICY, HOLD, REFUSE, Policy
from queues import errors, managed, quantity
from queues.cycle import flavors
from queues.cycle.assignment import WAITING_FOR_QUOTA, Mode
from queues.cycle.elastic import ELASTIC_GATE
from queues.dra import charges
from queues.model import Config, Snapshot, Workload
from queues.podsets import jobs, pod_resources, trainjobs

Obj = dict[str, Any]


@dataclass(slots=True)
class Answer:
    allowed: bool = True
    message: str = ""
    patch: list[Obj] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _queue_of(obj: Mapping[str, Any]) -> str | None:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return labels.get(jobs.QUEUE_LABEL) or None


def integration_of(request_kind: Any, obj: Obj) -> Integration | None:
    """The integration of the object under review: by the review's ``request.kind`` (what the API
    server says it is), else by the object's own TypeMeta."""
    if isinstance(request_kind, Mapping) and request_kind.get("kind"):
        group, version = str(request_kind.get("group") or ""), str(request_kind.get("version") or "")
        api_version = f"{group}/{version}" if group else version
        return BY_KIND.get((api_version, str(request_kind["kind"])))
    return BY_KIND.get((str(obj.get("apiVersion")), str(obj.get("kind"))))


def queue_labels(obj: Obj, namespace: str, config: Config) -> tuple[str | None, dict[str, str]]:
    """The object's LocalQueue (its label, else the namespace's ``default`` LocalQueue) and the labels
    to add: the queue when defaulted, the ``default`` WorkloadPriorityClass when it names none."""
    add: dict[str, str] = {}
    queue = _queue_of(obj)
    if queue is None and f"{namespace}/{jobs.DEFAULT_QUEUE}" in config.local_queues:
        queue = add[jobs.QUEUE_LABEL] = jobs.DEFAULT_QUEUE
    labels = (obj.get("metadata") or {}).get("labels") or {}
    if queue is not None and not labels.get(jobs.PRIORITY_LABEL) and "default" in config.priority_classes:
        add[jobs.PRIORITY_LABEL] = "default"
    return queue, add


def add_map_entries(obj: Obj, pointer: str, entries: dict[str, str]) -> list[Obj]:
    """JSON patch ops adding ``entries`` to the string map at ``pointer`` (created when absent)."""
    current: Any = obj
    for part in pointer.strip("/").split("/"):
        current = current.get(part.replace("~1", "/").replace("~0", "~")) if isinstance(current, dict) else None
    if not entries:
        return []
    if not isinstance(current, dict) or not current:
        return [{"op": "add", "path": pointer, "value": {**(current or {}), **entries}}]
    return [{"op": "add", "path": f"{pointer}/{jobs.pointer_token(k)}", "value": v} for k, v in entries.items()]


def mutate(
    obj: Obj, namespace: str, config: Config, integration: Integration | None = None, policy: Policy = DEFAULT_POLICY
) -> Answer:
    answer = Answer()
    integration = integration or integration_of(None, obj)
    if integration is None or jobs.owned_by_parent(obj.get("metadata") or {}, policy.owners):
        return answer  # (a queued parent's part: its parent's workload holds its pods)
    queue, add_labels = queue_labels(obj, namespace, config)
    if queue is None:
        what = f"{integration.ref.kind} {namespace}/{(obj.get('metadata') or {}).get('name')}"
        held = policy.hold_object(config, namespace, obj, integration.kind, what)
        if held is None:
            return answer
        answer.warnings.append(held)  # held suspended; the controller's Event says the same
    answer.patch.extend(add_map_entries(obj, "/metadata/labels", add_labels))
    # The suspend field, creating its parents where the job omits them (runPolicy of Kubeflow jobs).
    path = integration.kind.suspend_path
    node: Any = obj
    for depth, key in enumerate(path[:-1]):
        child = node.get(key) if isinstance(node, dict) else None
        if not isinstance(child, dict):
            value: Any = True
            for k in reversed(path[depth + 1 :]):
                value = {k: value}
            answer.patch.append({"op": "add", "path": "/" + "/".join(path[: depth + 1]), "value": value})
            break
        node = child
    else:
        if node.get(path[-1]) is not True:
            answer.patch.append({"op": "add", "path": "/" + "/".join(path), "value": True})
    if jobs.elastic(obj):  # its pods start only as far as its admission goes (``queues.cycle.elastic``)
        answer.patch.extend(_gate_templates(obj, integration))
    return answer


def _gate_templates(obj: Obj, integration: Integration) -> list[Obj]:
    """Kueue's elastic-job scheduling gate added to each of an elastic job's pod templates (as
    Kueue's Job and RayCluster webhooks do; a RayJob's cluster's, not its submitter's): its pods wait
    until the controller lifts it, up to the admitted count of their pod set."""
    try:
        info = jobs.read_job(obj, integration.kind)
    except errors.Invalid:
        return []  # (refused by validation, naming the field)
    gate = {"name": ELASTIC_GATE}
    ops: list[Obj] = []
    for name, pointer in info.template_paths.items():
        if name == "submitter" and info.kind == "RayJob":
            continue  # (its submitter Job's pod is not its cluster's: never resized, never held)
        spec = job_fields.pointer_get(obj, f"{pointer}/spec")
        if not isinstance(spec, dict):
            continue
        gates = spec.get("schedulingGates")
        if not isinstance(gates, list):
            ops.append({"op": "add", "path": f"{pointer}/spec/schedulingGates", "value": [gate]})
        elif not any(isinstance(g, dict) and g.get("name") == ELASTIC_GATE for g in gates):
            ops.append({"op": "add", "path": f"{pointer}/spec/schedulingGates/-", "value": gate})
    return ops


def validate(
    operation: str,
    obj: Obj,
    old: Obj | None,
    namespace: str,
    config: Config,
    integration: Integration | None = None,
    *,
    missing_queue: str = HOLD,
    policy: Policy | None = None,
    runtimes: trainjobs.Runtimes | None = None,
    devices: charges.Devices | None = None,
) -> Answer:
    answer = Answer()
    integration = integration or integration_of(None, obj)
    policy = policy or Policy(missing_queue=missing_queue)
    if (
        integration is None
        or operation not in ("CREATE", "UPDATE")
        or jobs.owned_by_parent(obj.get("metadata") or {}, policy.owners)
    ):
        return answer
    missing_queue = policy.missing_queue
    name = f"{integration.ref.kind} {namespace}/{(obj.get('metadata') or {}).get('name')}"
    problems: list[str] = []
    queue = _queue_of(obj)
    existing = managed.namespace_queues(config, namespace)
    if queue is not None and queue not in existing:
        where = f"LocalQueues in {namespace}: {', '.join(existing)}" if existing else f"{namespace} has no LocalQueue"
        missing = f"metadata.labels[{jobs.QUEUE_LABEL}]: LocalQueue {queue!r} does not exist in namespace {namespace}"
        if missing_queue == REFUSE:
            problems.append(f"{missing} ({where}); fix the label or ask an admin to create the LocalQueue")
        elif operation == "CREATE":  # Kueue's behaviour: held until the queue exists (GitOps applies in any order)
            answer.warnings.append(
                f"{missing} yet ({where}); the job is held suspended (LocalQueueNotFound) until it is created"
            )
    labels = (obj.get("metadata") or {}).get("labels") or {}
    priority = labels.get(jobs.PRIORITY_LABEL)
    if priority and priority not in config.priority_classes:
        known = ", ".join(sorted(config.priority_classes)) or "none"
        problems.append(
            f"metadata.labels[{jobs.PRIORITY_LABEL}]: WorkloadPriorityClass {priority!r} does not exist "
            f"(known: {known})"
        )
    if operation == "UPDATE" and old is not None and _queue_of(old) != queue and not integration.is_suspended(old):
        problems.append(
            f"metadata.labels[{jobs.QUEUE_LABEL}]: cannot move a running job from queue {_queue_of(old)!r} "
            f"to {queue!r}; suspend or recreate it"
        )
    problems.extend(_partial_admission(operation, obj, old, integration))
    queued = queue is not None or f"{namespace}/{jobs.DEFAULT_QUEUE}" in config.local_queues
    info: jobs.JobInfo | None = None
    if queued:
        # A job Turnstile must queue but cannot read would wait suspended forever, unexplained.
        try:
            info = jobs.read_job(
                {**obj, "metadata": {**(obj.get("metadata") or {}), "namespace": namespace}}, integration.kind, runtimes
            )
        except errors.Invalid as exc:
            problems.extend(str(e) for e in exc.errors)
    if problems:
        answer.allowed = False
        answer.message = f"{name}: " + "; ".join(problems)
        return answer
    if operation == "CREATE":
        held = queue is None and policy.hold_object(config, namespace, obj, integration.kind, "") is not None
        answer.warnings.extend(_warnings(obj, None if held else queue, [] if held else existing))
        if queue is not None:
            answer.warnings.extend(_never_fits(obj, namespace, queue, config, integration.kind, runtimes, devices))
        if info is not None and devices is not None:  # (None: a webhook that does not see the templates)
            answer.warnings.extend(_unaccounted_claims(info, devices))
    return answer


def _unaccounted_claims(info: jobs.JobInfo, devices: charges.Devices) -> list[str]:
    """A warning for each pod set whose DRA claims cannot be charged to quota (``queues.dra``): the
    job is created and waits, Misconfigured, rather than run with its devices uncounted; and for
    each prioritized list (``firstAvailable``), what it is charged at most: its largest alternative."""
    out: list[str] = []
    for ps in devices.charge(info.namespace, info.pod_sets):
        if ps.unaccounted:
            out.append(
                f"pod set {ps.name}: its devices cannot be charged to quota, so the job waits (Misconfigured) "
                f"until this is fixed: {ps.unaccounted}"
            )
            continue
        for listed in devices.prioritized(info.namespace, ps):
            charged = ", ".join(f"{r} {quantity.format_milli(v)}" for r, v in sorted(ps.devices.items()))
            out.append(
                f"pod set {ps.name}, {listed}: a prioritized list (firstAvailable) is charged to quota the most "
                f"any of its alternatives takes, since the allocator picks one only after admission (on a flavor "
                f"whose nodes serve only some of them, the most those take): the pod set's claims are charged "
                f"up to {charged} per pod"
            )
    return out


def _partial_admission(operation: str, obj: Obj, old: Obj | None, integration: Integration) -> list[str]:
    """Kueue's rules for ``job-min-parallelism``: a new Job asks for fewer pods than its parallelism
    (the range itself is ``read_job``'s), and a running Job's minimum does not change."""
    if integration.count_pointer is None:
        return []
    notes = (obj.get("metadata") or {}).get("annotations") or {}
    where = f"metadata.annotations[{jobs.MIN_PARALLELISM}]"
    if operation == "UPDATE" and old is not None and not integration.is_suspended(old):
        before = ((old.get("metadata") or {}).get("annotations") or {}).get(jobs.MIN_PARALLELISM)
        if before != notes.get(jobs.MIN_PARALLELISM):
            return [f"{where}: cannot change while the Job runs; suspend it first"]
    if operation != "CREATE" or (jobs.MIN_PARALLELISM not in notes and not jobs.elastic(obj)):
        return []
    try:
        info = jobs.read_job(obj, integration.kind)
    except errors.Invalid:
        return []  # said by read_job, with the field
    return [str(p) for p in jobs.creation_problems(info)]


_EMPTY: list[tuple[Config, Snapshot]] = []  # the last configuration's quotas with nothing admitted


def _empty_snapshot(config: Config, ignore_undeclared: bool = False) -> Snapshot:
    """The configuration's quotas with nothing admitted (one kept per configuration and
    quotaCheckStrategy)."""
    if not _EMPTY or _EMPTY[0][0] is not config or _EMPTY[0][1].ignore_undeclared != ignore_undeclared:
        _EMPTY[:] = [(config, Snapshot(config, ignore_undeclared=ignore_undeclared))]
    return _EMPTY[0][1]


def _never_fits(
    obj: Obj,
    namespace: str,
    queue: str,
    config: Config,
    kind: jobs.Kind | None = None,
    runtimes: trainjobs.Runtimes | None = None,
    devices: charges.Devices | None = None,
) -> list[str]:
    """A warning when the job would not fit its ClusterQueue even with nothing else admitted:
    the core's own flavor assignment against empty quotas (nominal plus what it may borrow), its
    DRA claims charged (a claim that cannot be is warned about on its own)."""
    lq = config.local_queues.get(f"{namespace}/{queue}")
    if lq is None:
        return []
    try:
        info = jobs.read_job(
            {**obj, "metadata": {**(obj.get("metadata") or {}), "namespace": namespace}}, kind, runtimes
        )
    except errors.Invalid:
        return []
    ignore = devices is not None and devices.transformations.ignore_undeclared  # (Kueue's quotaCheckStrategy)
    snapshot = _empty_snapshot(config, ignore)
    cq = snapshot.queues.get(lq.spec.cluster_queue)
    if cq is None:
        return []
    pod_sets = devices.charge(namespace, info.pod_sets) if devices is not None else info.pod_sets
    if charges.unaccounted(pod_sets) is not None:
        return []
    wl = Workload(
        key=info.key, seq=0, namespace=namespace, local_queue=queue, priority=0, pod_sets=pod_sets,
        created=0.0, queue_ts=0.0,
    )  # fmt: skip
    assignment = flavors.assign(snapshot, cq, wl, None)
    if assignment.mode == Mode.FIT or assignment.reason == WAITING_FOR_QUOTA:
        return []  # (it fits; or, larger than the queue, it may run partially: job-min-parallelism)
    return [
        f"this job can never be admitted by ClusterQueue {cq.name} as configured, even with nothing else "
        f"running ({assignment.message}); it will wait until an admin changes the quota or flavors"
    ]


def _rfc3339(text: str) -> bool:
    try:
        parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return False
    return parsed.tzinfo is not None


def _warnings(obj: Obj, queue: str | None, existing: list[str]) -> list[str]:
    out: list[str] = jobs.unsupported_markings(obj) if queue is not None else []
    keep = ((obj.get("metadata") or {}).get("annotations") or {}).get(KEEP_UNTIL)
    if keep is not None and not _rfc3339(str(keep)):
        out.append(
            f"metadata.annotations[{KEEP_UNTIL}]: {keep!r} is not an RFC 3339 time (2026-12-24T18:00:00Z); "
            "idle reclaim does not keep this job"
        )
    try:
        templates = jobs.pod_templates(obj)
    except errors.Invalid:
        return out
    gpu_job = False
    for ps_name, _, template in templates:
        for c in (template.get("spec") or {}).get("containers") or []:
            requests = ((c or {}).get("resources") or {}).get("requests") or {}
            limits = ((c or {}).get("resources") or {}).get("limits") or {}
            gpus = [r for r in {**limits, **requests} if pod_resources.is_gpu(r)]
            if gpus:
                gpu_job = True
                # a limit stands for the request it does not set (Kubernetes defaults one to the other)
                missing = [r for r in ("cpu", "memory") if r not in requests and r not in limits]
                if missing:
                    out.append(
                        f"pod set {ps_name}, container {c.get('name')}: requests {gpus[0]} but no "
                        f"{' or '.join(missing)}; set resources.requests so quota and nodes account for them"
                    )
    if gpu_job and queue is None and existing:
        out.append(
            f"a GPU job without label {jobs.QUEUE_LABEL} is not queued and starts at once; "
            f"LocalQueues here: {', '.join(existing)}"
        )
    return out
