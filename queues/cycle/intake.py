"""Intake: a job becomes a pending workload and finds the ClusterQueue it waits in.

Resolving a workload's priority (Kueue's WorkloadPriorityClass, else the pod's Kubernetes
PriorityClass, else the global default) and its queue (the LocalQueue named by its label or the
namespace's ``default``, that LocalQueue's ClusterQueue, stop policies, the namespace selector)
happens here, with the reason and a message the user can act on when it cannot wait anywhere yet;
a parked workload (deactivated, or backing off) says why instead. Devices its pods claim through
DRA are charged here too (``queues.dra``): a workload whose claims cannot be charged waits,
Misconfigured, until the templates or the mappings change. The scheduler holds one ``Intake``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from queues.cycle import budget_priority
from queues.cycle.assignment import WAITING_FOR_QUOTA
from queues.cycle.queueing import PendingQueues
from queues.dra import charges, node_capacity
from queues.model import ClusterQueue, Config, SharedShapes, Snapshot, Workload
from queues.podsets import jobs

LOCAL_QUEUE_NOT_FOUND = "LocalQueueNotFound"
CLUSTER_QUEUE_NOT_FOUND = "ClusterQueueNotFound"
INACTIVE = "Inactive"
NAMESPACE_NOT_ALLOWED = "NamespaceNotAllowed"

WAITING_FOR_TURN = "waiting for its turn in the queue"


class Queueing(Protocol):
    """What intake reads of its scheduler (``queues.cycle.scheduler.Scheduler`` is one): the
    configuration and quota snapshot a workload is resolved against, the namespaces' labels, the
    clock, the queues it waits in, and how a workload is told why it waits."""

    config: Config
    snapshot: Snapshot
    namespaces: dict[str, Mapping[str, str]]
    now: float
    pending: PendingQueues

    def say(self, wl: Workload, reason: str, message: str) -> None: ...


class Intake:
    """A job's workload and the queue it waits in; see the module docstring.

    Its own state: the workloads parked (deactivated, or waiting out a backoff) and unresolved
    (no queue yet, or claims that cannot be charged), the cluster's PriorityClasses, the DRA
    objects that charge claims (``devices``), the pod sets shared between workloads (``shapes``)
    and a spent budget's lower priority (``budget_priority``)."""

    def __init__(self, scheduler: Queueing) -> None:
        self.s = scheduler
        self.parked: dict[str, Workload] = {}  # waiting out an admission check's backoff, or deactivated
        self.unresolved: dict[str, Workload] = {}  # waiting for a queue, or for its claims to be charged
        # Kubernetes PriorityClasses (scheduling.k8s.io): name -> (value, globalDefault)
        self.pod_priorities: dict[str, tuple[int, bool]] = {}
        self.devices = charges.Devices()  # DRA: what pods' claims (and resource transformations) charge
        self._offered: tuple[object, ...] | None = None  # the devices ``_offers`` was worked out from
        self._offers: node_capacity.ByNode = {}  # what each node's devices offer (placement by topology)
        self.shapes = SharedShapes()
        self.budget_priority: budget_priority.Lowered | None = None  # (a spent budget's lower priority)

    def workload_for(self, job: jobs.JobInfo, *, seq: int, now: float) -> Workload:
        """A new pending workload for ``job``, with its LocalQueue and priority resolved."""
        queue = job.queue_name
        if queue is None and f"{job.namespace}/{jobs.DEFAULT_QUEUE}" in self.s.config.local_queues:
            queue = jobs.DEFAULT_QUEUE
        priority = self.priority_of(job)
        pod_sets, shape = self.shapes.share(self.devices.charge(job.namespace, job.pod_sets, self.flavor_labels(job)))
        return Workload(
            key=job.key,
            seq=seq,
            namespace=job.namespace,
            local_queue=queue,
            priority=priority,
            pod_sets=pod_sets,
            shape=shape,
            created=now,
            queue_ts=now,
            labels=job.labels,  # shared: a JobInfo's maps are never changed
            priority_class=self.priority_class_of(job),
        )

    def priority_of(self, job: jobs.JobInfo) -> int:
        """As Kueue: the WorkloadPriorityClass the job's label names; else the Kubernetes
        PriorityClass its pod template names (``priorityClassName``); else the PriorityClass marked
        ``globalDefault``; else 0."""
        wpc = job.priority_class
        if wpc is not None and wpc in self.s.config.priority_classes:
            return self.s.config.priority_classes[wpc].value
        if job.priority_class_name is not None:
            return self.pod_priorities.get(job.priority_class_name, (0, False))[0]
        return next((value for value, default in self.pod_priorities.values() if default), 0)

    def priority_class_of(self, job: jobs.JobInfo) -> str:
        """The name of the class ``priority_of`` took the priority from, as Kueue's
        ``priorityClassRef``: the WorkloadPriorityClass, the pod template's PriorityClass, or the
        ``globalDefault`` PriorityClass; "" if none."""
        wpc = job.priority_class
        if wpc is not None and wpc in self.s.config.priority_classes:
            return wpc
        if job.priority_class_name is not None:
            return job.priority_class_name
        return next((name for name, (_, default) in self.pod_priorities.items() if default), "")

    def set_pod_priorities(self, classes: Mapping[str, tuple[int, bool]]) -> None:
        """Kubernetes PriorityClasses as the cluster has them: (value, globalDefault) by name. They
        set the priority of workloads created from now on (as in Kueue, a workload keeps its own)."""
        self.pod_priorities = dict(classes)

    def use_devices(self, devices: charges.Devices) -> None:
        """What charges claims from now on, and what nodes' devices offer to placement by topology
        (``queues.dra.node_capacity``); the caller makes the waiting workloads again."""
        self.devices = devices
        self.offer_devices()

    def offer_devices(self) -> None:
        """Tell the node inventory (if pods are placed by topology) what each node's DRA devices
        offer of the mapped resources; worked out again only when the devices or mappings changed."""
        inventory = self.s.snapshot.inventory
        if inventory is None:
            return
        d = self.devices
        key = (d.mappings, tuple(sorted(d.classes.items())), d.published, d.counter_sets)
        if key != self._offered:
            self._offered = key
            self._offers = node_capacity.by_node(d) if d.mappings.by_class else {}
        inventory.set_devices(self._offers)

    def set_devices(self, devices: charges.Devices) -> None:
        """New DRA mappings or ResourceClaimTemplates: the workloads whose claims could not be
        charged are charged again and queue if they now can (charged ones keep their charge, as a
        Kueue workload keeps the requests it was made with)."""
        self.use_devices(devices)
        flavors = self.flavor_labels()
        for wl in sorted(self.unresolved.values(), key=lambda w: w.seq):
            if charges.unaccounted(wl.pod_sets) is not None:
                pod_sets = devices.recharge(wl.namespace, wl.pod_sets)
                if flavors is not None:
                    pod_sets = devices.narrowed(wl.namespace, pod_sets, flavors)
                wl.pod_sets, wl.shape = self.shapes.share(pod_sets)
                self.enqueue(wl)

    def flavor_labels(self, job: jobs.JobInfo | None = None) -> dict[str, Mapping[str, str]] | None:
        """Each flavor's ``nodeLabels``, where ``job``'s claims may be charged by flavor (a prioritized
        list, on a cluster whose Nodes are known: ``queues.dra.alternatives``); else None."""
        if self.devices.nodes is None or (job is not None and not any(ps.claims for ps in job.pod_sets)):
            return None
        return {name: flavor.node_labels for name, flavor in self.s.snapshot.flavors.items()}

    def reconfigured(self, wl: Workload) -> None:
        """A waiting workload under a new configuration: what its prioritized lists are charged on
        each flavor is worked out again (the flavors' ``nodeLabels`` may have changed), and it queues."""
        flavors = self.flavor_labels()
        if flavors is not None and any(ps.devices for ps in wl.pod_sets):
            wl.pod_sets, wl.shape = self.shapes.share(self.devices.narrowed(wl.namespace, wl.pod_sets, flavors))
        self.enqueue(wl)

    def enqueue(self, wl: Workload, why: str = "") -> None:
        """Put ``wl`` where it waits: parked (``why`` it was), unresolved (saying why), or in its
        ClusterQueue's queue."""
        # Parked (deactivated, or waiting out a backoff): what was said when it was parked stays.
        if not wl.active:
            self.parked[wl.key] = wl
            if why or wl.reason != INACTIVE:
                self.s.say(wl, INACTIVE, f"deactivated: {why or 'an admission check rejected it'}")
            return
        if wl.requeue_at is not None and wl.requeue_at > self.s.now:
            self.parked[wl.key] = wl
            if why or wl.reason != wl.requeue_reason:
                self.s.say(
                    wl,
                    wl.requeue_reason,
                    f"{why + '; ' if why else ''}queues again after a {wl.requeue_at - self.s.now:.0f}s backoff"
                    + (f" (retry {wl.retries})" if wl.retries else ""),
                )
            return
        cq, reason, message = self.resolve(wl)
        wl.cluster_queue = cq.name if cq is not None else wl.cluster_queue
        if reason is not None:
            self.s.say(wl, reason, message)
            self.unresolved[wl.key] = wl
            return
        assert cq is not None
        self.unresolved.pop(wl.key, None)
        if wl.reason != WAITING_FOR_QUOTA:
            self.s.say(wl, WAITING_FOR_QUOTA, WAITING_FOR_TURN)
        budget_priority.apply(wl, self.budget_priority)  # (queued while a budget is spent: lower)
        self.s.pending.push(cq.name, wl)

    def resolve(self, wl: Workload) -> tuple[ClusterQueue | None, str | None, str]:
        """The ClusterQueue ``wl`` waits in, or the reason it cannot wait anywhere yet."""
        if wl.local_queue is None:
            return (
                None,
                LOCAL_QUEUE_NOT_FOUND,
                (
                    f"the job has no {jobs.QUEUE_LABEL} label and namespace {wl.namespace} has no LocalQueue "
                    f"named {jobs.DEFAULT_QUEUE}; add the label or create that LocalQueue"
                ),
            )
        lq = self.s.config.local_queues.get(f"{wl.namespace}/{wl.local_queue}")
        if lq is None:
            existing = sorted(
                k.split("/", 1)[1] for k in self.s.config.local_queues if k.startswith(f"{wl.namespace}/")
            )
            hint = (
                f"LocalQueues in {wl.namespace}: {', '.join(existing)}"
                if existing
                else (f"namespace {wl.namespace} has no LocalQueues")
            )
            return None, LOCAL_QUEUE_NOT_FOUND, f"LocalQueue {wl.namespace}/{wl.local_queue} does not exist ({hint})"
        cq_name = lq.spec.cluster_queue
        cq = self.s.snapshot.queues.get(cq_name)
        if cq is None:
            wl.cluster_queue = cq_name
            return (
                None,
                CLUSTER_QUEUE_NOT_FOUND,
                (f"LocalQueue {wl.namespace}/{wl.local_queue} points to ClusterQueue {cq_name}, which does not exist"),
            )
        if lq.spec.stop_policy != "None":
            return (
                cq,
                INACTIVE,
                (
                    f"LocalQueue {wl.namespace}/{wl.local_queue} is stopped (stopPolicy {lq.spec.stop_policy}); "
                    f"`turnstile resume localqueue {wl.namespace}/{wl.local_queue}`"
                ),
            )
        if cq.inactive_reason is not None:
            return cq, INACTIVE, f"ClusterQueue {cq.name} is inactive ({cq.inactive_reason}): {cq.inactive_message}"
        if not cq.admits_namespace(self.s.namespaces.get(wl.namespace, {})):
            return (
                cq,
                NAMESPACE_NOT_ALLOWED,
                (f"namespace {wl.namespace} does not match the namespaceSelector of ClusterQueue {cq.name}"),
            )
        unaccounted = charges.unaccounted(wl.pod_sets)
        if unaccounted is not None:
            return cq, charges.MISCONFIGURED, unaccounted
        return cq, None, ""

    def withdraw(self, wl: Workload) -> None:
        """Take a workload without quota out of wherever it waits (a queue, a backoff, an unknown queue)."""
        self.s.pending.remove(wl)
        self.parked.pop(wl.key, None)
        self.unresolved.pop(wl.key, None)

    def next_requeue(self) -> float | None:
        """When the next workload waiting out a backoff queues again; None if none does."""
        return min((w.requeue_at for w in self.parked.values() if w.active and w.requeue_at is not None), default=None)

    def wake_parked(self) -> None:
        """Workloads whose backoff has ended queue again."""
        now = self.s.now
        due = [w for w in self.parked.values() if w.active and w.requeue_at is not None and w.requeue_at <= now]
        for wl in sorted(due, key=lambda w: w.seq):
            del self.parked[wl.key]
            wl.requeue_at = None
            self.enqueue(wl)
