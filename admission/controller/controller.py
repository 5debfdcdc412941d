"""``turnstile controller``: keep PostgreSQL and the cluster in agreement, and enact the core's decisions.

Every replica runs the informers (jobs of every integrated kind, namespaces). The replica
holding the scheduler lease (``admission.store.lease``) also runs a *term*
(``admission.controller.term``): a scheduling core rebuilt from PostgreSQL, driven by steps.

One step (``_step``), whenever something changed (a job event, a configuration NOTIFY, a
namespace, the periodic resync), coalesced over a few milliseconds and never waiting on the
API server:

1. look at every job that changed: a new queued job becomes a workload row (idempotent by
   job uid), a finished or deleted one releases its quota and closes its ledger intervals,
   one whose queue label went away while pending leaves queueing;
2. commit that (fenced), and feed the same changes to the core;
3. run the core's cycles; commit their net admissions and evictions in one fenced
   transaction that re-checks every quota (``store.workloads.commit_cycle``); undo in memory
   what the store refused;
4. ask the enactor to drive every touched job to its workload's state.

The enactor (``admission.controller.enactor``) is level-triggered: it compares a job with its
workload and patches the difference, so after a crash the next term, starting from the store,
converges the same way: a job running without an admission is suspended, an admission whose
job is gone is released, an admission whose job is still suspended is enacted again.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from admission.controller.checks import Checks
from admission.controller.enactor import Enactor
from admission.controller.events import EventPoster
from admission.controller.jobcache import JobCache
from admission.controller.metrics import Metrics
from admission.controller.report import Reporter
from admission.controller.term import Row, Term, now_ms, timestamp
from admission.jobs import INTEGRATIONS
from admission.jobs.base import Integration, JobView
from admission.kube import client as kube_client
from admission.kube.client import Kube, Obj
from admission.kube.informer import Informer
from admission.store import config as config_store
from admission.store import database, lease, notify
from admission.store import workloads as store
from queues import provisioning
from queues.model import Config, Workload
from queues.scheduler import Admit, Decision, Evict

log = logging.getLogger(__name__)

DB_ERRORS = (OperationalError, DBAPIError, OSError)


@dataclass(frozen=True, slots=True)
class Options:
    identity: str  # this replica, as named in the lease
    lease_ttl: float = 15.0  # seconds a leader may go without renewing before another takes over
    workers: int = 16  # jobs patched in parallel
    debounce: float = 0.002  # seconds events are coalesced into one step
    resync: float = 60.0  # seconds between full reconciliations (a safety net; events do the work)
    # decisions committed per step: a backlog (a quota raise on 1,000 queues admits 50,000) is
    # committed and enacted in slices, so the first jobs start at once and the work overlaps
    step_decisions: int = 1000
    ledger_labels: tuple[str, ...] = store.LEDGER_LABELS  # job labels recorded on the usage ledger
    # wall seconds per second of an admission check's backoff (engine cluster runs scenario time scaled)
    backoff_scale: float = 1.0


class Controller:
    def __init__(
        self,
        *,
        kube: Kube,
        sessions: async_sessionmaker[AsyncSession],
        database_url: str,
        options: Options,
        integrations: Sequence[Integration] = INTEGRATIONS,
    ) -> None:
        self.kube = kube
        self.sessions = sessions
        self.database_url = database_url
        self.options = options
        self.jobs = JobCache()  # job uid -> view, workload key -> job uid; kept by the informers and our writes
        self.views = self.jobs.views
        self.namespaces: dict[str, dict[str, str]] = {}
        self.informers: list[Informer] = []
        for integration in integrations:
            informer = Informer(kube, integration.ref, _nothing)
            informer.handler = functools.partial(self._on_job, integration, informer)
            self.informers.append(informer)
        self.informers.append(Informer(kube, kube_client.NAMESPACES, self._on_namespace))
        self.dirty: dict[str, None] = {}  # job uids changed since the last step, in event order
        self.config_changed = False
        self.namespaces_changed = False
        self.wake = asyncio.Event()
        self.enactor = Enactor(kube, jobs=self.jobs, current_term=lambda: self.term, workers=options.workers)
        self.checks = Checks(
            kube,
            views=self.views,
            current_term=lambda: self.term,
            run_infos=lambda term, wl: self.enactor.run_infos(term, wl, wl.admission) if wl.admission else [],
            changed=self._on_check,
        )
        self.check_dirty: dict[str, None] = {}  # job uids whose ProvisioningRequests changed
        self.requeue_timer: asyncio.TimerHandle | None = None
        self.config: Config | None = None  # the latest queue configuration, on every replica (webhook)
        self.term: Term | None = None
        self.term_task: asyncio.Task[None] | None = None
        self.database_ok = False
        self.steps = 0
        self.metrics = Metrics(self)
        self.events = EventPoster(kube, instance=options.identity)
        self.reporter = Reporter(self.metrics, self.events, self.enactor.view)

    # ----- what the cluster says -----------------------------------------------------------------

    def _on_job(self, integration: Integration, informer: Informer, kind: str, obj: Obj) -> None:
        if self.jobs.observe(integration, kind, obj, listed_since=informer.listing_since):
            self.dirty[str((obj.get("metadata") or {}).get("uid"))] = None
            self.wake.set()

    def _on_check(self, uid: str) -> None:
        self.check_dirty[uid] = None
        self.wake.set()

    def _on_namespace(self, kind: str, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        name = str(meta.get("name"))
        labels = dict(meta.get("labels") or {})
        if kind == "DELETED":
            changed = self.namespaces.pop(name, None) is not None
        else:
            changed = self.namespaces.get(name) != labels
            self.namespaces[name] = labels
        if changed:
            self.namespaces_changed = True
            self.wake.set()

    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self.informers)

    def ready(self) -> bool:
        """Readiness: the database answered lately, the configuration is loaded, every informer has listed."""
        return self.database_ok and self.config is not None and self.synced()

    # ----- running -------------------------------------------------------------------------------

    async def run(self) -> None:
        """Informers, the configuration listener, leader election and the enactor, until cancelled."""
        tasks = [asyncio.create_task(i.run(), name=f"informer-{i.ref.plural}") for i in self.informers]
        tasks.append(asyncio.create_task(self._listen(), name="listen"))
        tasks.append(asyncio.create_task(self._resync(), name="resync"))
        # Not part of readiness: only ClusterQueues with admission checks need the CRD.
        tasks.append(asyncio.create_task(self.checks.informer.run(), name="informer-provisioningrequests"))
        self.enactor.start()
        self.checks.start()
        self.events.start()
        try:
            await self._elect()
        finally:
            await self._end_term("stopping")
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.enactor.stop()
            await self.checks.stop()
            await self.events.stop()
            with contextlib.suppress(*DB_ERRORS):
                await self._release_lease()

    async def _listen(self) -> None:
        """Configuration NOTIFY -> a fresh ``config`` (for the webhook, on every replica) and a step.

        Reconnects after a failure; the periodic resync covers notifications lost meanwhile.
        """
        while True:
            try:
                async with notify.listen(self.database_url) as queue:
                    while True:
                        await self._load_config()  # whatever happened before or while not listening
                        self.config_changed = True
                        self.wake.set()
                        await queue.get()
                        while not queue.empty():  # a burst of edits: one reload
                            queue.get_nowait()
            except DB_ERRORS as exc:
                log.warning("configuration listener: %s; reconnecting", database.describe_error(exc))
                await asyncio.sleep(1.0)

    async def _load_config(self) -> None:
        async with database.transaction(self.sessions) as session:
            self.config = await config_store.load_config(session)

    async def _resync(self) -> None:
        while True:
            await asyncio.sleep(self.options.resync)
            with contextlib.suppress(*DB_ERRORS):
                await self._load_config()
            self.config_changed = True
            self.dirty.update(dict.fromkeys(self.views))
            if self.term is not None:
                self.dirty.update(dict.fromkeys(self.term.rows))
            self.wake.set()

    async def _elect(self) -> None:
        ttl = self.options.lease_ttl
        while True:
            started = time.monotonic()
            fence: lease.Fence | None = None
            try:
                async with database.transaction(self.sessions) as session:
                    fence = await lease.acquire(session, holder=self.options.identity, ttl=dt.timedelta(seconds=ttl))
                self.database_ok = True
            except DB_ERRORS as exc:
                self.database_ok = False
                log.warning("leader election: database unreachable (%s)", database.describe_error(exc))
            if fence is not None:
                if self.term is None or self.term.fence != fence:
                    await self._end_term("a new term")
                    await self._begin_term(fence)
                if self.term is not None:
                    self.term.valid_until = started + ttl * 0.8
            elif self.term is not None and not self.term.valid():
                await self._end_term("the lease was lost")
            await asyncio.sleep(ttl / 3)

    async def _release_lease(self) -> None:
        """On a clean stop, let a standby take over at once instead of after the lease's TTL."""
        async with database.transaction(self.sessions) as session:
            await session.execute(
                text("UPDATE leader_lease SET expires_at = clock_timestamp() WHERE name = :n AND holder = :h"),
                {"n": lease.SCHEDULER, "h": self.options.identity},
            )

    async def _begin_term(self, fence: lease.Fence) -> None:
        while not self.synced():  # compare rows with jobs only once every job has been listed
            await asyncio.sleep(0.05)
        async with database.transaction(self.sessions) as session:
            snapshot = await store.load_snapshot(session)
        term = Term.start(fence, snapshot, dict(self.namespaces))
        term.valid_until = time.monotonic() + self.options.lease_ttl * 0.8
        self.term = term
        for wl in term.scheduler.workloads.values():
            self.metrics.clock.start(wl, time.time())  # held quota counts from this term on
        self.dirty.update(dict.fromkeys(self.views))
        self.dirty.update(dict.fromkeys(term.rows))
        self.check_dirty.update(dict.fromkeys(self.checks.requests))
        for uid, row in term.rows.items():  # requests to make, or to clean up, after a restart
            if uid in self.checks.requests or _has_checks(term.scheduler.workloads.get(row.key)):
                self.checks.request(uid)
        self.namespaces_changed = False
        log.info("leading as %s (term %d): %d workloads loaded", fence.holder, fence.token, len(term.rows))
        self.term_task = asyncio.create_task(self._lead(term), name="lead")
        self.wake.set()

    async def _end_term(self, why: str) -> None:
        term, task = self.term, self.term_task
        self.term, self.term_task = None, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if term is not None:
            self.metrics.clock.stop_all(time.time())
            level = logging.INFO if why == "stopping" else logging.WARNING
            log.log(level, "no longer leading (term %d): %s", term.fence.token, why)

    async def _lead(self, term: Term) -> None:
        backoff = 0.1
        while self.term is term:
            await self.wake.wait()
            self.wake.clear()
            await asyncio.sleep(self.options.debounce)
            try:
                await self._step(term)
                backoff = 0.1
            except lease.Fenced as exc:
                log.error("%s", exc)
                self.term = None
                return
            except DB_ERRORS as exc:
                self.database_ok = False
                log.warning("scheduling step failed: %s; retrying in %.1fs", database.describe_error(exc), backoff)
                await asyncio.sleep(backoff)
                backoff = min(5.0, backoff * 2)
                self.wake.set()

    # ----- one step ------------------------------------------------------------------------------

    async def _step(self, term: Term) -> None:
        with self.metrics.step_seconds.time():
            await self._step_timed(term)

    async def _step_timed(self, term: Term) -> None:
        self.steps += 1
        sched = term.scheduler
        now = sched.now = now_ms()
        at = timestamp(now)
        dirty, self.dirty = self.dirty, {}
        try:
            decisions = await self._observe(term, dirty, at)
        except BaseException:
            self.dirty = {**dirty, **self.dirty}  # look again next step
            raise
        decisions.extend(term.owed)
        term.owed = []
        decisions.extend(self._check_verdicts(term))
        started = time.perf_counter()
        decided = sched.schedule(max_decisions=self.options.step_decisions)
        if decided or sched.pending.where:
            self.metrics.attempt(sum(1 for d in decided if isinstance(d, Admit)), time.perf_counter() - started)
        if len(decided) >= self.options.step_decisions:
            self.wake.set()  # more to decide: the next step goes on while these are enacted
        decisions.extend(decided)
        touched = {row.key for uid in dirty if (row := term.rows.get(uid)) is not None}
        if decisions or sched.said or sched.checked:
            touched |= set(sched.checked) | await self._commit(term, decisions, at)
        for key in touched:
            self.enactor.mark_stopping(term, key)  # before any enactor acts on what this step decided
        touched.update(term.stopping)  # their job events say when the pods are gone
        for key in touched:
            self.enactor.request(key)
            row = term.by_key.get(key)
            if row is not None and (row.uid in self.checks.requests or _has_checks(sched.workloads.get(key))):
                self.checks.request(row.uid)
        self._wake_for_requeue(sched.next_requeue())

    def _wake_for_requeue(self, at: float | None) -> None:
        """A step when the next workload waiting out an admission check's backoff may queue again."""
        if self.requeue_timer is not None:
            self.requeue_timer.cancel()
            self.requeue_timer = None
        if at is not None:
            self.requeue_timer = asyncio.get_running_loop().call_later(max(0.0, at - now_ms()), self.wake.set)

    def _check_verdicts(self, term: Term) -> list[Decision]:
        """Admission checks whose ProvisioningRequests changed: what their conditions mean for the
        workloads (``queues.provisioning.verdict``), as scheduler decisions."""
        sched = term.scheduler
        dirty, self.check_dirty = self.check_dirty, {}
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
        """Steps 1-2: jobs that changed become store rows and core inputs."""
        sched = term.scheduler
        finishes: dict[str, list[Row]] = {"JobFinished": [], "JobDeleted": []}
        dequeues: list[Row] = []
        upserts: dict[str, tuple[JobView, Workload]] = {}
        for uid in dirty:
            view = self.views.get(uid)
            row = term.rows.get(uid)
            if view is None or view.finished:
                if row is not None:
                    finishes["JobDeleted" if view is None else "JobFinished"].append(row)
                continue
            if view.info is None:
                continue  # malformed: the webhook reports it; nothing to queue
            candidate = sched.workload_for(view.info, seq=0, now=sched.now)
            managed = view.info.queue_name is not None or candidate.local_queue is not None
            current = sched.workloads.get(row.key) if row is not None else None
            if row is None:
                other = term.by_key.get(view.key)
                if managed and other is None:
                    upserts[uid] = (view, candidate)
                elif managed:
                    log.warning(
                        "%s %s: workload %s already belongs to job %s",
                        view.integration.ref.kind,
                        view.key,
                        view.key,
                        other.uid if other else "?",
                    )
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
        stored: dict[str, tuple[int, str]] = {}
        # Most job events (status updates) change nothing in the store: no round trip for them.
        if upserts or dequeues or self.config_changed or any(finishes.values()):
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
                if self.config_changed:
                    self.config_changed = False
                    config = await config_store.load_config(session)
            self.database_ok = True
        decisions: list[Decision] = []
        for row in finishes["JobFinished"]:
            self.reporter.finished(self.views.get(row.uid), sched.workloads.get(row.key))
        for row in (*finishes["JobFinished"], *finishes["JobDeleted"], *dequeues):
            self.metrics.clock.stop(row.key, at.timestamp())
            self.events.forget(row.uid)
            sched.finish(row.key)
            term.forget(row.uid)
            if row.uid in self.checks.requests:
                self.checks.request(row.uid)  # its ProvisioningRequests and PodTemplates go too
            self.enactor.stopped(term, row.key)
            term.blocked.pop(row.key, None)
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
        if self.namespaces_changed:
            self.namespaces_changed = False
            decisions.extend(sched.set_namespaces(dict(self.namespaces)))
        return decisions

    async def _commit(self, term: Term, decisions: Sequence[Decision], at: dt.datetime) -> set[str]:
        """Step 3: the net effect of the decisions, in one fenced transaction; undo what it refused."""
        sched = term.scheduler
        first: dict[str, Decision] = {}
        last_evict: dict[str, Evict] = {}
        for d in decisions:
            first.setdefault(d.workload.key, d)
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
                evictions.append(store.Evict(row.id, e.reason, e.detail, e.by))
            if wl.admission is not None and (not was_admitted or key in last_evict):
                admissions.append(store.Admit(row.id, wl.admission, wl.checks))
                admitted_now[row.id] = wl
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
        try:
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
        except BaseException:
            for key, now_started in checked.items():  # not stored: the next step stores them
                sched.checked[key] = sched.checked.get(key, False) or now_started
            raise
        pending = [(key, wl.reason, wl.message) for key, _, wl in said]
        began = [w for key, now_started in checked.items() if now_started and (w := sched.workloads.get(key))]
        self.reporter.committed(term, last_evict, result, admitted_now, pending, at.timestamp(), began)
        for row_id in result.refused:
            wl = admitted_now[row_id]
            log.warning("%s: the store refused its admission (quota changed underneath); it waits again", wl.key)
            sched.forget_admission(wl)
            self.wake.set()
        return set(first)


def _nothing(_kind: str, _obj: Obj) -> None:
    """A placeholder handler, replaced once the informer exists."""


def _has_checks(wl: Workload | None) -> bool:
    return wl is not None and bool(wl.checks)
