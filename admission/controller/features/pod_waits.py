"""Why an admitted job's pods wait: the kube-scheduler's own words, where the user looks.

Quota is not nodes: a workload can be admitted and its job started while its pods stay Pending,
because no node has the GPUs free, a taint is not tolerated or a selector matches nothing. The
kube-scheduler says why on each pod (``PodScheduled=False``, reason ``Unschedulable``, its
``FitError``: ``0/4 nodes are available: 4 Insufficient nvidia.com/gpu. preemption: ...``), and a
user who runs ``describe workload`` should not have to find the pods to read it.

Every ``interval`` the leader takes the admitted workloads whose jobs started at least ``grace``
ago and whose pods are not all Ready (``JobView.ready``), lists the Pending pods of their
namespaces (one ``fieldSelector=status.phase=Pending`` request a namespace), and joins them by
the ``turnstile.dev/workload`` annotation every admitted job's pods carry. For a workload with an
unschedulable pod, it then

- stores reason ``PodsUnschedulable`` and the scheduler's message on the admitted workload
  (``turnstile get/describe workload`` and the dashboard show it), and clears them once its pods
  are placed;
- posts one Warning Event ``PodsUnschedulable`` on the job per distinct message;
- hands the message to waitForPodsReady, whose eviction says it (``why``).

Nothing is listed when no started workload waits for its pods. A failed read is logged and
tried again at the next look; the stored reason is fenced like every leader write.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from admission.controller.capability import Capability, Loop
from admission.controller.events import EventPoster
from admission.controller.features.inventory import ALL_PODS
from admission.controller.term import Term
from admission.controller.watch.jobcache import JobCache
from admission.kube.client import Kube, KubeError
from admission.store import database, lease
from admission.store import workloads as store
from queues.placement.pinning import WORKLOAD_ANNOTATION
from queues.podsready import PODS_UNSCHEDULABLE

log = logging.getLogger(__name__)

INTERVAL = 10.0  # seconds between looks, and how long a started job's pods may be unplaced unlooked at
REASON = PODS_UNSCHEDULABLE  # Turnstile's: the admitted workload's reason and the job's Event


def unschedulable(pod: Mapping[str, Any]) -> str | None:
    """The scheduler's message on a pod it could not place; None for any other pod."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if (condition.get("type"), condition.get("status"), condition.get("reason")) == (
            "PodScheduled",
            "False",
            "Unschedulable",
        ):
            return str(condition.get("message") or "no node can take it")
    return None


def summary(pods: list[tuple[str, str]]) -> str:
    """``4 of its pods cannot be scheduled (pod ml/train-0): <the first pod's message>``, as engine
    core says it without the pod's name (``queues.cycle.provisioning.AutoscalerModel.why_unplaced``)."""
    (name, message) = pods[0]
    return f"{len(pods)} of its pods cannot be scheduled (pod {name}): {message}"


class PodWaits(Capability):
    def __init__(
        self,
        kube: Kube,
        sessions: async_sessionmaker[AsyncSession],
        *,
        jobs: JobCache,
        current_term: Callable[[], Term | None],
        events: EventPoster,
        interval: float = INTERVAL,
        grace: float = INTERVAL,
    ) -> None:
        self.kube = kube
        self.sessions = sessions
        self.jobs = jobs
        self.current_term = current_term
        self.events = events
        self.interval = interval
        self.grace = grace  # seconds a started job's pods may be unplaced before they are looked at
        self.waiting: dict[str, str] = {}  # workload key -> why its pods wait, as last read
        self.stored: dict[str, tuple[int, str]] = {}  # workload key -> (row id, message) stored as its reason
        self._term: Term | None = None  # the term ``stored`` is of

    def why(self, key: str) -> str | None:
        """Why ``key``'s pods wait, if they do (waitForPodsReady's eviction message says it)."""
        return self.waiting.get(key)

    def loops(self) -> Sequence[Loop]:
        return (("pod-waits", self.run),)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            term = self.current_term()
            if term is None:
                self.waiting, self.stored = {}, {}
                continue
            try:
                await self.look(term, time.time())
            except KubeError as exc:
                log.warning("why admitted pods wait was not read (the next look tries again): %s", exc)
            except database.ERRORS as exc:
                log.warning("why admitted pods wait was not stored (the next look tries again): %s", exc)
            del term  # (not kept through the next interval: a term that ends meanwhile holds every workload)

    def candidates(self, term: Term, now: float) -> dict[str, str]:
        """Started workloads whose pods are not all Ready after ``grace``: key -> namespace."""
        out: dict[str, str] = {}
        for key, wl in term.scheduler.workloads.items():
            if wl.admission is None or not wl.started or wl.started_at is None or now - wl.started_at < self.grace:
                continue
            view = self.jobs.view(key)
            if view is not None and not view.ready and not view.finished and not view.suspended:
                out[key] = view.namespace
        return out

    async def look(self, term: Term, now: float) -> None:
        candidates = self.candidates(term, now)
        found: dict[str, list[tuple[str, str]]] = {}
        for namespace in sorted(set(candidates.values())):
            answer = await self.kube.request(
                "GET", ALL_PODS.path(namespace), query={"fieldSelector": "status.phase=Pending"}
            )
            for pod in answer.get("items") or []:
                meta = pod.get("metadata") or {}
                key = (meta.get("annotations") or {}).get(WORKLOAD_ANNOTATION)
                message = unschedulable(pod)
                if key in candidates and message is not None:
                    found.setdefault(str(key), []).append((f"{namespace}/{meta.get('name')}", message))
        waiting = {key: summary(sorted(pods)) for key, pods in found.items()}
        for key, message in waiting.items():
            if self.waiting.get(key) != message:
                self.events.post(self.jobs.view(key), REASON, message, type="Warning")
        self.waiting = waiting
        await self._store(term, waiting)

    async def _store(self, term: Term, waiting: dict[str, str]) -> None:
        """The admitted workloads' reason: set where pods wait, cleared where they no longer do."""
        rows = {key: (row.id, message) for key, message in waiting.items() if (row := term.by_key.get(key))}
        changed = [(row_id, REASON, text) for key, (row_id, text) in rows.items() if self.stored.get(key) != rows[key]]
        if term is not self._term:  # a new leader: what an earlier one stored may be over
            self._term, self.stored = term, {}
            cleared = [row.id for key, row in term.by_key.items() if key not in rows]
        else:
            cleared = [row_id for key, (row_id, _) in self.stored.items() if key not in rows]
        if changed or cleared:
            async with database.transaction(self.sessions) as session:
                await lease.check(session, term.fence)
                await store.set_admitted_reasons(session, changed)
                await store.clear_admitted_reason(session, cleared, REASON)
        self.stored = rows
