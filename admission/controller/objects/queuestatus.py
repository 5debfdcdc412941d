"""Status written back to the declared queue objects, as Kueue writes it, rate-limited and coalesced.

The leading replica computes each ClusterQueue's and LocalQueue's status from its scheduler
(``queues.status``: the ``Active`` condition, pending/reserving/admitted workloads, flavors
reserved and used) and every declared object's ``turnstile.dev/Reconciled`` condition (applied
to PostgreSQL, or why not: ``Invalid``, ``DatabaseUnavailable``, ``Pending``, ``InUse`` for a
deletion kept by the finalizer), and patches the ``status`` subresource of the objects whose
status differs from what they show.

While no replica leads because the database cannot be reached, a replica still says so on the
objects edited meanwhile (``DatabaseUnavailable``), and only that: they are applied, and their
status written in full, when the database returns.

Coalesced: a pass every ``INTERVAL`` seconds writes each object's *latest* status at most once,
however many admissions happened meanwhile, and nothing when nothing changed (conditions keep
their ``lastTransitionTime`` unless their status changes). Rate-limited: a token bucket (``RATE``
writes per second, bursts of ``BURST``) bounds what 1,000 ClusterQueues under churn send to the
API server; what a pass could not write is written by the next ones.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from admission.controller.capability import Capability, Loop
from admission.controller.objects.declared import Declared, Key
from admission.controller.term import Term
from admission.kube import client as kube_client
from admission.kube.client import Kube, KubeError, Obj
from admission.store import source
from queues import status

log = logging.getLogger(__name__)

INTERVAL = 1.0  # seconds between passes
RATE = 50.0  # status writes per second, sustained
BURST = 200
RECONCILED = "turnstile.dev/Reconciled"


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _with_times(have: Obj, want: Obj) -> Obj:
    """``want`` with each condition's ``lastTransitionTime`` kept from ``have`` when its status
    did not change, and now when it did."""
    before = {c.get("type"): c for c in have.get("conditions") or [] if isinstance(c, dict)}
    conditions = []
    for c in want.get("conditions") or []:
        old = before.get(c["type"])
        same = old is not None and old.get("status") == c["status"] and old.get("lastTransitionTime")
        conditions.append({**c, "lastTransitionTime": old["lastTransitionTime"] if same and old else _now()})
    return {**want, "conditions": conditions}


class StatusWriter(Capability):
    def __init__(
        self,
        kube: Kube,
        declared: Declared,
        current_term: Callable[[], Term | None],
        *,
        rate: float = RATE,
        burst: int = BURST,
        interval: float = INTERVAL,
    ) -> None:
        self.kube = kube
        self.declared = declared
        self.current_term = current_term
        self.rate, self.burst, self.interval = rate, burst, interval
        self.tokens = float(burst)
        self.refilled = time.monotonic()
        self.sent: dict[Key, Obj] = {}  # the last status written per object (until the watch shows it)
        self.written = 0  # status writes sent (bench reads it)
        self.deferred = 0  # writes a pass left to the next for want of tokens

    def loops(self) -> Sequence[Loop]:
        return (("queue-status", self.run),)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            term = self.current_term()
            leading = term is not None and self.declared.source == source.KUBERNETES
            if not leading and (self.declared.database.ok or not self.declared.problems):
                self.sent.clear()
                continue
            try:
                await self.write(term if leading else None)
            except Exception:  # a bug must not stop status for good
                log.exception("writing queue status failed; trying again")

    def _take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(float(self.burst), self.tokens + (now - self.refilled) * self.rate)
        self.refilled = now
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True

    def desired(self, k: Key, obj: Obj, queues: tuple[dict[str, Any], dict[str, Any]] | None) -> Obj:
        """The status ``obj`` should show; without ``queues`` (no leader: the database is away)
        only its Reconciled condition is said, the rest kept as it is."""
        kind, key = k
        if queues is None:
            have = obj.get("status") or {}
            others = [c for c in have.get("conditions") or [] if isinstance(c, dict) and c.get("type") != RECONCILED]
            return {**have, "conditions": [*others, self._reconciled(k, obj)]}
        by_kind = {"ClusterQueue": queues[0], "LocalQueue": queues[1]}
        want: Obj = dict(by_kind.get(kind, {}).get(key) or {})
        want["conditions"] = [*want.get("conditions", []), self._reconciled(k, obj)]
        return want

    @staticmethod
    def _applied_by_a_leader(obj: Obj) -> bool:
        """A replica that can reach the database applied this generation: a replica that cannot
        has nothing to add (and must not undo it)."""
        generation = int((obj.get("metadata") or {}).get("generation") or 0)
        for c in (obj.get("status") or {}).get("conditions") or []:
            if isinstance(c, dict) and c.get("type") == RECONCILED and c.get("status") == "True":
                return int(c.get("observedGeneration") or 0) >= generation
        return False

    def _reconciled(self, k: Key, obj: Obj) -> dict[str, Any]:
        generation = int((obj.get("metadata") or {}).get("generation") or 0)
        applied = self.declared.applied.get(k, 0)
        problem = self.declared.problems.get(k)
        if problem is not None:
            reason, message = problem
            ok = False
        elif k in self.declared.kept:
            reason, message, ok = "InUse", f"deletion waits: {self.declared.kept[k]}", False
        elif applied < generation:
            reason, message, ok = "Pending", f"generation {generation} is not applied yet", False
        else:
            reason, message, ok = "Applied", f"applied to PostgreSQL and the scheduler (generation {applied})", True
        return {
            "type": RECONCILED,
            "status": "True" if ok else "False",
            "reason": reason,
            "message": message,
            "observedGeneration": applied,
        }

    async def write(self, term: Term | None) -> None:
        """One pass: every object whose status differs, as tokens allow (without a term, only the
        objects the database outage keeps from being applied)."""
        queues = status.statuses(term.scheduler) if term is not None else None
        for k, obj in list(self.declared.objects.items()):
            if queues is None and (k not in self.declared.problems or self._applied_by_a_leader(obj)):
                continue
            have = obj.get("status") or {}
            # times from what we last sent, until the watch shows it (then they are the same)
            want = _with_times(self.sent.get(k) or have, self.desired(k, obj, queues))
            if want == have or self.sent.get(k) == want:
                continue
            if not self._take():
                self.deferred += 1
                return
            meta = obj.get("metadata") or {}
            ref = self.declared.refs[k[0]]
            path = ref.path(meta.get("namespace"), str(meta.get("name")), "status")
            try:
                await self.kube.request("PATCH", path, body={"status": want}, content_type=kube_client.MERGE_PATCH)
            except KubeError as exc:
                if exc.status != 404:  # gone meanwhile, or a CRD without a status subresource
                    log.warning("status of %s/%s: %s", k[0], k[1], exc)
                continue
            self.sent[k] = want
            self.written += 1
