"""The scheduling cycle: decide which pending workloads to admit and which to preempt.

``Scheduler`` keeps the configuration, the snapshot of quota usage and the pending queues,
and decides; it performs no I/O. Callers (the simulator, the controller) feed it events
(``submit``, ``finish``, ``cancel``, ``set_config``) and enact the decisions ``schedule``
returns. Decisions are applied to the in-memory state at once ("assume"); a caller that
fails to enact one undoes it with ``forget_admission``.

One cycle, as Kueue's ``schedule()``, is a ``Cycle`` (``queues.cycle.one_cycle``): heads,
nomination, order, then admit, preempt or set aside. ``schedule`` runs cycles until one changes
nothing; unlike Kueue's, a cycle admits every workload that fits, in Kueue's order.

Its collaborators, each with its own state: the ``Nominator`` (a head's flavor assignment and
victims, failures of identical workloads remembered), ``Reservations`` (a blocked head's hold on
quota, a victim's settling), ``UsageOrdering`` (usage histories: admission fair sharing,
usage-aware fair sharing), the ``PendingQueues``, the ``Intake`` (where a job's workload waits: its
queue, priority and charge, parked or unresolved), ``Retries`` (admission checks' verdicts,
waitForPodsReady, lost nodes, stop and resume: what evicts or parks one workload) and ``Elastic``
(elastic jobs resized in place); ``explanations`` says why a workload waits. Besides its decisions
it says why workloads wait and where their admission checks stand: its caller takes that with
``take_told`` (a ``Told``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from queues.cycle import budget_priority, explanations, preemption, provisioning, tas, victims
from queues.cycle.assignment import WAITING_FOR_QUOTA, Assignment, Mode
from queues.cycle.decisions import ADMISSION_CHECK, CLUSTER_QUEUE_STOPPED, PREEMPTED, Admit, Decision, Evict, Told
from queues.cycle.elastic import Elastic
from queues.cycle.intake import Intake
from queues.cycle.nomination import Nominator
from queues.cycle.one_cycle import Cycle
from queues.cycle.queueing import PendingQueues
from queues.cycle.reservations import SETTLE_SECONDS, Reservations
from queues.cycle.retries import Retries
from queues.cycle.usage_history import AdmissionFairSharing, UsageHistory, UsageOrdering
from queues.kueue.fair_sharing_config import FairSharing
from queues.model import Admission, ClusterQueue, Config, Snapshot, Workload, pod_requests
from queues.placement.inventory import Inventory
from queues.placement.topology import COMPACT

__all__ = [
    "ADMISSION_CHECK",
    "CLUSTER_QUEUE_STOPPED",
    "PREEMPTED",
    "SETTLE_SECONDS",
    "Admit",
    "Decision",
    "Evict",
    "Scheduler",
]


MAX_CYCLES_PER_CALL = 1_000_000


class Scheduler:
    """Decides admissions and preemptions; see the module docstring."""

    def __init__(
        self,
        config: Config,
        *,
        namespaces: Mapping[str, Mapping[str, str]] | None = None,
        fair_sharing: FairSharing | None = None,
        admission_fair_sharing: AdmissionFairSharing | None = None,
        inventory: Inventory | None = None,
        packing: str = COMPACT,
        ignore_undeclared: bool = False,
    ) -> None:
        self.config = config
        self.namespaces: dict[str, Mapping[str, str]] = dict(namespaces or {})
        self.fair_sharing = fair_sharing  # Kueue's fairSharing configuration (``queues.cycle.fairsharing``)
        # the nodes TAS flavors place on (``queues.placement.inventory``); the caller fills it
        self.inventory = inventory
        self.snapshot = Snapshot(config, fair_sharing, inventory, packing, ignore_undeclared=ignore_undeclared)
        self._inventory_seen = -1
        self.pending = PendingQueues()
        self.work = self.pending.work  # (what the core did: ``queues.work``)
        self.nominator = Nominator(self.snapshot, self.pending, self.work)
        self.reservations = Reservations(self.pending)
        # admission fair sharing (``queues.cycle.usage_history``): each LocalQueue's decayed usage
        self.usage = UsageHistory(admission_fair_sharing) if admission_fair_sharing is not None else None
        # usage-aware fair sharing (Turnstile's ``fairSharing.usageHalfLifeTime``): each ClusterQueue's decayed usage
        half_life = fair_sharing.usage_half_life if fair_sharing is not None else 0.0
        self.queue_usage = (
            UsageHistory(AdmissionFairSharing(half_life, sampling_interval=0.0), by_flavor=True) if half_life else None
        )
        self.ordering = UsageOrdering(self.usage, self.queue_usage)
        self.pending.lane_usage = lambda lane: self.ordering.lane_usage(self.config, lane, self.now)
        self.pending.fair_queues = self.ordering.fair_queues(config)
        self.workloads: dict[str, Workload] = {}
        self.now = 0.0
        self.cap_hits = 0
        # waitForPodsReady.blockAdmission: admit nothing while an admitted workload is not Ready
        self.block_admission = False
        self.told = Told()  # what it said since the caller last took it (``take_told``)
        self.intake = Intake(self)  # where a workload waits, its priority, its pod sets' charge
        self.retries = Retries(self)  # the events that evict or park one workload
        self.elastic = Elastic(self)  # elastic jobs' admissions resized in place, growths waiting

    # ----- inputs -------------------------------------------------------------------------

    def submit(self, wl: Workload) -> None:
        self.workloads[wl.key] = wl
        self.intake.enqueue(wl)

    def finish(self, key: str) -> Workload | None:
        """The job ended (or was deleted): release its quota and forget it."""
        wl = self.workloads.pop(key, None)
        if wl is None:
            return None
        self.intake.unresolved.pop(key, None)
        self.intake.parked.pop(key, None)
        self.pending.remove(wl)
        if wl.admission is not None:
            self._release(wl)
        return wl

    cancel = finish

    def reprioritize(self) -> None:
        """A budget that lowers priority was spent or renewed (``queues.cycle.budget_priority``): waiting
        work it covers queues again at the priority it has now; admitted work it lowered gets its
        own back once no spent budget lowers it (running work keeps what it was admitted with)."""
        for key, cq in list(self.pending.where.items()):
            wl = self.workloads.get(key)
            if wl is not None and budget_priority.wanted(wl, self.intake.budget_priority) != wl.priority:
                self.pending.remove(wl)
                budget_priority.apply(wl, self.intake.budget_priority)
                self.pending.push(cq, wl)
        lowered = self.intake.budget_priority
        for wl in self.workloads.values():
            if wl.admission is not None and wl.own_priority is not None and (lowered is None or lowered(wl) is None):
                budget_priority.restore(wl)

    def use_inventory(self, inventory: Inventory) -> None:
        """Place by topology from now on, on ``inventory``'s nodes (the controller's, once a TAS
        flavor is configured); what admitted workloads were placed on is held there."""
        if self.inventory is inventory:
            return
        self.inventory = self.snapshot.inventory = inventory
        self.intake.offer_devices()  # (what nodes' DRA devices offer, as placement counts them)
        for wl in self.workloads.values():
            held = wl.admission is not None and wl.admission.placement
            if held and wl.admission is not None and wl.admission.cluster_queue in self.snapshot.queues:
                inventory.hold(wl.admission.placement, pod_requests(wl), 1)
        self._inventory_seen = -1
        self.nominator.failures.clear()

    def set_config(self, config: Config) -> list[Decision]:
        """New admin configuration: rebuild quotas, keep admitted work, re-resolve the waiting;
        returns the evictions the new configuration asks for (``HoldAndDrain``)."""
        self.config = config
        for name in sorted(config.terminating - self._queues_in_use()):
            config.cluster_queues.pop(name, None)
            config.terminating.discard(name)
        for wl in self.workloads.values():
            if wl.admission is not None and wl.admission.placement:
                self.snapshot.remove_workload(wl)  # (its node capacity is held again below)
        packing, ignore = self.snapshot.packing, self.snapshot.ignore_undeclared
        self.snapshot = Snapshot(config, self.fair_sharing, self.inventory, packing, ignore_undeclared=ignore)
        self.pending.fair_queues = self.ordering.fair_queues(config)
        self.nominator.reset(self.snapshot)
        self.reservations.holders.clear()
        for wl in self.workloads.values():
            if wl.admission is not None:
                self.snapshot.add_workload(wl)
        decisions: list[Decision] = []
        for wl in sorted(self.workloads.values(), key=lambda w: w.seq):
            if wl.admission is None:
                continue
            cq = self.snapshot.queues.get(wl.admission.cluster_queue)
            if wl.checks and cq is not None:
                # A check the ClusterQueue no longer names (or that no longer applies) is not waited for.
                applies = provisioning.checks_to_pass(config, cq.spec, wl.pod_sets, wl.admission)
                still = tuple(c for c in wl.checks if c in applies)
                if still != wl.checks:
                    wl.checks = still
                    self.told.checked[wl.key] = not still
                    if not still:
                        self.say(wl, "Admitted", f"admitted by ClusterQueue {cq.name}")
            lq = self.config.local_queues.get(f"{wl.namespace}/{wl.local_queue}")
            if cq is not None and cq.spec.stop_policy == "HoldAndDrain":
                decisions.append(self.evict(wl, CLUSTER_QUEUE_STOPPED, "ClusterQueueStopped", None))
            elif lq is not None and lq.spec.stop_policy == "HoldAndDrain":
                decisions.append(self.evict(wl, CLUSTER_QUEUE_STOPPED, "LocalQueueStopped", None))
        for wl in sorted(self.workloads.values(), key=lambda w: w.seq):
            if wl.admission is None:
                self.pending.remove(wl)
                self.intake.reconfigured(wl)
        for name in self.snapshot.queues:
            self.pending.requeue(name)
        self.ordering.hold(self.workloads.values(), self.now)
        return decisions

    def _queues_in_use(self) -> set[str]:
        return {wl.admission.cluster_queue for wl in self.workloads.values() if wl.admission is not None}

    def _empty_terminating(self) -> bool:
        return bool(self.config.terminating - self._queues_in_use())

    def set_namespaces(self, namespaces: Mapping[str, Mapping[str, str]]) -> list[Decision]:
        """Namespace labels changed (namespaceSelector): the waiting workloads of the namespaces that
        came, went or changed their labels are resolved again (admitted ones keep their quota, as
        Kueue's; quotas do not depend on namespaces, so nothing else is rebuilt: a cluster creating
        1,000 namespaces must not rebuild 1,000 ClusterQueues for each). Decides nothing itself."""
        changed = {n for n in self.namespaces.keys() | namespaces.keys() if self.namespaces.get(n) != namespaces.get(n)}
        self.namespaces = dict(namespaces)
        for wl in sorted(self.workloads.values(), key=lambda w: w.seq):
            if wl.admission is None and wl.namespace in changed:
                self.pending.remove(wl)
                self.intake.enqueue(wl)
        return []

    # ----- the cycle ---------------------------------------------------------------------

    def schedule(self, max_decisions: int | None = None) -> list[Decision]:
        """Run cycles until one changes nothing; return the decisions, in order.

        With ``max_decisions``, stop after the cycle that reaches it: the next call goes on with
        the very same cycles, so a caller can commit and enact a large backlog in slices.
        """
        out: list[Decision] = list(self.elastic.grow())  # (admitted jobs' growths first: see elastic)
        self.intake.wake_parked()
        self.reservations.wake_settled(self.now)
        # Every cycle admits, evicts or sets aside at least one workload; the bound only guards
        # against a bug turning into a hang (``cap_hits`` counts it, tests assert it stays 0).
        limit = min(MAX_CYCLES_PER_CALL, 8 * len(self.workloads) + 64)
        for i in range(limit + 1):
            if i == limit:
                self.cap_hits += 1
                break
            if self.config.terminating and self._empty_terminating():
                out.extend(self.set_config(self.config))
            changed, decisions = self.cycle()
            out.extend(decisions)
            if not changed or (max_decisions is not None and len(out) >= max_decisions):
                break
        return out

    def _not_ready(self) -> Workload | None:
        """An admitted workload whose pods have not all been Ready yet (blockAdmission), if any."""
        return next((w for w in self.workloads.values() if w.admission is not None and w.ready_at is None), None)

    def _blocked_by(self, unready: Workload) -> None:
        """Every queue's head is told why nothing is admitted now."""
        for name in sorted(self.pending.active):
            head = self.pending.head(name)
            why = f"admission waits until {unready.key}'s pods are Ready (waitForPodsReady.blockAdmission)"
            if head is not None:
                self.say(head, WAITING_FOR_QUOTA, why)

    @property
    def cycles(self) -> int:
        return self.work.cycles

    def cycle(self) -> tuple[bool, list[Decision]]:
        """One cycle (``queues.cycle.one_cycle``): whether it changed anything, and its decisions."""
        self.work.cycles += 1
        if self.inventory is not None and self.inventory.version != self._inventory_seen:
            self._inventory_seen = self.inventory.version
            self._nodes_freed()
        if self.block_admission and (unready := self._not_ready()) is not None:
            self._blocked_by(unready)
            return False, []
        return Cycle(self).run()

    def set_aside(self, wl: Workload, cq: ClusterQueue, assignment: Assignment) -> bool:
        """``wl`` cannot be admitted now: it says why and waits aside (True), or, StrictFIFO, its
        queue is blocked until its tree frees capacity (False: the queue's state did not change)."""
        message = assignment.message
        if assignment.mode == Mode.NO_CANDIDATES and wl.evicted_by is not None:
            message += f"; it preempts nobody on the chain that evicted it (from {wl.evicted_by.key})"
        self.say(wl, assignment.reason, message)
        if cq.strict_fifo:
            self.pending.block(cq.name, self.nominator.generation_of(cq.tree_key))
            if assignment.mode == Mode.NO_CANDIDATES and not preemption.can_always_reclaim(cq):
                self.reservations.holders.add(cq.name)
            else:
                self.reservations.holders.discard(cq.name)
            return False
        self.pending.set_aside(cq.name, wl, self.nominator.class_key(wl, cq))
        return True

    # ----- applying decisions ------------------------------------------------------------

    def admit(self, wl: Workload, cq: ClusterQueue, assignment: Assignment) -> Admit:
        """Admit ``wl`` to ``cq`` with ``assignment``: its quota is taken at once (assumed)."""
        self.pending.remove(wl)
        self.reservations.holders.discard(cq.name)
        admission = Admission(
            cq.name,
            assignment.flavors,
            dict(assignment.usage),
            assignment.borrowing,
            dict(assignment.counts),
            dict(assignment.placement),
        )
        wl.admission = admission
        wl.admitted_at = self.now
        wl.evicted_by = None
        self.ordering.record(wl, cq.name, admission.usage, 1, self.now)
        wl.checks = provisioning.checks_to_pass(self.config, cq.spec, wl.running_pod_sets, admission)
        if wl.checks:
            self.say(
                wl,
                provisioning.WAITING_FOR_CAPACITY,
                f"quota reserved in ClusterQueue {cq.name}; waiting for admission check(s) {', '.join(wl.checks)}",
            )
        else:
            wl.started_at = self.now
            self.say(wl, "Admitted", f"admitted by ClusterQueue {cq.name}")
        self.snapshot.add_workload(wl)
        return Admit(wl, assignment, admission)

    def evict(self, wl: Workload, reason: str, detail: str, by: str | None, *, message: str = "") -> Evict:
        """Take ``wl``'s admission back (``reason``: Kueue's); it queues again (``message``: why, if parked)."""
        released, ready_at = wl.admission, wl.ready_at
        self._release(wl)  # (its admission checks go with the reservation)
        wl.queue_ts = self.now
        self.say(wl, WAITING_FOR_QUOTA, f"evicted ({reason}: {detail}); waiting to be admitted again")
        self.intake.enqueue(wl, message)
        return Evict(wl, reason, detail, by, released, message, ready_at)

    def say(self, wl: Workload, reason: str, message: str) -> None:
        """``wl``'s reason and message (told: the caller stores what changed)."""
        if (wl.reason, wl.message) != (reason, message):
            wl.reason, wl.message = reason, message
            self.told.said.add(wl.key)

    def take_told(self) -> Told:
        """What it said since the last call (reasons changed, admission checks' states), to store;
        it starts telling afresh."""
        told, self.told = self.told, Told()
        return told

    def restore(self, workloads: Iterable[Workload]) -> list[Decision]:
        """Take over workloads as stored (admitted ones keep their admission); like ``set_config``,
        returns the evictions the configuration asks for."""
        for wl in workloads:
            self.workloads[wl.key] = wl
        return self.set_config(self.config)

    def forget_admission(self, wl: Workload) -> None:
        """Undo an admission the caller could not enact (e.g. the job vanished)."""
        if wl.admission is not None:
            self._release(wl)
            self.intake.enqueue(wl)

    def _release(self, wl: Workload) -> None:
        assert wl.admission is not None
        cq = self.snapshot.queues.get(wl.admission.cluster_queue)
        self.ordering.record(wl, wl.admission.cluster_queue, wl.admission.usage, -1, self.now)
        self.snapshot.remove_workload(wl)
        if wl.started_at is not None:  # (the time its job ran in this admission)
            wl.past_run += max(0.0, self.now - wl.started_at)
        wl.admission = None
        wl.admitted_at = wl.started_at = wl.ready_at = None
        wl.checks = ()  # checks belong to a reservation
        if cq is not None:
            self.freed(cq)

    def freed(self, cq: ClusterQueue) -> None:
        """Capacity was freed in ``cq``'s tree: give every waiting workload there another look."""
        self.nominator.freed(cq.tree_key)
        for other in self.snapshot.queues_in_tree(cq):
            self.pending.requeue(other.name)

    # ----- where a workload waits ----------------------------------------------------------

    def _nodes_freed(self) -> None:
        """Node capacity was given back (or nodes added): every queue placing by topology looks again."""
        trees: set[str] = set()
        for cq in self.snapshot.queues.values():
            if cq.tree_key not in trees and tas.uses_topology(self.snapshot, cq):
                trees.add(cq.tree_key)
                self.freed(cq)

    def look_again(self) -> None:
        """Something outside the quota trees changed (a GPU-hour budget renewed or exhausted):
        every queue gets another look."""
        for cq in self.snapshot.queues.values():
            self.freed(cq)

    def next_settled(self) -> float | None:
        """When the next victim still waiting settles (the caller schedules again then)."""
        return self.reservations.next_settled(self.workloads)

    def explain(self, wl: Workload) -> tuple[str, str]:
        """Why ``wl`` waits, in words a user can act on, with what stands ahead of it."""
        return explanations.explain(self.pending, self.snapshot, wl)

    def preemption_plan(self, key: str) -> tuple[Assignment | None, list[victims.Target]]:
        """What admitting pending ``key`` now would take: its assignment and whom it would evict."""
        return explanations.preemption_plan(self.nominator, self.workloads.get(key))
