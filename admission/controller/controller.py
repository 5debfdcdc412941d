"""``turnstile controller``: keep PostgreSQL and the cluster in agreement, and enact the core's
decisions.

Every replica runs the informers (``admission.controller.watch.cluster_watch``: jobs of every
integrated kind, the pods the webhook holds, namespaces, PriorityClasses; and Kueue's queue
objects where the cluster serves them), the configuration listener
(``admission.controller.config_listener``, for the webhook it serves) and leader election
(``admission.controller.leadership``). The leader also reconciles the queue objects into PostgreSQL
(``admission.controller.objects.declared``) and writes their status
(``admission.controller.objects.queuestatus``).
The replica holding the scheduler lease also runs a *term* (``admission.controller.term``): a
scheduling core rebuilt from PostgreSQL, driven by steps (``admission.controller.step``) whenever
something changed.

The enactor (``admission.controller.enactor``) is level-triggered: it compares a job with its
workload *as committed* and patches the difference, so after a crash the next term, starting from
the store, converges the same way: a job running without an admission is suspended, an admission
whose job is gone is released, an admission whose job is still suspended is enacted again. A step
whose transaction fails ends the term the same way: its in-memory decisions are dropped and the
next term starts from the store.

``shutdown`` is the clean stop (SIGTERM): readiness false, no new work, in-flight patches
finished, the term ended and the lease released (fenced) so a standby leads at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from admission.controller.config_listener import ConfigListener
from admission.controller.enactor import POLL_SECONDS, Enactor
from admission.controller.events import EventPoster, events_of
from admission.controller.leadership import Leadership
from admission.controller.monitoring.metrics import Metrics
from admission.controller.parts import Features, Options
from admission.controller.readiness import DatabaseHealth, Readiness
from admission.controller.report import Reporter
from admission.controller.step import StepFailed, StepOptions, Steps
from admission.controller.term import Term
from admission.controller.watch.changes import Changes
from admission.controller.watch.cluster_watch import ClusterWatch
from admission.controller.watch.jobcache import JobCache
from admission.jobs import INTEGRATIONS
from admission.jobs.base import Integration
from admission.kube.client import Kube
from admission.policy import DEFAULT_POLICY, Policy
from admission.store import database, lease
from queues.model import Config

log = logging.getLogger(__name__)


DRAIN_SECONDS = 5.0  # at most this long for in-flight patches when the term ends on a clean stop


class Controller:
    """One replica's kernel (module docstring); ``features`` builds the optional features for it."""

    def __init__(
        self,
        *,
        kube: Kube,
        sessions: async_sessionmaker[AsyncSession],
        database_url: str,
        options: Options,
        features: Callable[[Controller], Features],
        integrations: Sequence[Integration] = INTEGRATIONS,
        policy: Policy = DEFAULT_POLICY,
    ) -> None:
        self.kube = kube
        self.sessions = sessions
        self.database_url = database_url
        self.options = options
        self.jobs = JobCache()  # job uid -> view, workload key -> job uid; kept by the informers and our writes
        self.views = self.jobs.views
        self.changes = Changes()
        self.term: Term | None = None
        self.term_task: asyncio.Task[None] | None = None
        self.elect_task: asyncio.Task[None] | None = None
        self.step_failures = 0  # in a row: the pause before the next term grows with them
        self.stepping = False  # a step is being taken (``busy``)
        self.terms_begun = 0  # terms this replica began (a failed step begins a new one from the store)
        # the jobs, namespaces, held pods, PriorityClasses, training runtimes and CRDs every replica
        # watches (``admission.controller.watch.cluster_watch``)
        self.watch = ClusterWatch(
            kube,
            self.jobs,
            self.changes,
            integrations,
            current_scheduler=lambda: self.term.scheduler if self.term is not None else None,
            optional=lambda: self.features.optional_informers(),
            device_mappings=policy.device_mappings,
            transformations=policy.transformations,
        )
        self.namespaces = self.watch.namespaces
        self.integrations = self.watch.integrations
        self.informers = self.watch.informers
        self.pod_groups, self.priorities, self.runtimes = (
            self.watch.pod_groups,
            self.watch.priorities,
            self.watch.runtimes,
        )
        self.namespace_watchers = self.watch.namespace_watchers  # a namespace was added, relabelled or deleted
        # what is queued or held (the webhook answers by it, the steps tell held objects why)
        self.policy = dataclasses.replace(policy, namespace_labels=self.namespaces.get)
        self.events = EventPoster(kube, instance=options.identity)
        self.database = DatabaseHealth()
        # the latest queue configuration, on every replica (the webhook answers by it)
        self.listener = ConfigListener(
            sessions,
            database_url,
            self.database,
            self.changes,
            wake_election=lambda: self.leadership.wake(),
            configured=self._configured,
        )
        self.readiness = Readiness()
        self.readiness.add(
            "config", lambda: None if self.config else "the queue configuration is not loaded", gates=True
        )
        self.readiness.add("database", self.database.probe, gates=False)
        self.readiness.add("informers", self.watch.probe, gates=False, detail=self.watch.integrations_detail)
        self.metrics: Metrics = Metrics(self)
        self.features: Features = features(self)
        self.capabilities = self.features.capabilities
        self.inventory = self.features.placement.inventory
        self.enactor = Enactor(
            kube,
            jobs=self.jobs,
            current_term=lambda: self.term,
            workers=options.workers,
            on_waiting=self._on_waiting,
            inventory=self.inventory,
            poll=POLL_SECONDS * options.backoff_scale,
            ungated=lambda *ungated: self.metrics.workloads.gate_removed(*ungated),
        )
        self.reporter = Reporter(self.metrics, self.events, self.enactor.view)
        self.steps = Steps(
            changes=self.changes,
            jobs=self.jobs,
            namespaces=self.namespaces,
            sessions=sessions,
            options=StepOptions(options.step_decisions, options.ledger_labels, options.backoff_scale),
            metrics=self.metrics,
            reporter=self.reporter,
            events=self.events,
            enactor=self.enactor,
            policy=self.policy,
            capabilities=self.capabilities,
        )
        self.leadership: Leadership = Leadership(
            sessions,
            identity=options.identity,
            ttl=options.lease_ttl,
            database=self.database,
            can_lead=self.synced,
            begin=self._begin_term,
            end=self._end_term,
            leading=lambda: self.term.fence if self.term is not None else None,
            confirm=self._confirm,
        )

    # ----- what the enactor and the configuration say ------------------------------------------

    def _on_waiting(self, key: str, victims: list[str] | None) -> None:
        self.changes.preempting[key] = victims
        self.changes.wake.set()

    def _configured(self, config: Config | None) -> None:
        for capability in self.capabilities:  # (placement watches nodes once a flavor names a Topology)
            capability.configured(config)

    async def job_events(self, key: str) -> list[dict[str, Any]]:
        """The Kubernetes Events on workload ``key``'s job (the dashboard's workload page)."""
        return await events_of(self.kube, self.jobs.view(key), key)

    def synced(self) -> bool:
        return self.watch.synced()

    def busy(self) -> bool:
        """A step is due or running, or the enactor has work in hand (engine cluster waits for
        this to end before a scenario's next input, as engine core's cycles run until nothing
        changes before time moves on). Timers (backoffs, retries) are not work in hand."""
        queue = self.enactor.queue
        return self.changes.wake.is_set() or self.stepping or bool(queue.waiting or queue.running)

    def ready(self) -> bool:
        """The whole replica is up: every readiness check passes, reported ones too."""
        return self.readiness.all_ok()

    @property
    def database_ok(self) -> bool:
        return self.database.ok

    # ----- running -------------------------------------------------------------------------------

    async def run(self) -> None:
        """Informers, the configuration listener, leader election and the enactor, until cancelled
        or until ``shutdown`` has stepped down."""
        tasks = [asyncio.create_task(i.run(), name=f"informer-{i.ref.plural}") for i in self.informers]
        tasks.append(asyncio.create_task(self.listener.listen(), name="listen"))
        tasks.append(asyncio.create_task(self._resync(), name="resync"))
        tasks.append(asyncio.create_task(self.watch.crds.run(), name="informer-customresourcedefinitions"))
        self.enactor.start()
        for capability in self.capabilities:  # (admission checks' and placement's workers)
            capability.start()
        for capability in self.capabilities:
            tasks.extend(asyncio.create_task(loop(), name=name) for name, loop in capability.loops())
        self.events.start()
        self.elect_task = asyncio.create_task(self.leadership.run(), name="elect")
        try:
            with contextlib.suppress(asyncio.CancelledError):
                await self.elect_task
            if not self.readiness.stopping:
                raise asyncio.CancelledError  # cancelled from outside, not stepped down
        finally:
            await self._end_term("stopping")
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.enactor.stop()
            for capability in self.capabilities:  # (placement's informers and ungater, Prometheus' client...)
                await capability.stop()
            await self.events.stop()
            await self.leadership.release()

    async def shutdown(self) -> None:
        """A clean stop: not ready, no new term, in-flight patches finished, the lease released."""
        if self.readiness.stopping:
            return
        self.readiness.stopping = True
        log.info("stopping: readiness is false; leaving leadership")
        if self.elect_task is not None:
            self.elect_task.cancel()
            await asyncio.gather(self.elect_task, return_exceptions=True)
        await self._end_term("stopping", drain=DRAIN_SECONDS)
        await self.leadership.release()

    @property
    def config(self) -> Config | None:
        """The latest queue configuration (None until it is first loaded)."""
        return self.listener.config

    @property
    def config_watchers(self) -> list[Callable[[], None]]:
        """Called whenever the configuration or this replica's leadership changes (the webhooks' scope)."""
        return self.listener.watchers

    def leading(self) -> bool:
        return self.term is not None

    async def _resync(self) -> None:
        while True:
            await asyncio.sleep(self.options.resync)
            with contextlib.suppress(*database.ERRORS):
                await self.listener.load()
            self.changes.config = True
            self.changes.jobs.update(dict.fromkeys(self.views))
            if self.term is not None:
                self.changes.jobs.update(dict.fromkeys(self.term.rows))
            self.changes.wake.set()

    # ----- terms ---------------------------------------------------------------------------------

    def _confirm(self, at: float) -> None:
        if self.term is not None:
            self.term.confirm(at + self.options.lease_ttl * 0.8)

    async def _begin_term(self, fence: lease.Fence, confirmed_at: float) -> bool:
        """A term from the store; False if the store could not be read (the next round tries again)."""
        try:
            term = await Term.from_store(
                self.sessions,
                fence,
                self.policy,
                self.namespaces,
                scale=self.options.backoff_scale,
                inventory=self.features.placement.for_term,
            )
        except database.ERRORS as exc:
            self.database.failed("loading the scheduler's state", database.describe_error(exc))
            return False
        self.priorities.apply(term.scheduler)
        self.watch.device_catalog.apply(term.scheduler)
        term.valid_until = confirmed_at + self.options.lease_ttl * 0.8
        self.term = term
        self.terms_begun += 1
        for wl in term.scheduler.workloads.values():
            self.metrics.clock.start(wl, time.time())  # held quota counts from this term on
        self.changes.jobs.update(dict.fromkeys(self.views))
        self.changes.jobs.update(dict.fromkeys(term.rows))
        self.changes.namespaces = False
        self.changes.config = True  # (its first step reads the stop/resume requests no term has applied)
        for capability in self.capabilities:  # (admission checks' requests, Workload objects, gated pods...)
            capability.term_began(term)
        log.info("leading as %s (term %d): %d workloads loaded", fence.holder, fence.token, len(term.rows))
        self.listener.tell()
        self.term_task = asyncio.create_task(self._lead(term), name="lead")
        self.changes.wake.set()
        return True

    async def _end_term(self, why: str, *, drain: float = 0.0) -> None:
        """Drop the term; with ``drain``, wait (that long at most) for patches already under way."""
        term, task = self.term, self.term_task
        self.term, self.term_task = None, None  # the enactor acts on nothing more
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if drain and term is not None:
            deadline = time.monotonic() + drain
            while self.enactor.queue.running and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
        if term is not None:
            self.metrics.clock.stop_all(time.time())
            level = logging.INFO if why == "stopping" else logging.WARNING
            log.log(level, "no longer leading (term %d): %s", term.fence.token, why)
            self.listener.tell()

    async def _lead(self, term: Term) -> None:
        wake = self.changes.wake
        while self.term is term:
            await wake.wait()
            wake.clear()
            self.stepping = True
            try:
                await asyncio.sleep(self.options.debounce)
                await self.steps.run(term)  # (most steps need no round trip: they say nothing of the database)
            except lease.Fenced as exc:
                log.error("%s", exc)
                await self._end_term("fenced: another replica leads")
                return
            except StepFailed as exc:
                # The step's decisions live only in memory now: rebuild the term from the store,
                # after a backoff while the failure repeats (a poisoned commit must not spin). A
                # connection a cancelled call left unusable is no outage: it is dropped, and the
                # term is rebuilt at once on another.
                if database.connection_fault(exc):
                    pause = 0.2
                else:
                    self.database.failed("committing a scheduling step", str(exc))
                    self.step_failures += 1
                    pause = min(5.0, 0.2 * 2 ** (self.step_failures - 1))
                why = f"a scheduling step failed ({exc}); starting again from the store in {pause:.1f}s"
                await self._end_term(why)
                await asyncio.sleep(pause)
                self.leadership.wake()
                return
            finally:
                self.stepping = False
            self.step_failures = 0
