"""Engine cluster's GPU efficiency: a scenario's ``utilization``, ``reclaim`` and ``budgets``
played by the real system, as a platform team would set them up.

Why not a model: engine cluster exists to show the production code reaching engine core's
decisions. So each part of a scenario becomes what a cluster has:

- a job's ``utilization`` becomes the ``turnstile.dev/sim-gpu-utilization`` annotation on its
  object (a fraction, or a trace as JSON in scenario seconds), which the simulated
  dcgm-exporter serves for its pods (``admission.sim.operators.dcgm``, times scaled); its
  ``gpuMemoryUsed`` becomes ``turnstile.dev/sim-gpu-memory-used`` the same way (in Mi), read into
  the ledger for ``turnstile rightsize`` (engine cluster's summary has no ``rightsize``: the
  ledger is where the controller keeps it);
- a real Prometheus (the ``prometheus`` binary on PATH, ``admission.sim.prometheus``) scrapes
  that exporter as through a ServiceMonitor, and the controller reads it
  (``TURNSTILE_PROMETHEUS_URL``) every scenario minute, as a real one reads every minute;
- a ``reclaim`` entry becomes its ClusterQueue's ``turnstile.dev/idle-reclaim`` annotation (the
  controller scales its window and grace by the time scale);
- a ``budgets`` entry becomes a stored budget (``turnstile budget set``) in wall GPU-hours and a
  wall period, whose periods start at the run's t=0 (``BudgetKeeper.anchor``).

What is left different from engine core is in ``docs/gpu-efficiency.md``: utilisation is
measured from scrapes (a step is seen within a scrape), and reclaim and budgets are looked at
every scenario minute rather than at their exact instants.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from sqlalchemy.ext.asyncio import AsyncSession

from admission.controller.controller import Controller
from admission.sim import prometheus as sim_prometheus
from admission.sim.operators import dcgm
from admission.store import budgets as budget_store
from queues.efficiency import GPU_IDLE, POLICY_ANNOTATION, Budget, ReclaimPolicy, Trace
from queues.gpus.gpu_units import cards
from queues.kueue import api
from queues.simulation.scenario import Scenario

ACTOR = "turnstile-simulate"
MINUTE = 60.0  # scenario seconds between looks at utilisation and budgets (a real controller's default)


def needs_prometheus(scenario: Scenario) -> bool:
    xids = any(edit.action == "gpuXid" for edit in scenario.edits)
    return bool(scenario.reclaim or scenario.utilization or scenario.gpu_memory or xids)


def missing() -> str:
    """Why engine cluster cannot run a scenario that measures utilisation here (empty: it can)."""
    if sim_prometheus.binary() is None:
        return (
            "engine cluster reads GPU utilisation through a real Prometheus, and no `prometheus` is on PATH "
            "(apt-get install prometheus)"
        )
    return ""


def look_interval(time_scale: float) -> float:
    """Wall seconds between the controller's looks at utilisation and budgets."""
    return max(0.1, MINUTE * time_scale)


def scrape_interval(time_scale: float) -> str:
    """Prometheus's scrape interval: a quarter of a look, between 100 ms and 15 s."""
    return f"{round(min(15.0, max(0.1, look_interval(time_scale) / 4)) * 1000)}ms"


@contextlib.asynccontextmanager
async def prometheus(scenario: Scenario, api_url: str, workdir: Path, time_scale: float) -> AsyncIterator[str]:
    """A Prometheus scraping the simulated dcgm-exporter, if the scenario measures utilisation;
    yields its URL ("" when none is needed)."""
    if not needs_prometheus(scenario):
        yield ""
        return
    target = urlparse(api_url).netloc
    async with sim_prometheus.running(
        workdir / "prometheus", target, dcgm.PATH, honor_labels=False, interval=scrape_interval(time_scale)
    ) as url:
        yield url


def annotated(manifests: Sequence[api.KueueObject], policies: Sequence[ReclaimPolicy]) -> list[api.KueueObject]:
    """The manifests with each ``reclaim`` entry as its ClusterQueue's annotation."""
    by_queue = {p.cluster_queue: p for p in policies}
    out: list[api.KueueObject] = []
    for obj in manifests:
        policy = by_queue.get(obj.name) if isinstance(obj, api.ClusterQueue) else None
        if policy is not None:
            annotations = {**obj.metadata.annotations, POLICY_ANNOTATION: policy_annotation(policy)}
            obj = obj.model_copy(update={"metadata": obj.metadata.model_copy(update={"annotations": annotations})})
        out.append(obj)
    return out


def policy_annotation(policy: ReclaimPolicy) -> str:
    """A policy as the annotation's JSON (durations in scenario seconds)."""
    return json.dumps(
        {
            "threshold": policy.threshold,
            "window": _seconds(policy.window),
            "grace": _seconds(policy.grace) if policy.grace else "0s",
            "action": policy.action,
            "onlyWhenContended": policy.only_when_contended,
            "maxKeep": _seconds(policy.max_keep),
        }
    )


def utilization_annotation(trace: Trace) -> str:
    """A trace as the simulated exporter reads it: a fraction, or its steps as JSON."""
    if len(trace.steps) == 1:
        return f"{trace.steps[0][1]:g}"
    return json.dumps([{"at": at, "value": value} for at, value in trace.steps])


def with_utilization(obj: dict[str, Any], trace: Trace | None) -> dict[str, Any]:
    if trace is None:
        return obj
    meta = dict(obj.get("metadata") or {})
    meta["annotations"] = {**(meta.get("annotations") or {}), dcgm.ANNOTATION: utilization_annotation(trace)}
    return {**obj, "metadata": meta}


def with_gpu_memory(obj: dict[str, Any], trace: Trace | None) -> dict[str, Any]:
    """``gpuMemoryUsed`` as the simulated exporter reads it: a quantity in Mi, or steps as JSON."""
    if trace is None:
        return obj
    if len(trace.steps) == 1:
        value = f"{trace.steps[0][1]:g}Mi"
    else:
        value = json.dumps([{"at": at, "value": f"{mib:g}Mi"} for at, mib in trace.steps])
    meta = dict(obj.get("metadata") or {})
    meta["annotations"] = {**(meta.get("annotations") or {}), dcgm.MEMORY_ANNOTATION: value}
    return {**obj, "metadata": meta}


async def store_budgets(session: AsyncSession, budgets: Sequence[Budget], time_scale: float) -> None:
    """The scenario's budgets as stored ones, in wall GPU-hours and a wall period."""
    for b in budgets:
        stored = budget_store.make(
            cluster_queue=b.cluster_queue,
            labels=dict(b.labels),
            gpu_hours=b.gpu_hours * time_scale,
            period=_seconds(b.period * time_scale),
            lower_priority=b.lower_priority,
        )
        await budget_store.put(session, stored, actor=ACTOR)


def summary(
    controller: Controller, scenario: Scenario, events: Sequence[Mapping[str, Any]], *, wall0: float, time_scale: float
) -> dict[str, object]:
    """The report's ``reclaim`` and ``budgets`` as engine core gives them, from what the
    controller did (its reclaim model's counts and warnings, its budget keeper's last look) and
    the run's events, in scenario time and scenario GPU-hours."""
    out: dict[str, object] = {}
    if scenario.reclaim:
        model = controller.features.reclaimer.model
        counts = dict(model.counts) if model is not None else {"warned": 0, "requeued": 0, "deactivated": 0}
        warnings = model.warnings if model is not None else []
        out["reclaim"] = {
            **counts,
            "gpuHoursFreed": round(_freed(scenario, events) / 3600, 2),
            "warnings": [
                {"t": round(max(0.0, (t - wall0) / time_scale), 1), "workload": key, "message": message}
                for t, key, message in warnings
            ],
        }
    if scenario.budgets:
        keeper = controller.features.budgets
        out["budgets"] = [
            {
                "budget": b.name,
                "gpuHours": b.gpu_hours,
                "usedThisPeriod": round(keeper.used.get(b.name, 0.0) / time_scale, 2),
                "exhausted": b.name in keeper.exhausted,
                "warnedPeriods": len({period for _, name, period in keeper.warned if name == b.name}),
            }
            for b in scenario.budgets
        ]
    return out


def _freed(scenario: Scenario, events: Sequence[Mapping[str, Any]]) -> float:
    """GPU-seconds the workloads reclaimed by eviction would still have held (as engine core
    counts them): their GPUs times the runtime left when they were evicted."""
    entries = {e.job.key: e for e in scenario.jobs}
    labels = {o.name: dict(o.spec.node_labels) for o in scenario.manifests if isinstance(o, api.ResourceFlavor)}
    started: dict[str, tuple[float, Mapping[str, Mapping[str, str]]]] = {}  # (when, the flavors admitted on)
    freed = 0.0
    for e in events:
        key = str(e.get("workload"))
        if e.get("type") == "Admitted":
            started[key] = (float(e["t"]), e.get("flavors") or {})
        elif e.get("type") == "Evicted" and e.get("reason") == GPU_IDLE and key in entries and key in started:
            entry, (since, flavors) = entries[key], started[key]
            # (DRA claims too, as charged on the flavors admitted: a prioritized list may cost less there)
            charged = scenario.devices.charge(entry.job.namespace, entry.job.pod_sets, labels)
            held = ((r, ps.on(flavors.get(ps.name, {}).get(r, ""), r)) for ps in charged for r in ps.total())
            gpus = cards(held, scenario.devices.card_fractions())
            freed += gpus * max(0.0, entry.runtime - (float(e["t"]) - since))
    return freed


def _seconds(value: float) -> str:
    """A Go duration in seconds, to the millisecond (``1800s``, ``36.288s``)."""
    return f"{value:.3f}".rstrip("0").rstrip(".") + "s"
