"""What a committed scheduling step tells the world: metrics, Events on the jobs, decision logs.

The controller decides and commits; ``Reporter`` then reports what the store accepted (and
only that): admissions and evictions to ``/metrics`` and the ledger clock, ``Admitted``,
``Preempted``, ``Evicted`` and (on a new reason) ``Pending`` Events on the jobs, and one log line
per decision carrying the workload and queue fields ``--log-format json`` shows.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from admission.controller.events import EventPoster
from admission.controller.monitoring.metrics import Metrics
from admission.controller.term import Term
from admission.jobs.base import JobView
from admission.store import workloads as store
from admission.store.workload_objects import object_name
from queues import efficiency, podsready
from queues.cycle.scheduler import Evict, Scheduler
from queues.model import Workload

log = logging.getLogger(__name__)


class Reporter:
    def __init__(self, metrics: Metrics, events: EventPoster, view: Callable[[str], JobView | None]) -> None:
        self.metrics = metrics
        self.events = events
        self.view = view

    def committed(
        self,
        term: Term,
        evicted: dict[str, Evict],
        result: store.CommitResult,
        admitted: dict[int, Workload],
        said: list[tuple[str, str, str]],
        at: float,
        started: Sequence[Workload] = (),
    ) -> None:
        """What a committed step tells the world: metrics, and Events on the jobs."""
        sched = term.scheduler
        view = self.view
        preemptors = {e.by for e in evicted.values() if e.by}
        info, debug = log.isEnabledFor(logging.INFO), log.isEnabledFor(logging.DEBUG)  # skip building fields
        for key, e in evicted.items():
            row = term.by_key.get(key)
            if row is None or row.id not in result.evicted:
                continue
            by = sched.workloads.get(e.by) if e.by else None
            by_cq = by.admission.cluster_queue if by is not None and by.admission is not None else None
            self.metrics.evicted_workload(e.workload, e.cluster_queue, e.reason, e.detail, by_cq, at, e.ready_at)
            if info:
                log.info(
                    "evicted %s from ClusterQueue %s: %s (%s)%s",
                    key,
                    e.cluster_queue,
                    e.reason,
                    e.detail,
                    f" by {e.by}" if e.by else "",
                    extra=_fields(e.workload, "Evicted", cluster_queue=e.cluster_queue, reason=e.detail, by=e.by),
                )
            if e.by:
                self.events.post(
                    view(key),
                    "Preempted",
                    f"preempted by {self.workload_name(e.by)} ({e.detail}); it waits to be admitted again",
                )
            else:  # (waitForPodsReady's has its own reason, as Kueue's; the message says what happens next)
                reason = e.reason if e.reason in (podsready.REASON, efficiency.GPU_IDLE) else "Evicted"
                # what its state says (why, and what happens next); the eviction's own why if the
                # same step admitted it again (a node lost: it was placed elsewhere at once)
                readmitted = e.workload.admission is not None and e.message
                why = e.message if readmitted else e.workload.message
                detail = f": {why}" if why else ""
                self.events.post(view(key), reason, f"evicted: {e.reason} ({e.detail}){detail}", type="Warning")
        for row_id in result.admitted:
            wl = admitted[row_id]
            assert wl.admission is not None
            self.metrics.reserved_workload(wl, at)
            if not wl.checks:
                self.metrics.workloads.admitted_workload(wl, at, cohorts_above(sched, wl))
            if (v := view(wl.key)) is not None:
                self.events.forget(v.uid)  # a later wait is a first wait again
            flavors = sorted({f for per_res in wl.admission.flavors.values() for f in per_res.values()})
            if info:
                log.info(
                    "admitted %s by ClusterQueue %s on flavor %s",
                    wl.key,
                    wl.admission.cluster_queue,
                    ", ".join(flavors),
                    extra=_fields(
                        wl, "Admitted", cluster_queue=wl.admission.cluster_queue, flavors=wl.admission.flavors
                    ),
                )
            where = f"ClusterQueue {wl.admission.cluster_queue} on flavor {', '.join(flavors)}" + (
                " (borrowing)" if wl.admission.borrowing else ""
            )
            if wl.checks:
                self.events.post(
                    view(wl.key),
                    "QuotaReserved",
                    f"quota reserved in {where}; waiting for admission check(s) {', '.join(wl.checks)}",
                )
            elif wl.key in preemptors:  # its job starts once its victims' pods are gone: Admitted is said then
                term.announce.add(wl.key)
                self.events.post(
                    view(wl.key),
                    "QuotaReserved",
                    f"quota reserved in {where}; the job starts once the workloads it preempted have stopped",
                )
            else:
                self.events.post(view(wl.key), "Admitted", f"admitted by {where}")
        for wl in started:
            if wl.admission is not None:
                self.metrics.workloads.admitted_workload(wl, at, cohorts_above(sched, wl))
                self.events.post(
                    view(wl.key),
                    "Admitted",
                    f"admitted by ClusterQueue {wl.admission.cluster_queue}: every admission check passed",
                )
        for key, reason, message in said:
            self.events.pending(view(key), reason, message)
            if debug and (waiting := sched.workloads.get(key)) is not None:
                log.debug("%s waits: %s: %s", key, reason, message, extra=_fields(waiting, "Pending", reason=reason))

    def workload_name(self, key: str) -> str:
        """A workload as Events name it: ``namespace/`` and its Workload object's name, the one
        kubectl, the CLI and the visibility API show (the job's key if the job is not known)."""
        view = self.view(key)
        if view is None:
            return key
        return f"{view.namespace}/{object_name(view.integration.ref.kind, view.name, view.uid)}"

    def finished(self, view: JobView | None, wl: Workload | None, at: float) -> None:
        """A job finished: its Event and log line (the controller releases its quota next)."""
        self.events.post(view, "Finished", "the job finished; its quota is released")
        if wl is not None:
            self.metrics.workloads.finished_workload(wl, at)
        if wl is not None and log.isEnabledFor(logging.INFO):
            log.info("finished %s", wl.key, extra=_fields(wl, "Finished"))


def cohorts_above(sched: Scheduler, wl: Workload) -> list[str]:
    """Every Cohort above ``wl``'s ClusterQueue (``kueue_cohort_subtree_admitted_workloads_total``)."""
    cq = sched.snapshot.queues.get(wl.admission.cluster_queue) if wl.admission is not None else None
    out: list[str] = []
    node = cq.parent if cq is not None else None
    while node is not None:
        out.append(node.name)
        node = node.parent
    return out


def _fields(wl: Workload, decision: str, **more: object) -> dict[str, object]:
    """The structured fields of a decision log line (``--log-format json``)."""
    fields: dict[str, object] = {
        "workload": wl.key,
        "namespace": wl.namespace,
        "local_queue": wl.local_queue,
        "cluster_queue": wl.cluster_queue,
        "decision": decision,
    }
    fields.update({k: v for k, v in more.items() if v is not None})
    return fields
