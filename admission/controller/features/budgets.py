"""GPU-hour budgets in the controller: measured from the ledger, enforced by the core's gate.

Every ``interval`` the leader reads the budgets (``admission.store.budgets``) and what each used
in its current period, from the usage ledger. An exhausted budget holds the new workloads it
covers back with reason ``BudgetExhausted`` (the scheduling core's ``Nominator.gate``, the same
gate engine core uses), or, with ``--when-exhausted lower-priority``, queues it at the budget's
priority (``queues.cycle.budget_priority``); the message says how much was used and when the period ends; running
work is never stopped by a budget. When a period ends, or a budget is raised or deleted, the gate
opens at the next look and every queue looks again.

At 80 % a budget is said once per period, and again once exhausted: a log line and a Warning
Event (``GPUBudgetWarning``, ``BudgetExhausted``) where its users look. A budget is no
Kubernetes object, so the Event goes on the ClusterQueue of a ClusterQueue budget (in
``default``, where a cluster-scoped object's Events live), and on each Namespace where the
workloads of a label budget are (in that namespace: ``kubectl get events -n <ns>`` shows it to the
team), at most ``MAX_NAMESPACES``. ``turnstile_gpu_budget_used_ratio{budget}`` shows how far each
is used.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction

from prometheus_client import CollectorRegistry, Gauge
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from admission.controller.capability import Capability, Loop, StepContext
from admission.controller.events import EventPoster
from admission.controller.term import Term
from admission.store import budgets as store
from admission.store import database
from queues.cycle import budget_priority
from queues.cycle.decisions import Decision
from queues.efficiency import Budget
from queues.kueue import api, crds
from queues.model import Workload
from queues.simulation.reclaim_model import WARN_AT

log = logging.getLogger(__name__)

Gate = Callable[[Workload], str | None]
MAX_NAMESPACES = 20  # namespaces told about one label budget
WARNING = "GPUBudgetWarning"
EXHAUSTED = "BudgetExhausted"


class BudgetKeeper(Capability):
    """GPU-hour budgets as a capability (``admission.controller.capability``): its look runs on every
    replica; in the leader's step it sets the core's gate (a spent budget holds new work back, or
    lowers its priority; a renewed one lets it go)."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        *,
        current_term: Callable[[], Term | None],
        wake: Callable[[], None],
        registry: CollectorRegistry,
        interval: float = 60.0,
        events: EventPoster | None = None,
        card_fractions: Callable[[], Mapping[str, Fraction]] = dict,
    ) -> None:
        self.sessions = sessions
        # GPU resources' parts of a card, as ``turnstile usage`` bills them (DRA devices', TURNSTILE_GPU_FRACTIONS)
        self.card_fractions = card_fractions
        self.events = events
        self.anchor = 0.0  # where duration periods start (Unix seconds; engine cluster: its t=0)
        self.current_term = current_term
        self.wake = wake
        self.interval = interval
        self.gate: Gate | None = None  # a new function whenever what is exhausted changes
        self.exhausted: dict[str, str] = {}  # budget name -> why its workloads wait
        self.used: dict[str, float] = {}  # budget name -> GPU-hours used this period, at the last look
        self.warned: set[tuple[str, str, dt.datetime]] = set()  # (what, budget, period start) said
        self.ratio = Gauge(
            "turnstile_gpu_budget_used_ratio",
            "GPU-hours used this period over the budget (1: exhausted, new work waits)",
            ["budget"],
            registry=registry,
        )
        self._shown: set[str] = set()
        self.lowered: budget_priority.Lowered | None = None  # the priority spent budgets run new work at
        self._policies: list[tuple[str, int | None]] = []  # (spent budget, its lower priority) as last built

    def loops(self) -> Sequence[Loop]:
        return (("gpu-budgets", self.run),)

    def decide(self, step: StepContext) -> Sequence[Decision]:
        self.apply(step.term)
        return ()

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            if self.current_term() is None:
                continue
            try:
                await self.look(dt.datetime.now(dt.UTC))
            except database.ERRORS as exc:  # (the next look tries again; the gate stays as it was)
                log.warning("GPU-hour budgets not read: %s", database.describe_error(exc))

    async def look(self, now: dt.datetime) -> None:
        """Measure every budget now; a new gate (and a step) when what is exhausted changed."""
        async with database.transaction(self.sessions) as session:
            stored = await store.load(session)
            used = [await store.used_hours(session, b, now, self.anchor, self.card_fractions()) for b in stored]
        exhausted: dict[str, str] = {}
        holding: list[tuple[Budget, str]] = []
        lowering: list[Budget] = []
        self.used = {b.budget.name: hours for b, hours in zip(stored, used, strict=True)}
        for b, hours in zip(stored, used, strict=True):
            start, end = store.current_period(b.period, now, self.anchor)
            budget = b.budget
            ratio = hours / budget.gpu_hours if budget.gpu_hours else 1.0  # (a budget of 0 allows nothing new)
            self.ratio.labels(budget.name).set(ratio)
            until = end.strftime("%Y-%m-%dT%H:%M:%SZ")
            if hours >= budget.gpu_hours:
                message = budget.exhausted_message(hours, until)
                exhausted[budget.name] = message
                if budget.lower_priority is None:
                    holding.append((budget, message))
                else:
                    lowering.append(budget)
                self._say(EXHAUSTED, budget, start, message)
            elif ratio >= WARN_AT:
                self._say(WARNING, budget, start, budget.warning_message(hours, until))
        for gone in self._shown - {b.name for b in stored}:
            self.ratio.remove(gone)
        self._shown = {b.name for b in stored}
        policies = [(b.name, b.lower_priority) for b, _ in holding] + [(b.name, b.lower_priority) for b in lowering]
        if exhausted.keys() != self.exhausted.keys() or policies != self._policies:
            self.exhausted, self._policies = exhausted, policies
            self.gate = _gate(holding) if holding else None
            self.lowered = functools.partial(budget_priority.lowest, tuple(lowering)) if lowering else None
            self.wake()

    def _say(self, reason: str, budget: Budget, period: dt.datetime, message: str) -> None:
        """Once per budget, period and reason: a log line, and Events where its users look."""
        if (reason, budget.name, period) in self.warned:
            return
        self.warned.add((reason, budget.name, period))
        log.warning("%s", message)
        term = self.current_term()
        if self.events is None:
            return
        if budget.cluster_queue is not None:
            kind = f"{api.GROUP}/{crds.VERSION}"
            self.events.post_on(kind, "ClusterQueue", budget.cluster_queue, None, reason, message, type="Warning")
            return
        workloads = term.scheduler.workloads.values() if term is not None else ()
        covered = sorted({wl.namespace for wl in workloads if budget.covers(None, wl.labels)})
        for namespace in covered[:MAX_NAMESPACES]:
            self.events.post_on("v1", "Namespace", namespace, namespace, reason, message, type="Warning")

    def apply(self, term: Term) -> None:
        """In a step: the term's scheduler gates (or lowers) by the latest look, and looks again
        on a change."""
        sched = term.scheduler
        if sched.nominator.gate is not self.gate or sched.intake.budget_priority is not self.lowered:
            sched.nominator.gate, sched.intake.budget_priority = self.gate, self.lowered
            sched.reprioritize()
            sched.look_again()


def _gate(holding: list[tuple[Budget, str]]) -> Gate:
    def held(wl: Workload) -> str | None:
        for budget, message in holding:
            if budget.covers(wl.cluster_queue, wl.labels):
                return message
        return None

    return held
