"""One scheduling step of the leader: what changed -> the store -> the core's decisions -> committed.

A step runs whenever something changed (a job event, a configuration NOTIFY, a namespace, the
periodic resync), coalesced over a few milliseconds, and never waits on the API server:

1. look at the jobs that changed (``admission.controller.observation``; at most ``STEP_JOBS``, in
   the order they changed: 100,000 jobs created at once are taken in slices, so no step keeps the
   event loop, and with it the lease's renewal, for seconds): a new queued job
   becomes a workload row (idempotent by job uid), a finished or deleted one releases its quota
   and closes its ledger intervals, one whose queue label went away while pending leaves
   queueing; commit that (fenced) and feed the same changes to the core;
2. ask every capability (``admission.controller.capability``: admission checks' verdicts,
   pods-ready deadlines, deleted Workload objects, lost nodes, idle reclaim, GPU health, budgets)
   what it decides or gates;
3. run the core's cycles; commit their net admissions and evictions in one fenced transaction
   that re-checks every quota (``store.workloads.commit_cycle``); undo in memory what the store
   refused. What capabilities stamped of what they saw (a run started, pods first Ready) goes
   with that commit, or waits for one a moment (``capability.STAMPS_WAIT``) before making its own;
4. ``settle`` what was committed (the enactor acts on nothing else), ask the enactor to drive
   every touched job to its workload's state, tell every capability what the step stored and
   touched (Workload objects, admission checks' requests follow them), and let each record what
   it owes (the ledger's started and used hours).

The core applies its decisions in memory at once (principle 4: assume, then confirm). If any of
a step's transactions fails, nothing of the step is trusted: ``StepFailed`` ends the term, and
the next one is rebuilt from PostgreSQL. A refusal by the store (quota changed underneath) is
not a failure: that one decision is undone and the rest stands.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from admission.controller.capability import Capability, StepContext, Stepped
from admission.controller.enactor import Enactor
from admission.controller.events import EventPoster
from admission.controller.monitoring.metrics import Metrics
from admission.controller.observation import Observation
from admission.controller.report import Reporter
from admission.controller.term import Term, now_ms, timestamp
from admission.controller.watch.changes import Changes
from admission.controller.watch.jobcache import JobCache
from admission.policy import DEFAULT_POLICY, Policy
from admission.store import activity, database, fair_usage, lease
from admission.store import workloads as store
from queues.cycle.decisions import NO_MATCHING_WORKLOAD, Resize, Told
from queues.cycle.scheduler import SETTLE_SECONDS, Admit, Decision, Evict
from queues.model import Workload

log = logging.getLogger(__name__)

STEP_JOBS = 2000  # changed jobs looked at per step; the rest go on in the next step, at once


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
        enactor: Enactor,
        policy: Policy = DEFAULT_POLICY,
        capabilities: Sequence[Capability] = (),
    ) -> None:
        self.changes = changes
        self.jobs = jobs
        self.sessions = sessions
        self.options = options
        self.metrics = metrics
        self.reporter = reporter
        self.events = events
        self.enactor = enactor
        self.capabilities = tuple(capabilities)  # (``admission.controller.capability``: in this order)
        self.count = 0
        self.requeue_timer: asyncio.TimerHandle | None = None
        self.observation = Observation(
            changes=changes,
            jobs=jobs,
            namespaces=namespaces,
            sessions=sessions,
            metrics=metrics,
            reporter=reporter,
            events=events,
            policy=policy,
        )

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
        sched.reservations.settle_seconds = SETTLE_SECONDS * self.options.backoff_scale
        at = timestamp(now)
        dirty = self._take_jobs()
        try:
            decisions = await self.observation.observe(term, dirty, at)
        except BaseException:
            self.changes.jobs = {**dirty, **self.changes.jobs}  # the next term looks at them again
            raise
        decisions.extend(term.owed)
        term.owed = []
        step = StepContext(term, now, dirty)
        for capability in self.capabilities:  # (checks' verdicts, pods not Ready in time, lost objects and nodes...)
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
        told = sched.take_told()  # (reasons and admission checks' states, stored with the decisions)
        said = set(told.said)  # (waiting workloads whose reason changed: their objects' QuotaReserved)
        committed: set[str] = set()
        stamped: set[str] = set()
        owed = min((t for c in self.capabilities if (t := c.commit_due()) is not None), default=None)
        if decisions or told or waiting or term.taken or (owed is not None and owed <= step.now):
            committed, stamped = await self._commit(step, decisions, told, at, waiting)
            touched |= committed
        for key in touched:
            self.enactor.mark_stopping(term, key)  # before any enactor acts on what this step decided
        touched.update(term.stopping)  # their job events say when the pods are gone
        for key in touched:
            self.enactor.request(key)
        obs = self.observation
        outcome = Stepped(obs.stored, obs.forgotten, committed | said | set(waiting) | stamped, touched)
        for capability in self.capabilities:  # (Workload objects, admission checks' requests)
            capability.stepped(step, outcome)
        await self._save_usage(term)
        for capability in self.capabilities:  # (the ledger's started and used hours...)
            await capability.record(step)
        due = (
            sched.intake.next_requeue(),
            sched.next_settled(),
            *(c.next_wake() for c in self.capabilities),
            *(c.commit_due() for c in self.capabilities),  # (stamps that waited for a commit)
        )
        wakes = [t for t in due if t is not None]
        self._wake_for_requeue(min(wakes, default=None))

    def _take_jobs(self) -> dict[str, None]:
        """The changed jobs this step looks at: every one, or the first ``STEP_JOBS`` (the next step
        is woken for the rest)."""
        changed = self.changes.jobs
        if len(changed) <= STEP_JOBS:
            self.changes.jobs = {}
            return changed
        taken = dict.fromkeys(itertools.islice(changed, STEP_JOBS))
        for uid in taken:
            del changed[uid]
        self.changes.wake.set()
        return taken

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

    async def _commit(
        self,
        step: StepContext,
        decisions: Sequence[Decision],
        told: Told,
        at: dt.datetime,
        waiting: dict[str, list[str] | None] | None = None,
    ) -> tuple[set[str], set[str]]:
        """Step 3: the net effect of the decisions, and what the core ``told`` of waiting workloads
        and admission checks, in one fenced transaction; undo what it refused, settle the rest.
        ``waiting``: admitted workloads that wait for preempted ones to stop (or no longer do),
        said with them. Returns the workloads it touched, and those whose stamps capabilities stored."""
        term = step.term
        sched = term.scheduler
        first: dict[str, Decision] = {}
        last_evict: dict[str, Evict] = {}
        last_at: dict[str, int] = {}  # where each workload's last decision is: admissions keep that order
        resized: dict[str, Resize] = {}  # elastic jobs resized in place: the last resize of each
        for i, d in enumerate(decisions):
            first.setdefault(d.workload.key, d)
            last_at[d.workload.key] = i
            if isinstance(d, Evict):
                last_evict[d.workload.key] = d
            elif isinstance(d, Resize):
                resized[d.workload.key] = d
        evictions: list[store.Evict] = []
        admissions: list[store.Admit] = []
        resizes: list[store.Resize] = []
        resized_ids: dict[int, str] = {}
        admitted_now: dict[int, Workload] = {}
        for key, d in first.items():
            row = term.by_key.get(key)
            wl = sched.workloads.get(key)
            if row is None or wl is None:
                continue
            was_admitted = isinstance(d, Evict | Resize)
            if was_admitted and key in last_evict:
                e = last_evict[key]
                # (its pod sets stored as its job now has them: changed, or resized before it was evicted)
                changed = e.workload.pod_sets if e.reason == NO_MATCHING_WORKLOAD or key in resized else None
                evictions.append(store.Evict(row.id, e.reason, e.detail, e.by, changed, e.workload.past_run))
            if wl.admission is not None and (not was_admitted or key in last_evict):
                admissions.append(store.Admit(row.id, wl.admission, wl.checks))
                admitted_now[row.id] = wl
            elif wl.admission is not None and key in resized:  # (admitted throughout: resized in place)
                resizes.append(store.Resize(row.id, wl.admission, wl.pod_sets))
                resized_ids[row.id] = key
        # Admissions in the order they were decided (a preempted workload re-admitted elsewhere in
        # the same step comes after its preemptor), so the event log tells the story in order.
        keys_of = {row_id: wl.key for row_id, wl in admitted_now.items()}
        admissions.sort(key=lambda a: last_at[keys_of[a.workload_id]])
        said = [
            (key, row.id, wl)
            for key in told.said
            if (wl := sched.workloads.get(key)) is not None
            and (wl.admission is None or wl.checks)  # waiting for quota, or for its admission checks
            and (row := term.by_key.get(key)) is not None
        ]
        reasons = [(row_id, wl.reason, wl.message, wl.cluster_queue) for _, row_id, wl in said]
        checked = told.checked
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
            for capability in self.capabilities:  # (the ledger's started hours of runs seen before the decisions)
                await capability.write_before_decisions(session, step)
            result = await store.commit_cycle(
                session,
                admissions=admissions,
                evictions=evictions,
                resizes=resizes,
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
        stamped = {key for capability in self.capabilities for key in capability.committed(step)}
        pending = [(key, wl.reason, wl.message) for key, _, wl in said]
        pending += [  # (an elastic job's growth that waits: its running pods go on; said on the job)
            (key, wl.reason, wl.message)
            for key in told.said
            if key in sched.elastic.growing and (wl := sched.workloads.get(key)) is not None
        ]
        began = [w for key, now_started in checked.items() if now_started and (w := sched.workloads.get(key))]
        self.reporter.committed(term, last_evict, result, admitted_now, pending, at.timestamp(), began)
        for _, key, reason, message in preempting:
            if reason == PREEMPTING:
                self.events.pending(self.jobs.view(key), reason, message)
            else:  # its victims stopped: the job starts now
                self.events.post(self.jobs.view(key), "Admitted", f"{message}: the preempted workloads have stopped")
        for row_id in result.refused:
            if (wl := admitted_now.get(row_id)) is not None:
                log.warning("%s: the store refused its admission (quota changed underneath); it waits again", wl.key)
                sched.forget_admission(wl)
            elif (resized_key := resized_ids.get(row_id)) is not None:
                log.warning("%s: the store refused its resize (quota changed underneath); tried again", resized_key)
                sched.elastic.undo(resized[resized_key])
            self.changes.wake.set()
        touched = set(first) | set(checked)
        for key in touched:
            term.settle(key)  # committed: now the enactor may act on it
        return touched, stamped

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
