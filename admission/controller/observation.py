"""The first part of a leader's step: what changed in the cluster becomes store rows and core inputs.

Every job that changed is looked at: a new queued job becomes a workload row (idempotent by job
uid), a finished or deleted one releases its quota and closes its ledger intervals, one whose
queue label went away while pending leaves queueing, a running one whose pods changed (a Job's
parallelism) is resized; that is committed (fenced) and the same changes are fed to the core.
A configuration NOTIFY reloads the queues and the pending ``turnstile stop|resume`` requests;
namespaces relabelled reach the core. A job that cannot be queued, or that the policy holds, is
told why once, by an Event.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from admission.controller.events import EventPoster
from admission.controller.monitoring.metrics import Metrics
from admission.controller.report import Reporter
from admission.controller.term import Row, Term, admission_token
from admission.controller.watch.changes import Changes
from admission.controller.watch.jobcache import JobCache
from admission.jobs.base import JobView
from admission.policy import Policy
from admission.store import activity, database, lease
from admission.store import config as config_store
from admission.store import workloads as store
from queues.cycle.scheduler import Decision, Scheduler
from queues.model import Workload
from queues.podsets import jobs

log = logging.getLogger(__name__)

WORKLOAD_NAME_TAKEN = "WorkloadNameTaken"  # the Warning event on a job whose workload key another kind's job holds


class Observation:
    """Step 1 of every step (``admission.controller.step``), with what it remembers between steps."""

    def __init__(
        self,
        *,
        changes: Changes,
        jobs: JobCache,
        namespaces: dict[str, dict[str, str]],
        sessions: async_sessionmaker[AsyncSession],
        metrics: Metrics,
        reporter: Reporter,
        events: EventPoster,
        policy: Policy,
    ) -> None:
        self.changes = changes
        self.jobs = jobs
        self.namespaces = namespaces
        self.sessions = sessions
        self.metrics = metrics
        self.reporter = reporter
        self.events = events
        self.policy = policy
        self.stored: list[str] = []  # job uids whose workload row the last observation wrote (or finished)
        self.forgotten: list[str] = []  # job uids whose workloads it finished, deleted or dequeued
        self.unreadable: set[str] = set()  # job uids told (by an Event) that they cannot be queued, or are held

    async def observe(self, term: Term, dirty: dict[str, None], at: dt.datetime) -> list[Decision]:
        """Step 1: the jobs in ``dirty`` (uids) that changed become store rows and core inputs;
        a configuration or namespace change, and stop/resume requests, are read and applied too."""
        sched = term.scheduler
        finishes: dict[str, list[Row]] = {"JobFinished": [], "JobDeleted": []}
        dequeues: list[Row] = []
        upserts: dict[str, tuple[JobView, Workload]] = {}
        resized: list[Decision] = []  # admitted workloads whose running job changed (``Scheduler.job_changed``)
        self.stored, self.forgotten = [], []
        claimed: set[str] = set()  # keys new workloads take in this step
        for uid in dirty:
            view = self.jobs.views.get(uid)
            row = term.rows.get(uid)
            if row is not None and view is not None:
                self.jobs.hold(uid)  # (the store row says whose the key is, whichever job was listed first)
            if view is None or view.finished:
                self.unreadable.discard(uid)
                self.stored.append(uid)  # (its Workload object finishes or goes)
                if row is not None:
                    finishes["JobDeleted" if view is None else "JobFinished"].append(row)
                continue
            if view.info is None:
                self._unreadable(sched, view)
                continue
            candidate = sched.intake.workload_for(view.info, seq=0, now=sched.now)
            # (a queued parent's part, such as an AppWrapper's component, is its parent's workload's)
            managed = (view.info.queue_name is not None or candidate.local_queue is not None) and not view.part
            current = sched.workloads.get(row.key) if row is not None else None
            if row is None:
                other = term.by_key.get(view.key)
                holder = self.jobs.views.get(other.uid) if other is not None and other.uid != uid else None
                if not managed:
                    self._held(sched, view)
                elif (holder is None or holder.finished) and view.key not in claimed:
                    self.jobs.hold(uid)  # (a job gone, or finished, or not queued, held the key)
                    claimed.add(view.key)
                    upserts[uid] = (view, candidate)
                else:
                    self._taken(view, holder)
            elif current is not None and current.admission is not None and not view.suspended:
                held = term.held(row.key)
                if held is not None and view.admission is not None and view.admission == admission_token(held):
                    # running as admitted: with the pods it was admitted for? (a Job's parallelism may change)
                    elastic = view.info.elastic
                    changed = sched.retries.job_changed(row.key, candidate.pod_sets, candidate.shape, elastic=elastic)
                    if changed is not None:
                        resized.append(changed)
            elif current is not None and current.admission is None and view.suspended and view.admission is None:
                if not managed:
                    dequeues.append(row)
                elif (candidate.local_queue, candidate.priority, candidate.shape) != (
                    current.local_queue,
                    current.priority,
                    current.shape,
                ):
                    upserts[uid] = (view, candidate)
        config = None
        requests: list[activity.Request] = []
        stored: dict[str, tuple[int, str]] = {}
        # Most job events (status updates) change nothing in the store: no round trip for them.
        reload = self.changes.config
        if upserts or dequeues or reload or any(finishes.values()):
            async with database.transaction(self.sessions) as session:
                await lease.check(session, term.fence)
                for reason, rows in finishes.items():
                    if rows:
                        await store.finish(session, [r.id for r in rows], now=at, reason=reason)
                if dequeues:
                    await store.dequeue(session, [r.id for r in dequeues])
                stored = await store.upsert(
                    session,
                    [
                        store.Record(uid, view.info, wl.local_queue, wl.priority, at, wl.pod_sets)
                        for uid, (view, wl) in upserts.items()
                        if view.info is not None
                    ],
                )
                if reload:
                    config = await config_store.load_config(session)
                    requests = await activity.pending(session)
            if reload:
                self.changes.config = False  # only once the new configuration is read for sure
        self.stored.extend(r.uid for r in dequeues)
        self.stored.extend(uid for uid in upserts if uid in stored)
        decisions: list[Decision] = resized
        for row in finishes["JobFinished"]:
            self.reporter.finished(self.jobs.views.get(row.uid), sched.workloads.get(row.key), at.timestamp())
            for uid in [u for u, key in self.jobs.waiting.items() if key == row.key]:
                self.changes.job(uid)  # (a job of another kind waited for its name: it may take it now)
        for row in (*finishes["JobFinished"], *finishes["JobDeleted"], *dequeues):
            self.metrics.clock.stop(row.key, at.timestamp())
            self.metrics.workloads.forget(row.key)
            self.events.forget(row.uid)
            sched.finish(row.key)
            term.settle(row.key)
            term.forget(row.uid)
            self.forgotten.append(row.uid)  # (its admission checks' requests go too)
            term.blocked.pop(row.key, None)  # (if it was a victim, it stays stopping until its pods are gone)
        for uid, (view, wl) in upserts.items():
            if uid not in stored:
                log.warning("%s: job %s has a finished workload row; not queued again", view.key, uid)
                continue
            row_id, _ = stored[uid]
            old = sched.workloads.get(view.key)
            if old is not None and term.rows.get(uid) is not None:
                wl.created, wl.queue_ts = old.created, old.queue_ts  # a refresh keeps its place in line
                sched.finish(view.key)
            wl.seq = row_id
            term.remember(Row(row_id, uid, view.key))
            sched.submit(wl)
        if config is not None:
            decisions.extend(sched.set_config(config))
        if self.changes.namespaces:
            self.changes.namespaces = False
            decisions.extend(sched.set_namespaces(dict(self.namespaces)))
        decisions.extend(self._activity(term, requests))
        return decisions

    def _activity(self, term: Term, requests: Sequence[activity.Request]) -> list[Decision]:
        """``turnstile stop|resume workload`` (``admission.store.activity``): each request applied
        to the core; the requests are taken by this step's commit, with what they did."""
        sched = term.scheduler
        out: list[Decision] = []
        for r in requests:
            row = term.rows.get(r.job_uid)
            if row is not None and not r.active:
                message = f"spec.active set to false by {r.actor}"
                if (evict := sched.retries.deactivate(row.key, message)) is not None:
                    out.append(evict)
            elif row is not None and sched.retries.activate(row.key):
                self.events.post(self.jobs.view(row.key), "Reactivated", f"The workload was reactivated by {r.actor}")
        term.taken.extend(requests)
        return out

    def _held(self, sched: Scheduler, view: JobView) -> None:
        """A job or pod without a queue that the policy holds (``admission.policy``): say why, once."""
        if view.uid in self.unreadable or not view.suspended or view.part:
            return
        what = f"{view.integration.ref.kind} {view.key}"
        message = self.policy.hold(sched.config, view.namespace, view.info, what)
        if message is not None:
            self.unreadable.add(view.uid)
            self.events.post(view, "QueueNameMissing", message, type="Warning")

    def _taken(self, view: JobView, holder: JobView | None) -> None:
        """A job whose workload key a live job of another kind holds (``JobCache``): never queued,
        and told why, once; it is looked at again when that job is gone."""
        if view.uid in self.unreadable:
            return
        self.unreadable.add(view.uid)
        other = f"{holder.integration.ref.kind} {holder.key}" if holder is not None else "another job"
        message = (
            f"Turnstile cannot queue {view.integration.ref.kind} {view.key}: its workload would be named {view.key}, "
            f"which {other} already holds (a workload is named by its job's namespace and name); it is "
            "queued once that job is gone, or rename one of them"
        )
        log.warning("%s %s: %s", view.integration.ref.kind, view.key, message)
        self.events.post(view, WORKLOAD_NAME_TAKEN, message, type="Warning")

    def _unreadable(self, sched: Scheduler, view: JobView) -> None:
        """A job meant for a queue that Turnstile cannot read (the webhook refuses such jobs; this
        one came while it was away): it cannot be queued, so say why, once, on the job."""
        meant = view.queue_label is not None or f"{view.namespace}/{jobs.DEFAULT_QUEUE}" in sched.config.local_queues
        if not meant or view.part or view.uid in self.unreadable:
            return
        self.unreadable.add(view.uid)
        problems = "; ".join(view.problems[:5]) + (
            f" (and {len(view.problems) - 5} more)" if len(view.problems) > 5 else ""
        )
        log.warning("%s %s cannot be queued: %s", view.integration.ref.kind, view.key, problems)
        self.events.post(
            view,
            "InvalidJob",
            f"Turnstile cannot queue this job: {problems}; fix it and create it again",
            type="Warning",
        )
