"""One scheduling step of the leader: what changed -> the store -> the core's decisions -> committed.

A step runs whenever something changed (a job event, a configuration NOTIFY, a namespace, the
periodic resync), coalesced over a few milliseconds, and never waits on the API server:

1. look at every job that changed: a new queued job becomes a workload row (idempotent by job
   uid), a finished or deleted one releases its quota and closes its ledger intervals, one whose
   queue label went away while pending leaves queueing; commit that (fenced) and feed the same
   changes to the core;
2. turn admission checks' verdicts into decisions, and ask every capability
   (``admission.controller.capability``: pods-ready deadlines, deleted Workload objects, lost
   nodes, idle reclaim, GPU health, budgets) what it decides or gates;
3. run the core's cycles; commit their net admissions and evictions in one fenced transaction
   that re-checks every quota (``store.workloads.commit_cycle``); undo in memory what the store
   refused;
4. ``settle`` what was committed (the enactor acts on nothing else), ask the enactor to drive
   every touched job to its workload's state, and let each capability record what it owes (the
   ledger's started and used hours).

The core applies its decisions in memory at once (principle 4: assume, then confirm). If any of
a step's transactions fails, nothing of the step is trusted: ``StepFailed`` ends the term, and
the next one is rebuilt from PostgreSQL. A refusal by the store (quota changed underneath) is
not a failure: that one decision is undone and the rest stands.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from admission.controller.capability import Capability, StepContext
from admission.controller.changes import Changes
from admission.controller.enactor import Enactor
from admission.controller.events import EventPoster
from admission.controller.features.checks import Checks
from admission.controller.jobcache import JobCache
from admission.controller.monitoring.metrics import Metrics
from admission.controller.objects.workload_projection import Projection
from admission.controller.report import Reporter
from admission.controller.term import Row, Term, admission_token, now_ms, timestamp
from admission.jobs.base import JobView
from admission.policy import DEFAULT_POLICY, Policy
from admission.store import activity, database, fair_usage, lease
from admission.store import config as config_store
from admission.store import workloads as store
from queues.cycle import provisioning
from queues.cycle.decisions import NO_MATCHING_WORKLOAD
from queues.cycle.scheduler import SETTLE_SECONDS, Admit, Decision, Evict, Scheduler
from queues.model import Workload
from queues.podsets import jobs

log = logging.getLogger(__name__)


class StepFailed(Exception):
    """A step's transaction failed: the term's in-memory state can no longer be trusted."""


@dataclass(slots=True)
class StepOptions:
    step_decisions: int  # decisions committed per step (a backlog is committed and enacted in slices)
    ledger_labels: tuple[str, ...]
    backoff_scale: float  # wall seconds per second of a backoff (admission checks, a victim settling)


class Steps:
    """Runs the leader's steps against the term it is given (see the module docstring)."""

    def __init__(
        self,
        *,
        changes: Changes,
        jobs: JobCache,
        namespaces: dict[str, dict[str, str]],
        sessions: async_sessionmaker[AsyncSession],
        options: StepOptions,
        metrics: Metrics,
        reporter: Reporter,
        events: EventPoster,
        checks: Checks,
        enactor: Enactor,
        policy: Policy = DEFAULT_POLICY,
        capabilities: Sequence[Capability] = (),
        projection: Projection | None = None,
    ) -> None:
        self.changes = changes
        self.policy = policy
        self.jobs = jobs
        self.namespaces = namespaces
        self.sessions = sessions
        self.options = options
        self.metrics = metrics
        self.reporter = reporter
        self.events = events
        self.checks = checks
        self.enactor = enactor
        self.capabilities = tuple(capabilities)  # (``admission.controller.capability``: in this order)
        self.projection = projection
        self.count = 0
        self.requeue_timer: asyncio.TimerHandle | None = None
        self.stored: list[str] = []  # job uids whose workload row the last observation wrote (or finished)
        self.unreadable: set[str] = set()  # job uids told (by an Event) that they cannot be queued, or are held

    async def run(self, term: Term) -> None:
        """One step; ``StepFailed`` if a transaction failed (the term must be rebuilt)."""
        with self.metrics.step_seconds.time():
            try:
                await self._step(term)
            except lease.Fenced:
                raise
            except database.ERRORS as exc:
                raise StepFailed(database.describe_error(exc)) from exc

    async def _step(self, term: Term) -> None:
        self.count += 1
        sched = term.scheduler
        now = sched.now = now_ms()
        sched.settle_seconds = SETTLE_SECONDS * self.options.backoff_scale
        at = timestamp(now)
        dirty, self.changes.jobs = self.changes.jobs, {}
        try:
            decisions = await self._observe(term, dirty, at)
        except BaseException:
            self.changes.jobs = {**dirty, **self.changes.jobs}  # the next term looks at them again
            raise
        decisions.extend(term.owed)
        term.owed = []
        decisions.extend(self._check_verdicts(term))
        step = StepContext(term, now, dirty)
        for capability in self.capabilities:  # (pods not Ready in time, lost objects and nodes, idle GPUs, budgets)
            decisions.extend(capability.decide(step))
        started = time.perf_counter()
        decided = sched.schedule(max_decisions=self.options.step_decisions)
        if decided or sched.pending.where:
            self.metrics.attempt(sum(1 for d in decided if isinstance(d, Admit)), time.perf_counter() - started)
        if len(decided) >= self.options.step_decisions:
            self.changes.wake.set()  # more to decide: the next step goes on while these are enacted
        decisions.extend(decided)
        touched = {row.key for uid in dirty if (row := term.rows.get(uid)) is not None}
        waiting, self.changes.preempting = self.changes.preempting, {}
        said = set(sched.said)  # (waiting workloads whose reason changed: their objects' QuotaReserved)
        committed: set[str] = set()
        owed = any(capability.owes_commit() for capability in self.capabilities)
        if decisions or sched.said or sched.checked or waiting or owed or term.taken:
            committed = await self._commit(step, decisions, at, waiting)
            touched |= committed
        if self.projection is not None:
            # The Workload objects of what the store now holds differently: jobs stored, finished
            # or gone, and workloads decided, said or (no longer) preempting; not every job event
            # (most are status updates that change nothing an object shows).
            keys = committed | said | set(waiting)
            self.projection.mark([*self.stored, *(row.uid for key in keys if (row := term.by_key.get(key)))])
        for key in touched:
            self.enactor.mark_stopping(term, key)  # before any enactor acts on what this step decided
        touched.update(term.stopping)  # their job events say when the pods are gone
        for key in touched:
            self.enactor.request(key)
            row = term.by_key.get(key)
            if row is not None and (row.uid in self.checks.requests or _has_checks(term.held(key))):
                self.checks.request(row.uid)
        await self._save_usage(term)
        for capability in self.capabilities:  # (the ledger's started and used hours...)
            await capability.record(step)
        due = (sched.next_requeue(), sched.next_settled(), *(c.next_wake() for c in self.capabilities))
        wakes = [t for t in due if t is not None]
        self._wake_for_requeue(min(wakes, default=None))

    async def _save_usage(self, term: Term, session: AsyncSession | None = None) -> None:
        """Fair sharing: store the queue histories that moved (``fair_usage``), in ``session`` (the
        step's commit, so an admission and its LocalQueue's history land together) or in its own
        transaction (what finished jobs gave back)."""
        histories = [h for h in (term.scheduler.usage, term.scheduler.queue_usage) if h is not None and h.changed]
        if not histories:
            return
        rows = {k: (dict(e.consumed), e.updated) for h in histories for k in h.changed if (e := h.queues.get(k))}
        if session is not None:
            await fair_usage.save(session, rows, fence=term.fence)
        else:
            async with database.transaction(self.sessions) as own:
                await fair_usage.save(own, rows, fence=term.fence)
        for h in histories:  # (a failed commit ends the term: the next one reads what was stored)
            h.changed.clear()

    def _wake_for_requeue(self, at: float | None) -> None:
        """A step when the next workload waiting out a backoff may queue again, or the next started
        workload's pods are due to be Ready."""
        if self.requeue_timer is not None:
            self.requeue_timer.cancel()
            self.requeue_timer = None
        if at is not None:
            self.requeue_timer = asyncio.get_running_loop().call_later(max(0.0, at - now_ms()), self.changes.wake.set)

    def _check_verdicts(self, term: Term) -> list[Decision]:
        """Admission checks whose ProvisioningRequests changed: what their conditions mean for the
        workloads (``queues.cycle.provisioning.verdict``), as scheduler decisions."""
        sched = term.scheduler
        dirty, self.changes.checks = self.changes.checks, {}
        out: list[Decision] = []
        for uid in dirty:
            row = term.rows.get(uid)
            wl = sched.workloads.get(row.key) if row is not None else None
            if wl is None or wl.admission is None:
                continue
            attempt = wl.retries + 1
            # Every check that applies, passed ones too: a booking can expire before the job
            # starts, and a started job's capacity can be revoked.
            for request in provisioning.requests(sched.config, wl):
                check, name, spec = request.check, request.name, request.spec
                conditions = self.checks.conditions(uid, name)
                if conditions is None or wl.admission is None:
                    continue
                verdict = provisioning.verdict(
                    conditions, attempt=attempt, strategy=spec.retry_strategy, started=wl.started
                )
                if verdict.state == provisioning.READY:
                    sched.check_passed(wl.key, check)
                elif verdict.state == provisioning.PENDING:
                    sched.check_waiting(wl.key, provisioning.waiting_message(name, verdict.message))
                elif verdict.state == provisioning.RETRY:
                    until = sched.now + provisioning.backoff(attempt, spec.retry_strategy) * self.options.backoff_scale
                    if (evict := sched.check_retry(wl.key, verdict.message, until)) is not None:
                        out.append(evict)
                elif (evict := sched.check_rejected(wl.key, verdict.message)) is not None:
                    out.append(evict)
        return out

    async def _observe(self, term: Term, dirty: dict[str, None], at: dt.datetime) -> list[Decision]:
        """Step 1: jobs that changed become store rows and core inputs."""
        sched = term.scheduler
        finishes: dict[str, list[Row]] = {"JobFinished": [], "JobDeleted": []}
        dequeues: list[Row] = []
        upserts: dict[str, tuple[JobView, Workload]] = {}
        resized: list[Decision] = []  # admitted workloads whose running job changed (``Scheduler.job_changed``)
        self.stored = []
        for uid in dirty:
            view = self.jobs.views.get(uid)
            row = term.rows.get(uid)
            if view is None or view.finished:
                self.unreadable.discard(uid)
                self.stored.append(uid)  # (its Workload object finishes or goes)
                if row is not None:
                    finishes["JobDeleted" if view is None else "JobFinished"].append(row)
                continue
            if view.info is None:
                self._unreadable(sched, view)
                continue
            candidate = sched.workload_for(view.info, seq=0, now=sched.now)
            managed = view.info.queue_name is not None or candidate.local_queue is not None
            current = sched.workloads.get(row.key) if row is not None else None
            if row is None:
                other = term.by_key.get(view.key)
                if not managed:
                    self._held(sched, view)
                elif other is None:
                    upserts[uid] = (view, candidate)
                else:
                    log.warning(
                        "%s %s: workload %s already belongs to job %s",
                        view.integration.ref.kind,
                        view.key,
                        view.key,
                        other.uid if other else "?",
                    )
            elif current is not None and current.admission is not None and not view.suspended:
                held = term.held(row.key)
                if held is not None and view.admission is not None and view.admission == admission_token(held):
                    # running as admitted: with the pods it was admitted for? (a Job's parallelism may change)
                    changed = sched.job_changed(row.key, candidate.pod_sets, candidate.shape)
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
                        store.Record(uid, view.info, wl.local_queue, wl.priority, at)
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
        for row in (*finishes["JobFinished"], *finishes["JobDeleted"], *dequeues):
            self.metrics.clock.stop(row.key, at.timestamp())
            self.metrics.workloads.forget(row.key)
            self.events.forget(row.uid)
            sched.finish(row.key)
            term.settle(row.key)
            term.forget(row.uid)
            if row.uid in self.checks.requests:
                self.checks.request(row.uid)  # its ProvisioningRequests and PodTemplates go too
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
                if (evict := sched.deactivate(row.key, message)) is not None:
                    out.append(evict)
            elif row is not None and sched.activate(row.key):
                self.events.post(self.jobs.view(row.key), "Reactivated", f"The workload was reactivated by {r.actor}")
        term.taken.extend(requests)
        return out

    def _held(self, sched: Scheduler, view: JobView) -> None:
        """A job or pod without a queue that the policy holds (``admission.policy``): say why, once."""
        if view.uid in self.unreadable or not view.suspended:
            return
        what = f"{view.integration.ref.kind} {view.key}"
        message = self.policy.hold(sched.config, view.namespace, view.info, what)
        if message is not None:
            self.unreadable.add(view.uid)
            self.events.post(view, "QueueNameMissing", message, type="Warning")

    def _unreadable(self, sched: Scheduler, view: JobView) -> None:
        """A job meant for a queue that Turnstile cannot read (the webhook refuses such jobs; this
        one came while it was away): it cannot be queued, so say why, once, on the job."""
        meant = view.queue_label is not None or f"{view.namespace}/{jobs.DEFAULT_QUEUE}" in sched.config.local_queues
        if not meant or view.uid in self.unreadable:
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

    async def _commit(
        self,
        step: StepContext,
        decisions: Sequence[Decision],
        at: dt.datetime,
        waiting: dict[str, list[str] | None] | None = None,
    ) -> set[str]:
        """Step 3: the net effect of the decisions in one fenced transaction; undo what it refused,
        settle the rest. ``waiting``: admitted workloads that wait for preempted ones to stop (or no
        longer do), said with them. Returns the workloads it touched."""
        term = step.term
        sched = term.scheduler
        first: dict[str, Decision] = {}
        last_evict: dict[str, Evict] = {}
        last_at: dict[str, int] = {}  # where each workload's last decision is: admissions keep that order
        for i, d in enumerate(decisions):
            first.setdefault(d.workload.key, d)
            last_at[d.workload.key] = i
            if isinstance(d, Evict):
                last_evict[d.workload.key] = d
        evictions: list[store.Evict] = []
        admissions: list[store.Admit] = []
        admitted_now: dict[int, Workload] = {}
        for key, d in first.items():
            row = term.by_key.get(key)
            wl = sched.workloads.get(key)
            if row is None or wl is None:
                continue
            was_admitted = isinstance(d, Evict)
            if was_admitted and key in last_evict:
                e = last_evict[key]
                changed = e.workload.pod_sets if e.reason == NO_MATCHING_WORKLOAD else None
                evictions.append(store.Evict(row.id, e.reason, e.detail, e.by, changed, e.workload.past_run))
            if wl.admission is not None and (not was_admitted or key in last_evict):
                admissions.append(store.Admit(row.id, wl.admission, wl.checks))
                admitted_now[row.id] = wl
        # Admissions in the order they were decided (a preempted workload re-admitted elsewhere in
        # the same step comes after its preemptor), so the event log tells the story in order.
        keys_of = {row_id: wl.key for row_id, wl in admitted_now.items()}
        admissions.sort(key=lambda a: last_at[keys_of[a.workload_id]])
        said = [
            (key, row.id, wl)
            for key in sched.said
            if (wl := sched.workloads.get(key)) is not None
            and (wl.admission is None or wl.checks)  # waiting for quota, or for its admission checks
            and (row := term.by_key.get(key)) is not None
        ]
        reasons = [(row_id, wl.reason, wl.message, wl.cluster_queue) for _, row_id, wl in said]
        sched.said.clear()
        checked, sched.checked = sched.checked, {}
        taken, term.taken = term.taken, []  # (a commit that fails ends the term: the next one reads them again)
        check_states = [
            store.CheckState(
                r.id,
                w.checks,
                w.retries,
                timestamp(w.requeue_at) if w.requeue_at is not None else None,
                w.active,
                w.reason,
                w.message,
                started=started,
            )
            for key, started in checked.items()
            if (w := sched.workloads.get(key)) is not None and (r := term.by_key.get(key)) is not None
        ]
        # Nothing here is trusted until the transaction commits: if it fails, the caller ends the
        # term (StepFailed) and the next one starts from what PostgreSQL holds.
        async with database.transaction(self.sessions) as session:
            result = await store.commit_cycle(
                session,
                admissions=admissions,
                evictions=evictions,
                now=at,
                fence=term.fence,
                ledger_labels=self.options.ledger_labels,
            )
            await store.set_reasons(session, reasons)
            await store.set_checks(session, check_states, at)
            await activity.take(session, taken)
            for capability in self.capabilities:  # (when pods were first Ready...)
                await capability.write_in_commit(session, step)
            preempting = self._preempting(term, waiting or {})
            await store.set_admitted_reasons(session, [(row_id, r, m) for row_id, _, r, m in preempting])
            await self._save_usage(term, session)
        for capability in self.capabilities:
            capability.committed(step)
        pending = [(key, wl.reason, wl.message) for key, _, wl in said]
        began = [w for key, now_started in checked.items() if now_started and (w := sched.workloads.get(key))]
        self.reporter.committed(term, last_evict, result, admitted_now, pending, at.timestamp(), began)
        for _, key, reason, message in preempting:
            if reason == PREEMPTING:
                self.events.pending(self.jobs.view(key), reason, message)
            else:  # its victims stopped: the job starts now
                self.events.post(self.jobs.view(key), "Admitted", f"{message}: the preempted workloads have stopped")
        for row_id in result.refused:
            wl = admitted_now[row_id]
            log.warning("%s: the store refused its admission (quota changed underneath); it waits again", wl.key)
            sched.forget_admission(wl)
            self.changes.wake.set()
        touched = set(first) | set(checked)
        for key in touched:
            term.settle(key)  # committed: now the enactor may act on it
        return touched

    def _preempting(self, term: Term, waiting: dict[str, list[str] | None]) -> list[tuple[int, str, str, str]]:
        """(row id, key, reason, message) of admitted workloads that wait for preempted ones to stop
        (reason ``Preempting``), or no longer do (back to ``Admitted``)."""
        out = []
        for key, victims in waiting.items():
            row, held = term.by_key.get(key), term.held(key)
            if row is None or held is None or held.admission is None:
                continue
            if victims:
                n = len(victims)
                shown = ", ".join(victims[:5]) + (f" and {n - 5} more" if n > 5 else "")
                message = f"quota reserved; waiting for {n} preempted workload{'s' if n > 1 else ''} to stop: {shown}"
                out.append((row.id, key, PREEMPTING, message))
            else:
                out.append((row.id, key, "Admitted", f"admitted by ClusterQueue {held.admission.cluster_queue}"))
        return out


PREEMPTING = "Preempting"  # reason of an admitted workload whose job waits for its victims' pods to stop


def _has_checks(wl: Workload | None) -> bool:
    return wl is not None and bool(wl.checks)
