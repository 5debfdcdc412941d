"""``turnstile controller``: keep PostgreSQL and the cluster in agreement, and enact the core's
decisions.

Every replica runs the informers (jobs of every integrated kind, the pods the webhook holds,
namespaces, PriorityClasses, and Kueue's queue objects where the cluster serves them), the
configuration listener (for the webhook it serves) and leader election
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
import functools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from admission.controller import pod_set_infos
from admission.controller.capability import Capability
from admission.controller.changes import Changes
from admission.controller.enactor import POLL_SECONDS, Enactor
from admission.controller.events import EventPoster, events_of
from admission.controller.features.budgets import BudgetKeeper
from admission.controller.features.checks import Checks
from admission.controller.features.gpu_health import GpuHealth
from admission.controller.features.metering import Meter, Metering
from admission.controller.features.placement import Placement
from admission.controller.features.pod_waits import INTERVAL as POD_WAITS_INTERVAL
from admission.controller.features.pod_waits import PodWaits
from admission.controller.features.podsready import PodsReady, PodsReadyWatch, scaled
from admission.controller.features.reclaim import IdleReclaim, Reclaimer
from admission.controller.features.utilisation import Prometheus
from admission.controller.jobcache import JobCache
from admission.controller.leadership import Leadership
from admission.controller.monitoring.metrics import Metrics
from admission.controller.objects.declared import Declared
from admission.controller.objects.queuestatus import StatusWriter
from admission.controller.objects.workload_projection import Projection
from admission.controller.podgroups import PodGroups
from admission.controller.priorities import PriorityClasses
from admission.controller.readiness import DatabaseHealth, Readiness
from admission.controller.report import Reporter
from admission.controller.runtimes import TrainingRuntimes
from admission.controller.step import StepFailed, StepOptions, Steps
from admission.controller.term import Term
from admission.jobs import INTEGRATIONS
from admission.jobs.base import Integration
from admission.kube import client as kube_client
from admission.kube.client import Kube, Obj
from admission.kube.informer import Informer
from admission.policy import DEFAULT_POLICY, Policy
from admission.store import config as config_store
from admission.store import database, fair_usage, lease, notify
from admission.store import workloads as store
from queues.model import Config, Workload
from queues.podsets import pods

log = logging.getLogger(__name__)

PODS = kube_client.ResourceRef("v1", "Pod", "pods")
MANAGED_PODS = f"{pods.MANAGED_LABEL}=true"  # the pods the webhook gated (it labels each)

LISTEN_ERRORS: tuple[type[BaseException], ...] = (*database.ERRORS, notify.ListenerLost)
DRAIN_SECONDS = 5.0  # at most this long for in-flight patches when the term ends on a clean stop


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
    # wall seconds per second of the policy's durations: backoffs, a victim's settling, fair sharing's
    # half-lives (engine cluster runs scenario time scaled)
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
        policy: Policy = DEFAULT_POLICY,
    ) -> None:
        self.kube = kube
        self.sessions = sessions
        self.database_url = database_url
        self.options = options
        self.jobs = JobCache()  # job uid -> view, workload key -> job uid; kept by the informers and our writes
        self.views = self.jobs.views
        self.namespaces: dict[str, dict[str, str]] = {}
        # what is queued or held (the webhook answers by it, the steps tell held objects why)
        self.policy = dataclasses.replace(policy, namespace_labels=self.namespaces.get)
        self.changes = Changes()
        self.integrations = tuple(integrations)
        self.informers: list[Informer] = []
        for integration in self.integrations:
            # A kind from a CRD may be absent (most clusters run only some operators): then it is
            # reported once and never holds anything back; the CRD informer wakes it when installed.
            informer = Informer(kube, integration.ref, _nothing, optional=not integration.built_in)
            informer.handler = functools.partial(self._on_job, integration, informer)
            self.informers.append(informer)
        self.informers.append(Informer(kube, kube_client.NAMESPACES, self._on_namespace))
        # plain Pods the webhook holds (``admission.controller.podgroups``) and Kubernetes'
        # PriorityClasses (a job's priority when it names no WorkloadPriorityClass)
        self.pod_groups = PodGroups(self.jobs, self.changes.job)
        self.informers.append(
            Informer(kube, PODS, lambda kind, obj: self.pod_groups.observe(kind, obj), label_selector=MANAGED_PODS)
        )
        self.priorities = PriorityClasses(kube, lambda: self.term.scheduler if self.term is not None else None)
        self.informers.append(self.priorities.informer)
        # Kubeflow Trainer's runtimes, where a TrainJob's pod sets come from
        self.runtimes = TrainingRuntimes(kube, self._reread)
        self.jobs.runtimes = self.runtimes.lookup
        self.informers.extend(self.runtimes.informers)
        self.crds = Informer(kube, kube_client.CRDS, self._on_crd, optional=True)
        # placement by topology: Nodes and Pods (watched once a flavor names a Topology), the ungater
        self.placement = Placement(
            kube,
            self.changes,
            current_term=lambda: self.term,
            pods_always=bool(policy.prometheus_url),
            ungated=lambda *ungated: self.metrics.workloads.gate_removed(*ungated),
        )
        self.inventory = self.placement.inventory
        # the ledger's started and used GPU-hours: jobs seen running, DCGM read through Prometheus
        self.meter = Meter(self.jobs, self.inventory.pods_of)
        self.inventory.seen = self.meter.pod_seen
        # idle-GPU reclaim: DCGM's series through Prometheus, joined to workloads by their pods
        self.events = EventPoster(kube, instance=options.identity)
        # GPUs reporting a fatal Xid (read with the utilisation): their nodes' work requeued, the nodes tainted
        self.gpu_health = GpuHealth(
            kube, mode=policy.gpu_health, events=self.events, inventory=self.inventory, wake=self.changes.wake.set
        )
        self.reclaimer = Reclaimer(
            prometheus=Prometheus(policy.prometheus_url, timeout=policy.prometheus_timeout)
            if policy.prometheus_url
            else None,
            pods=self.inventory,
            jobs=self.jobs,
            current_term=lambda: self.term,
            wake=self.changes.wake.set,
            interval=policy.reclaim_interval,
            scale=options.backoff_scale,
            meter=self.meter,
            health=self.gpu_health,
        )
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
        self.checks = Checks(
            kube,
            views=self.views,
            current_term=lambda: self.term,
            run_infos=lambda term, wl: pod_set_infos.run_infos(term, wl, wl.admission) if wl.admission else [],
            changed=self._on_check,
            runtimes=self.runtimes.lookup,
        )
        self.config: Config | None = None  # the latest queue configuration, on every replica (webhook)
        # called whenever the configuration or this replica's leadership changes (the webhooks' scope)
        self.config_watchers: list[Callable[[], None]] = []
        self.namespace_watchers: list[Callable[[], None]] = []  # a namespace was added, relabelled or deleted
        self.term: Term | None = None
        self.term_task: asyncio.Task[None] | None = None
        self.elect_task: asyncio.Task[None] | None = None
        self.step_failures = 0  # in a row: the pause before the next term grows with them
        self.terms_begun = 0  # terms this replica began (a failed step begins a new one from the store)
        self.database = DatabaseHealth()
        self.readiness = Readiness()
        self.readiness.add(
            "config", lambda: None if self.config else "the queue configuration is not loaded", gates=True
        )
        self.readiness.add("database", self.database.probe, gates=False)
        # queues declared as Kubernetes objects, where Kueue's CRDs are served (the leader reconciles)
        self.declared = Declared(kube, sessions, leading=self.leading, database_health=self.database)
        self.queue_status = StatusWriter(kube, self.declared, lambda: self.term)
        self.readiness.add("informers", self._informers_probe, gates=False, detail=self._integrations_detail)
        self.readiness.add("nodes", self.inventory.probe, gates=False)
        self.readiness.add("gpu-utilization", self.reclaimer.probe, gates=False)
        self.metrics: Metrics = Metrics(self)
        # why an admitted job's pods wait (the kube-scheduler's words): describe, an Event, waitForPodsReady
        self.pod_waits = PodWaits(
            kube,
            sessions,
            jobs=self.jobs,
            current_term=lambda: self.term,
            events=self.events,
            interval=POD_WAITS_INTERVAL * options.backoff_scale,
            grace=POD_WAITS_INTERVAL * options.backoff_scale,
        )
        self.pods_ready = PodsReadyWatch(scaled(self.policy.pods_ready, options.backoff_scale))
        self.pods_ready.why = self.pod_waits.why
        # GPU-hour budgets (``admission.controller.features.budgets``): measured from the ledger, held by
        # the core's gate
        self.budgets = BudgetKeeper(
            sessions,
            current_term=lambda: self.term,
            wake=self.changes.wake.set,
            registry=self.metrics.registry,
            interval=policy.reclaim_interval,
            events=self.events,
            card_fractions=policy.card_fractions,
        )
        self.reporter = Reporter(self.metrics, self.events, self.enactor.view)
        # one workloads.kueue.x-k8s.io object per queued job, projected from the store by the leader
        self.projection = Projection(
            kube,
            sessions,
            self.jobs,
            lambda: self.term,
            wake_step=self.changes.wake.set,
            events=self.events,
            created=self.metrics.workloads.object_created,
            pods_ready=self.policy.pods_ready.enable,
        )
        # the features behind the capability protocol (``admission.controller.capability``), in the
        # order the step asks them: pods not Ready in time, Workload objects deleted, nodes lost or
        # cordoned, idle or failed GPUs, then the budgets' gate (the order the core's evictions had)
        self.capabilities: list[Capability] = [
            PodsReady(self.pods_ready, jobs=self.jobs, metrics=self.metrics.workloads),
            self.projection,
            self.placement,
            IdleReclaim(self.reclaimer, events=self.events, counted=self.metrics.gpu_idle),
            self.budgets,
            Metering(self.meter, sessions),
            self.pod_waits,
            self.declared,
            self.queue_status,
        ]
        self.steps = Steps(
            changes=self.changes,
            jobs=self.jobs,
            namespaces=self.namespaces,
            sessions=sessions,
            options=StepOptions(options.step_decisions, options.ledger_labels, options.backoff_scale),
            metrics=self.metrics,
            reporter=self.reporter,
            events=self.events,
            checks=self.checks,
            enactor=self.enactor,
            policy=self.policy,
            capabilities=self.capabilities,
            projection=self.projection,
        )
        self.leadership = Leadership(
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

    # ----- what the cluster says -----------------------------------------------------------------

    def _on_job(self, integration: Integration, informer: Informer, kind: str, obj: Obj) -> None:
        self.runtimes.job(integration, kind, obj)
        if self.jobs.observe(integration, kind, obj, listed_since=informer.listing_since):
            self.changes.job(str((obj.get("metadata") or {}).get("uid")))

    def _reread(self, trainjob: Obj) -> None:
        """A TrainJob's runtime came or changed: its pod sets are read again."""
        uid = str((trainjob.get("metadata") or {}).get("uid"))
        view = self.jobs.views.get(uid)
        if view is not None:
            self.jobs.put(uid, view.integration.view(trainjob, self.jobs.shapes, self.runtimes.lookup))
            self.changes.job(uid)

    def _on_waiting(self, key: str, victims: list[str] | None) -> None:
        self.changes.preempting[key] = victims
        self.changes.wake.set()

    def _on_check(self, uid: str) -> None:
        self.changes.checks[uid] = None
        self.changes.wake.set()

    def _on_crd(self, kind: str, obj: Obj) -> None:
        """A CRD came, changed or went: the informers of its group look again now (a kind whose
        CRD was just installed is queued from then on, without waiting for the periodic look)."""
        group = str((obj.get("spec") or {}).get("group") or "")
        others = (self.checks.informer, self.projection.informer, *self.declared.informers.values())
        for informer in (*self.informers, *others):
            if informer.optional and informer.ref.api_version.rpartition("/")[0] == group:
                informer.recheck()

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
            self.changes.namespaces = True
            self.changes.wake.set()
            for watcher in self.namespace_watchers:
                watcher()

    async def job_events(self, key: str) -> list[dict[str, Any]]:
        """The Kubernetes Events on workload ``key``'s job (the dashboard's workload page)."""
        return await events_of(self.kube, self.jobs.view(key), key)

    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self.informers)

    def _informers_probe(self) -> str | None:
        waiting = [i.ref.plural for i in self.informers if not i.synced.is_set()]
        return f"not yet listed: {', '.join(waiting)}" if waiting else None

    def _integrations_detail(self) -> str:
        served = [i.ref.kind for i in self.informers[: len(self.integrations)] if not i.absent]
        absent = [i.ref.kind for i in self.informers[: len(self.integrations)] if i.absent]
        text = f"queueing {', '.join(served) or 'nothing'}"
        return text + (f"; not served by this cluster (install their CRDs): {', '.join(absent)}" if absent else "")

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
        tasks.append(asyncio.create_task(self._listen(), name="listen"))
        tasks.append(asyncio.create_task(self._resync(), name="resync"))
        # Not part of readiness: only ClusterQueues with admission checks need the CRD.
        tasks.append(asyncio.create_task(self.checks.informer.run(), name="informer-provisioningrequests"))
        tasks.append(asyncio.create_task(self.crds.run(), name="informer-customresourcedefinitions"))
        for capability in self.capabilities:
            tasks.extend(asyncio.create_task(loop(), name=name) for name, loop in capability.loops())
        self.enactor.start()
        self.placement.start()
        self.checks.start()
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
            await self.checks.stop()
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

    async def _listen(self) -> None:
        """Configuration NOTIFY -> a fresh ``config`` (for the webhook, on every replica) and a step;
        lease NOTIFY -> an election round now. A lost connection is noticed (``ListenerLost``) and
        re-made; whatever changed meanwhile is loaded on reconnecting."""
        backoff = 0.5
        while True:
            try:
                names = (config_store.NOTIFY_CHANNEL, notify.LEASE_CHANNEL)
                # (its pings tell the database's health every second, leading or not)
                async with notify.listen(self.database_url, names, answered=self.database.succeeded) as ls:
                    await self._load_config()  # whatever happened before or while not listening
                    self.leadership.wake()
                    backoff = 0.5
                    while True:
                        self.changes.config = True
                        self.changes.wake.set()
                        while True:
                            channels = {(await ls.get())[0]} | {c for c, _ in ls.pending()}
                            if notify.LEASE_CHANNEL in channels:
                                self.leadership.wake()
                            if config_store.NOTIFY_CHANNEL in channels:
                                break
                        await self._load_config()
            except LISTEN_ERRORS as exc:
                self.database.failed("listening for configuration changes", database.describe_error(exc))
            except Exception:  # a bug must not silence configuration changes for good
                log.exception("configuration listener failed; starting it again")
            await asyncio.sleep(backoff)
            backoff = min(5.0, backoff * 2)

    async def _load_config(self) -> None:
        async with database.transaction(self.sessions) as session:
            self.config = await config_store.load_config(session)
        self.database.succeeded()
        self._tell_watchers()

    def _tell_watchers(self) -> None:
        self.placement.configured(self.config)
        for watcher in self.config_watchers:
            try:
                watcher()
            except Exception:  # a watcher's bug must not stop configuration loading
                log.exception("configuration watcher failed")

    def leading(self) -> bool:
        return self.term is not None

    async def _resync(self) -> None:
        while True:
            await asyncio.sleep(self.options.resync)
            with contextlib.suppress(*database.ERRORS):
                await self._load_config()
            self.changes.config = True
            self.changes.jobs.update(dict.fromkeys(self.views))
            if self.term is not None:
                self.changes.jobs.update(dict.fromkeys(self.term.rows))
            self.changes.wake.set()

    # ----- terms ---------------------------------------------------------------------------------

    def _confirm(self, at: float) -> None:
        if self.term is not None:
            self.term.valid_until = at + self.options.lease_ttl * 0.8

    async def _begin_term(self, fence: lease.Fence, confirmed_at: float) -> bool:
        """A term from the store; False if the store could not be read (the next round tries again)."""
        try:
            async with database.transaction(self.sessions) as session:
                snapshot = await store.load_snapshot(session)
                fair = self.policy.fair_sharing
                keeps = self.policy.admission_fair_sharing or (fair is not None and fair.usage_half_life)
                history = await fair_usage.load(session) if keeps else {}
                await fair_usage.put_setting(session, self.policy.fair_sharing, fence=fence)  # (for describe)
        except database.ERRORS as exc:
            self.database.failed("loading the scheduler's state", database.describe_error(exc))
            return False
        scale = self.options.backoff_scale  # fair sharing's half-lives in wall seconds, as backoffs
        fair, afs = self.policy.fair_sharing, self.policy.admission_fair_sharing
        if fair is not None and scale != 1.0:
            fair = dataclasses.replace(fair, usage_half_life=fair.usage_half_life * scale)
        if afs is not None and scale != 1.0:
            afs = dataclasses.replace(
                afs, half_life=afs.half_life * scale, sampling_interval=afs.sampling_interval * scale
            )
        term = Term.start(
            fence,
            snapshot,
            dict(self.namespaces),
            fair,
            admission_fair_sharing=afs,
            history=history,
            inventory=self.placement.for_term(snapshot.config),
            packing=self.policy.topology_packing,
        )
        self.priorities.apply(term.scheduler)
        term.scheduler.block_admission = self.policy.pods_ready.block_admission
        term.valid_until = confirmed_at + self.options.lease_ttl * 0.8
        self.term = term
        self.terms_begun += 1
        for wl in term.scheduler.workloads.values():
            self.metrics.clock.start(wl, time.time())  # held quota counts from this term on
        self.changes.jobs.update(dict.fromkeys(self.views))
        self.changes.jobs.update(dict.fromkeys(term.rows))
        self.changes.checks.update(dict.fromkeys(self.checks.requests))
        self.changes.namespaces = False
        self.changes.config = True  # (its first step reads the stop/resume requests no term has applied)
        self.projection.term_began(term)
        self.placement.term_began()
        for uid, row in term.rows.items():  # requests to make, or to clean up, after a restart
            if uid in self.checks.requests or _has_checks(term.held(row.key)):
                self.checks.request(uid)
        log.info("leading as %s (term %d): %d workloads loaded", fence.holder, fence.token, len(term.rows))
        self._tell_watchers()
        self.declared.wake.set()  # the leader reconciles the declared queues
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
            self._tell_watchers()

    async def _lead(self, term: Term) -> None:
        wake = self.changes.wake
        while self.term is term:
            await wake.wait()
            wake.clear()
            await asyncio.sleep(self.options.debounce)
            try:
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
            self.step_failures = 0


def _nothing(_kind: str, _obj: Obj) -> None:
    """A placeholder handler, replaced once the informer exists."""


def _has_checks(wl: Workload | None) -> bool:
    return wl is not None and bool(wl.checks)
