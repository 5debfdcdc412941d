"""Wiring: a controller replica built from its parts, its optional features chosen by the policy.

The kernel (``admission.controller.controller``: informers, configuration listener, leadership,
terms, the step) names no optional feature; each feature is a capability
(``admission.controller.capability``). This module is the one place that knows which features
exist, what each needs from the kernel (the current term, the marks that wake a step, the job
cache, the Events poster, the metrics) and in which order the step asks them. Adding a feature is
its module plus one builder call here.

Engine cluster (``admission.sim.stack``), the ``turnstile controller`` process
(``admission.app.process``) and the tests build replicas through ``controller`` below.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from admission.controller import pod_set_infos
from admission.controller.controller import Controller
from admission.controller.features.budgets import BudgetKeeper
from admission.controller.features.card_shares import CardShares
from admission.controller.features.checks import Checks
from admission.controller.features.gpu_health import GpuHealth
from admission.controller.features.metering import Meter, Metering
from admission.controller.features.placement import Placement
from admission.controller.features.pod_waits import INTERVAL as POD_WAITS_INTERVAL
from admission.controller.features.pod_waits import PodWaits
from admission.controller.features.podsready import PodsReady, PodsReadyWatch, scaled
from admission.controller.features.reclaim import IdleReclaim, Reclaimer
from admission.controller.features.utilisation import Prometheus
from admission.controller.objects.declared import Declared
from admission.controller.objects.queuestatus import StatusWriter
from admission.controller.objects.workload_projection import Projection
from admission.controller.parts import Features, Options
from admission.controller.term import Term
from admission.jobs import INTEGRATIONS
from admission.jobs.base import Integration, PodSetInfo
from admission.kube.client import Kube
from admission.policy import DEFAULT_POLICY, Policy
from queues.model import Workload


def controller(
    *,
    kube: Kube,
    sessions: async_sessionmaker[AsyncSession],
    database_url: str,
    options: Options,
    integrations: Sequence[Integration] = INTEGRATIONS,
    policy: Policy = DEFAULT_POLICY,
) -> Controller:
    """One replica: the kernel, with every feature this build has (each does nothing until the
    policy or the cluster asks for it: no Prometheus, no Topology, no admission check...)."""
    return Controller(
        kube=kube,
        sessions=sessions,
        database_url=database_url,
        options=options,
        features=features,
        integrations=integrations,
        policy=policy,
    )


def features(c: Controller) -> Features:
    """The optional features of replica ``c``, in the order its steps ask them: admission checks'
    verdicts, pods not Ready in time, Workload objects deleted, nodes lost or cordoned, idle or
    failed GPUs, then the budgets' gate (the order the core's evictions had), then what only
    records or reports."""
    policy, scale = c.policy, c.options.backoff_scale

    def term() -> Term | None:
        return c.term

    # placement by topology: Nodes and Pods (watched once a flavor names a Topology), the ungater
    placement = Placement(
        c.kube,
        c.changes,
        current_term=term,
        pods_always=bool(policy.prometheus_url),
        ungated=c.metrics.workloads.gate_removed,
    )
    inventory = placement.inventory
    # the ledger's started and used GPU-hours: jobs seen running, DCGM read through Prometheus
    meter = Meter(c.jobs, inventory.pods_of)
    inventory.seen = meter.pod_seen
    # GPUs reporting a fatal Xid (read with the utilisation): their nodes' work requeued, the nodes tainted
    gpu_health = GpuHealth(
        c.kube, mode=policy.gpu_health, events=c.events, inventory=inventory, wake=c.changes.wake.set
    )
    # GPU-hours of DRA claims: each mapped resource's part of a card, read off the devices (and
    # recorded for the CLI), under TURNSTILE_GPU_FRACTIONS
    card_shares = CardShares(lambda: c.watch.device_catalog.devices, policy.card_fractions)
    # idle-GPU reclaim: DCGM's series through Prometheus, joined to workloads by their pods
    reclaimer = Reclaimer(
        prometheus=Prometheus(policy.prometheus_url, timeout=policy.prometheus_timeout)
        if policy.prometheus_url
        else None,
        pods=inventory,
        jobs=c.jobs,
        current_term=term,
        wake=c.changes.wake.set,
        interval=policy.reclaim_interval,
        scale=scale,
        meter=meter,
        health=gpu_health,
        card_fractions=card_shares.fractions,
    )
    c.readiness.add("nodes", inventory.probe, gates=False)
    c.readiness.add("gpu-utilization", reclaimer.probe, gates=False)
    checks = Checks(
        c.kube,
        views=c.views,
        current_term=term,
        run_infos=_run_infos,
        changed=lambda _uid: c.changes.wake.set(),  # (its verdict: the next step's)
        runtimes=c.runtimes.lookup,
        backoff_scale=scale,
    )
    # queues declared as Kubernetes objects, where Kueue's CRDs are served (the leader reconciles)
    declared = Declared(c.kube, c.sessions, leading=c.leading, database_health=c.database)
    # why an admitted job's pods wait (the kube-scheduler's words): describe, an Event, waitForPodsReady
    pod_waits = PodWaits(
        c.kube,
        c.sessions,
        jobs=c.jobs,
        current_term=term,
        events=c.events,
        interval=POD_WAITS_INTERVAL * scale,
        grace=POD_WAITS_INTERVAL * scale,
    )
    pods_ready = PodsReadyWatch(scaled(policy.pods_ready, scale))
    pods_ready.why = pod_waits.why
    # GPU-hour budgets: measured from the ledger, held by the core's gate
    budgets = BudgetKeeper(
        c.sessions,
        current_term=term,
        wake=c.changes.wake.set,
        registry=c.metrics.registry,
        interval=policy.reclaim_interval,
        events=c.events,
        card_fractions=card_shares.fractions,
    )
    # one workloads.kueue.x-k8s.io object per queued job, projected from the store by the leader
    projection = Projection(
        c.kube,
        c.sessions,
        c.jobs,
        term,
        wake_step=c.changes.wake.set,
        events=c.events,
        created=c.metrics.workloads.object_created,
        pods_ready=policy.pods_ready.enable,
    )
    return Features(
        capabilities=[
            checks,
            PodsReady(pods_ready, jobs=c.jobs, metrics=c.metrics.workloads),
            projection,
            placement,
            IdleReclaim(reclaimer, events=c.events, counted=c.metrics.gpu_idle),
            budgets,
            Metering(meter, c.sessions),
            card_shares,
            pod_waits,
            declared,
            StatusWriter(c.kube, declared, term),
        ],
        placement=placement,
        checks=checks,
        projection=projection,
        declared=declared,
        reclaimer=reclaimer,
        budgets=budgets,
        pod_waits=pod_waits,
        gpu_health=gpu_health,
        card_shares=card_shares,
    )


def _run_infos(term: Term, wl: Workload) -> list[PodSetInfo]:
    """What an admission check's request is made from: the pod sets as they would run."""
    return pod_set_infos.run_infos(term, wl, wl.admission) if wl.admission else []
