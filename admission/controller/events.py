"""Kubernetes Events on the jobs, so ``kubectl describe job`` says what Turnstile decided.

``Pending`` when a job first waits, whenever its reason changes, and for new numbers in its
message at most once a minute (the core reports only changes, so a queue of 100,000 waiting
jobs posts nothing while nothing changes), ``Admitted``
(ClusterQueue and flavors), ``Preempted`` (by whom, why), ``Evicted`` (other reasons) and
``Finished``. Events are posted by a few background workers from a bounded queue: the
scheduling step never waits on the API server, and if the API server cannot keep up, new
events are dropped (and counted) rather than memory growing without end. Like client-go's
event recorder, a replica also limits its rate (a token bucket: ``RATE`` per second, bursts of
``BURST``): a quota raise that admits 50,000 jobs at once must not spend the API server and the
controller on 50,000 Events. Events are a courtesy to the user; the store is the record.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from admission.controller.workqueue import stop_workers
from admission.jobs.base import JobView
from admission.kube.client import EVENTS, Kube, KubeError, ResourceRef

log = logging.getLogger(__name__)

COMPONENT = "turnstile"
MAX_QUEUED = 10_000
RATE = 100.0  # events per second, sustained
BURST = 1000
REFRESH = 60.0  # seconds: the most often a waiting job's Pending event is posted for new numbers alone


@dataclass(frozen=True, slots=True)
class Event:
    involved: dict[str, str]  # involvedObject: apiVersion, kind, name, namespace (where it has one), uid
    namespace: str  # the Event's own (the involved object's, or ``default`` for a cluster-scoped one)
    type: str  # Normal | Warning
    reason: str
    message: str


class EventPoster:
    def __init__(
        self, kube: Kube, *, instance: str, workers: int = 4, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.kube = kube
        self.clock = clock  # (the rate limit's; tests give a still one)
        self.instance = instance
        self.queue: asyncio.Queue[Event] = asyncio.Queue(maxsize=MAX_QUEUED)
        self.workers = workers
        self.tasks: list[asyncio.Task[None]] = []
        self.posted = 0
        self.dropped = 0
        # job uid -> (reason, message, when) of its last Pending event
        self.last_pending: dict[str, tuple[str, str, float]] = {}
        # job uid -> the newer numbers not yet posted, and where: (ref, object name, namespace, object
        # uid, reason, message): no JobView kept (it would keep an old version of the job alive)
        self.deferred: dict[str, tuple[ResourceRef, str, str, str, str, str]] = {}
        self.tokens = float(BURST)
        self.refilled = clock()

    def start(self) -> None:
        self.tasks = [asyncio.create_task(self._work(), name=f"events-{i}") for i in range(self.workers)]
        self.tasks.append(asyncio.create_task(self._refreshing(), name="events-refresh"))

    async def _refreshing(self) -> None:
        while True:
            await asyncio.sleep(REFRESH / 12)
            self.refresh()

    async def stop(self) -> None:
        await stop_workers(self.tasks)
        self.tasks = []

    def pending(self, view: JobView | None, reason: str, message: str) -> None:
        """A ``Pending`` event when the job first waits, whenever the *reason* changes, and when only
        the message changed (its numbers: "4 more needed") at most once per ``REFRESH`` seconds, so
        the newest Event's numbers are never older than that and a queue whose numbers change each
        step does not flood the API server."""
        if view is None:
            return
        last = self.last_pending.get(view.uid)
        now = self.clock()
        if last is not None and last[0] == reason and last[1] == message:
            self.deferred.pop(view.uid, None)
            return
        if last is not None and last[0] == reason and now - last[2] < REFRESH:
            self.deferred[view.uid] = (  # (posted by ``refresh`` when due)
                view.integration.ref,
                view.object_name,
                view.namespace,
                view.object_uid,
                reason,
                message,
            )
            return
        self.deferred.pop(view.uid, None)
        self.last_pending[view.uid] = (reason, message, now)
        self.post(view, "Pending", f"{reason}: {message}")

    def refresh(self) -> None:
        """Post the deferred messages whose job's last Pending event is ``REFRESH`` seconds old, so
        numbers that changed and then stood still are not left stale."""
        now = self.clock()
        for uid, (ref, name, namespace, object_uid, reason, message) in list(self.deferred.items()):
            last = self.last_pending.get(uid)
            if last is None or now - last[2] >= REFRESH:
                del self.deferred[uid]
                self.last_pending[uid] = (reason, message, now)
                self._queue(Event(_involved(ref, name, namespace, object_uid), namespace, "Normal", "Pending",
                                  f"{reason}: {message}"))  # fmt: skip

    def forget(self, uid: str) -> None:
        self.last_pending.pop(uid, None)
        self.deferred.pop(uid, None)

    def post(self, view: JobView | None, reason: str, message: str, *, type: str = "Normal") -> None:
        """An Event on a job (or on a plain pod group's first pod)."""
        if view is None:
            return
        involved = _involved(view.integration.ref, view.object_name, view.namespace, view.object_uid)
        self._queue(Event(involved, view.namespace, type, reason, message))

    def post_on(
        self,
        api_version: str,
        kind: str,
        name: str,
        namespace: str | None,
        reason: str,
        message: str,
        *,
        type: str,
        uid: str | None = None,
    ) -> None:
        """An Event on any object (a ClusterQueue, a Namespace, a Workload: with its ``uid``, as
        ``kubectl describe`` finds them). A cluster-scoped object's Events live in ``default``, as
        the API server requires of an Event whose involvedObject has no namespace."""
        involved = {"apiVersion": api_version, "kind": kind, "name": name}
        if namespace:
            involved["namespace"] = namespace
        if uid:
            involved["uid"] = uid
        self._queue(Event(involved, namespace or "default", type, reason, message))

    def _queue(self, event: Event) -> None:
        now = self.clock()
        self.tokens = min(float(BURST), self.tokens + (now - self.refilled) * RATE)
        self.refilled = now
        if self.tokens < 1:
            self.dropped += 1
            return
        self.tokens -= 1
        try:
            self.queue.put_nowait(dataclasses.replace(event, message=event.message[:1024]))
        except asyncio.QueueFull:
            self.dropped += 1

    async def _work(self) -> None:
        while True:
            event = await self.queue.get()
            try:
                await self._send(event)
                self.posted += 1
            except KubeError as exc:
                log.debug("event %s for %s not posted: %s", event.reason, event.involved["name"], exc)

    async def _send(self, event: Event) -> None:
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{event.involved['name']}.", "namespace": event.namespace},
            "involvedObject": event.involved,
            "reason": event.reason,
            "message": event.message,
            "type": event.type,
            "source": {"component": COMPONENT},
            "reportingComponent": f"{COMPONENT}.dev/controller",
            "reportingInstance": self.instance,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        await self.kube.send("POST", EVENTS.path(event.namespace), body=body)  # (the Event made is not read)


async def events_of(kube: Kube, view: JobView | None, key: str) -> list[dict[str, Any]]:
    """The Kubernetes Events on workload ``key``'s job (or first pod, for a pod group), oldest first."""
    namespace, _, name = key.partition("/")
    if view is not None:
        namespace, name = view.namespace, view.object_name
    answer = await kube.request("GET", EVENTS.path(namespace), query={"fieldSelector": f"involvedObject.name={name}"})
    out = [
        {
            "at": e.get("lastTimestamp") or e.get("eventTime") or (e.get("metadata") or {}).get("creationTimestamp"),
            "type": e.get("type"),
            "reason": e.get("reason"),
            "message": e.get("message"),
            "count": e.get("count") or 1,
        }
        for e in answer.get("items") or []
        if isinstance(e, dict)
    ]
    return sorted(out, key=lambda e: str(e["at"] or ""))


def _involved(ref: ResourceRef, name: str, namespace: str, uid: str) -> dict[str, str]:
    """An Event's ``involvedObject``: the job (or a pod group's first pod)."""
    return {"apiVersion": ref.api_version, "kind": ref.kind, "name": name, "namespace": namespace, "uid": uid}
