"""Idle-GPU reclaim in the controller: measured by DCGM through Prometheus, decided by the core.

A ClusterQueue opts in with the annotation ``turnstile.dev/idle-reclaim``, a JSON object of a
scenario's ``reclaim`` entry's fields (``{"threshold": 0.3, "window": "30m", "grace": "10m",
"action": "requeue", "onlyWhenContended": true, "maxKeep": "24h"}``; ``queues.efficiency``).
Every ``interval`` the leader reads each pod's mean GPU utilisation over each policy's window
(``utilisation.Prometheus``), joins pods to workloads by the ``turnstile.dev/workload``
annotation every admitted job's pods carry (``admission.controller.features.inventory``), and the next
step decides with engine core's own model (``queues.simulation.reclaim_model``): warn (an Event
``GPUIdle``), or evict with reason ``GPUIdle`` and requeue or deactivate, only when someone
waits for the quota if the policy says so. The same loop reads each pod's mean since the last
read for the ledger's used GPU-hours whenever Prometheus is set, measures the runs that ended
since over their whole intervals (``admission.controller.features.metering``), and asks which GPUs report
a fatal fault (``admission.controller.features.gpu_health``).

Missing data is unknown, never idle: a workload none of whose pods has a series is not touched,
and a Prometheus that cannot be read reclaims nothing (readiness says why; a metric counts it).
A job may opt out for a while with ``turnstile.dev/keep-until: <RFC 3339>``, at most ``maxKeep``
after its run started. What the model remembers (a run already acted on, how often a workload
was requeued for idling) lives as long as the leadership term.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING

from admission.controller.capability import Capability, Loop, StepContext
from admission.controller.events import EventPoster
from admission.controller.features.gpu_health import GpuHealth
from admission.controller.features.inventory import NodeInventory
from admission.controller.features.metering import Meter, Span
from admission.controller.features.utilisation import Prometheus, Unavailable
from admission.controller.term import Term, admission_token
from admission.controller.watch.jobcache import JobCache
from admission.jobs.job_fields import KEEP_UNTIL
from queues import efficiency
from queues.cycle.decisions import Decision, Evict
from queues.efficiency import ReclaimPolicy
from queues.gpus.gpu_metrics import Reading
from queues.simulation.reclaim_model import EfficiencyModel

if TYPE_CHECKING:
    from prometheus_client import Counter

log = logging.getLogger(__name__)

MAX_METERED = 6 * 3600.0  # a read after Prometheus was away covers at most this much of the gap

__all__ = ["KEEP_UNTIL", "Reclaimer"]


class Reclaimer:
    def __init__(
        self,
        *,
        prometheus: Prometheus | None,
        pods: NodeInventory,
        jobs: JobCache,
        current_term: Callable[[], Term | None],
        wake: Callable[[], None],
        interval: float = 60.0,
        scale: float = 1.0,
        meter: Meter | None = None,
        health: GpuHealth | None = None,
        card_fractions: Callable[[], Mapping[str, Fraction]] = dict,
    ) -> None:
        self.card_fractions = card_fractions  # GPU resources' parts of a card (DRA devices', TURNSTILE_GPU_FRACTIONS)
        self.prometheus = prometheus
        self.pods = pods
        self.jobs = jobs
        self.current_term = current_term
        self.wake = wake
        self.interval = interval
        self.scale = scale  # wall seconds per second of a policy's window and grace (engine cluster)
        self.readings: dict[float, Reading] = {}  # policy window (seconds) -> the last reading
        self.read_at = 0.0  # wall time the readings were asked for
        self.problem: str | None = None  # why utilisation cannot be read now (readiness)
        self.failures = 0
        self.meter = meter  # the ledger's used hours: every read since the last one goes to it
        self.health = health if health is not None and health.on else None  # GPU faults, read with the rest
        self.metered_at = 0.0  # wall time of the last read it was given
        self.warned: list[tuple[str, str]] = []  # (workload, message): warnings the step has to say
        self._model: tuple[object, tuple[ReclaimPolicy, ...], EfficiencyModel] | None = None
        self._policies: tuple[object, tuple[ReclaimPolicy, ...]] = (None, ())  # (configuration, its policies)

    def policies(self, term: Term) -> tuple[ReclaimPolicy, ...]:
        """The ClusterQueues' policies (durations scaled), parsed once per configuration."""
        config = term.scheduler.config
        if self._policies[0] is not config:
            policies = efficiency.annotated_policies(config.cluster_queues.values())
            scaled = tuple(p.scaled(self.scale) for p in policies) if self.scale != 1.0 else policies
            self._policies = (config, scaled)
        return self._policies[1]

    def probe(self) -> str | None:
        """Readiness (reported, not gating)."""
        return self.problem

    async def run(self) -> None:
        """Every ``interval``, with Prometheus set: read each pod's utilisation since the last read
        (the ledger's used hours, ``admission.controller.features.metering``) and over each policy's window;
        wake a step."""
        while True:
            await asyncio.sleep(self.interval)
            # (no term kept across the awaits below and the next interval: an ended one holds every workload)
            term = self.current_term()
            policies = self.policies(term) if term is not None else None
            del term
            if policies is None:
                continue
            if self.prometheus is None:
                self.problem = (
                    "a ClusterQueue has an idle-reclaim policy but TURNSTILE_PROMETHEUS_URL is not set"
                    if policies
                    else None
                )
                continue
            asked = time.time()
            since = max(self.metered_at, asked - MAX_METERED) if self.metered_at else asked - self.interval
            try:
                readings = {w: await self.prometheus.read(w) for w in sorted({p.window for p in policies})}
                metered = await self.prometheus.read(asked - since, with_memory=self.meter is not None)
                faults = await self.prometheus.faults() if self.health is not None else {}
            except Unavailable as exc:  # (the next read covers the gap: nothing is lost to the ledger)
                if self.problem is None:
                    log.warning("GPU utilisation cannot be read; nothing is reclaimed meanwhile: %s", exc)
                self.problem, self.readings = f"GPU utilisation cannot be read: {exc}", {}
                self.failures += 1
                continue
            if self.problem is not None:
                log.info("GPU utilisation is read again")
            self.problem, self.readings, self.read_at = None, readings, asked
            self.metered_at = asked
            if self.health is not None:
                self.health.read(faults)
            if self.meter is not None:
                self.meter.read(Span(metered, since, asked))
                await self._measure_ended()
            self.wake()

    async def _measure_ended(self) -> None:
        """Runs that ended since the last read, each measured over its whole interval (the next
        step stores them); on a failure they wait for the next read."""
        assert self.meter is not None and self.prometheus is not None
        ended = self.meter.to_measure()
        if not ended:
            return
        try:
            found = await self.prometheus.measure(ended)
        except Unavailable as exc:
            log.warning("%d ended runs not measured yet (the next read tries again): %s", len(ended), exc)
            return
        self.meter.measured(ended, found)

    def decide(self, term: Term, now: float) -> list[Decision]:
        """In a step: the evictions idle workloads earn now (warnings go to ``warned``)."""
        if not self.readings:
            return []
        policies = self.policies(term)
        if not policies:
            return []
        model = self._model_for(term, policies)
        sched = term.scheduler
        running: set[str] = set()
        for key, wl in sched.workloads.items():
            held = term.held(key)
            if held is None or admission_token(held) is None or wl.started_at is None:
                continue
            running.add(key)
            run = model.runs.get(key)
            if run is None or run.start != wl.started_at:
                model.started(wl, wl.started_at, 0.0)
        for key in set(model.runs) - running:
            model.stopped(key)

        def measure(key: str, policy: ReclaimPolicy, start: float) -> float | None:
            if self.read_at < start + max(policy.grace, policy.window) or self._kept(key, policy, start, now):
                return None  # (a reading whose window is not wholly within this run says nothing of it)
            reading = self.readings.get(policy.window)
            return reading.mean(self.pods.pods_of(key)) if reading is not None else None

        before = len(model.warnings)
        decisions = model.reclaim(now, sched, measure)
        self.warned.extend((key, message) for _, key, message in model.warnings[before:])
        return decisions

    def idle_held(self) -> dict[tuple[str, str], int] | None:
        """(flavor, resource) -> milli-units held by running workloads measured below their
        policy's threshold in the last reading (the dashboard's "idle"); None without readings."""
        term = self.current_term()
        if term is None or not self.readings:
            return None
        policies = {p.cluster_queue: p for p in self.policies(term)}
        out: dict[tuple[str, str], int] = {}
        for key, wl in term.scheduler.workloads.items():
            policy = policies.get(wl.admission.cluster_queue) if wl.admission is not None else None
            reading = self.readings.get(policy.window) if policy is not None else None
            if wl.admission is None or policy is None or reading is None or wl.started_at is None:
                continue
            measured = reading.mean(self.pods.pods_of(key))
            if measured is not None and measured < policy.threshold:
                for fr, qty in wl.admission.usage.items():
                    out[fr] = out.get(fr, 0) + qty
        return out

    @property
    def model(self) -> EfficiencyModel | None:
        """The current term's model (what it decided: counts, warnings), if any."""
        return self._model[2] if self._model is not None else None

    def _model_for(self, term: Term, policies: tuple[ReclaimPolicy, ...]) -> EfficiencyModel:
        """The term's model; a new one when the term or the policies change (runs already acted on
        and requeue counts carried over)."""
        if self._model is not None and self._model[0] is term and self._model[1] == policies:
            return self._model[2]
        model = EfficiencyModel({}, policies, (), self.card_fractions())
        model.backoff_scale = self.scale  # (the requeue backoff is in scenario seconds too)
        if self._model is not None and self._model[0] is term:
            model.reclaimed = self._model[2].reclaimed
            model.runs = self._model[2].runs
        self._model = (term, policies, model)
        return model

    def _kept(self, key: str, policy: ReclaimPolicy, start: float, now: float) -> bool:
        """Whether the job asked to be kept (``turnstile.dev/keep-until``) and that still holds,
        bounded by the policy's ``maxKeep`` after its run started."""
        view = self.jobs.view(key)
        raw = view.keep_until if view is not None else None
        if not raw:
            return False
        try:
            parsed = dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
        except ValueError:
            return False  # (the webhook warns about it at creation)
        if parsed.tzinfo is None:
            return False  # (no zone: not RFC 3339; said at creation too)
        return now < min(parsed.timestamp(), start + policy.max_keep)


class IdleReclaim(Capability):
    """Idle reclaim and GPU health as the kernel sees them (``admission.controller.capability``): the
    reads run on every replica; in the leader's step, the evictions idle workloads and failed GPUs
    earn, with warnings said as Events at once (they change nothing to commit), each counted in
    ``turnstile_gpu_idle_workloads_total``."""

    def __init__(self, reclaimer: Reclaimer, *, events: EventPoster, counted: Counter) -> None:
        self.reclaimer = reclaimer
        self.events = events
        self.counted = counted

    def loops(self) -> Sequence[Loop]:
        return (("gpu-utilization", self.reclaimer.run),)

    async def stop(self) -> None:
        if self.reclaimer.prometheus is not None:
            await self.reclaimer.prometheus.close()

    def decide(self, step: StepContext) -> Sequence[Decision]:
        term, reclaimer = step.term, self.reclaimer
        decisions = reclaimer.decide(term, step.now)
        if reclaimer.health is not None:  # (GPUs reporting a fatal Xid: their nodes' work requeued)
            decisions.extend(reclaimer.health.decide(term))
        warned, reclaimer.warned = reclaimer.warned, []
        for key, message in warned:
            wl = term.scheduler.workloads.get(key)
            cq = wl.admission.cluster_queue if wl is not None and wl.admission is not None else ""
            self.counted.labels(cq, "warn").inc()
            view = reclaimer.jobs.view(key)
            self.events.post(view, efficiency.GPU_IDLE, f"{message}; warned only", type="Warning")
        for d in decisions:
            if isinstance(d, Evict) and d.released is not None:
                self.counted.labels(d.released.cluster_queue, d.detail.lower()).inc()
        return decisions
