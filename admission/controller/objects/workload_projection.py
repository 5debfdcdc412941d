"""Workloads as Kueue's own objects: one ``workloads.kueue.x-k8s.io`` per queued job, kept by the leader.

Why: kueuectl, KueueViz and every script or dashboard built on Kueue read Workload objects.
PostgreSQL stays the source of truth; these objects are its projection (``spec`` and ``status``
as ``admission.store.workload_objects`` reads them, named ``job-<name>-<uid prefix>``, owned by
the job so Kubernetes' garbage collector removes them with it).

Kept current as the queue objects' status is (``admission.controller.objects.queuestatus``): each step
marks the jobs it touched; a pass every ``INTERVAL`` seconds reads those workloads from the
store in one query and writes only what differs from what the cluster shows (the informer's
copy, kept as digests: ``Shown``): a create, a merge patch of ``spec`` (its ``active``; an elastic
job's ``podSets`` counts when it is resized, ``workload_shown``), a patch
of the ``status`` subresource. Objects written are rate-limited by a token bucket (``RATE`` per
second, bursts of ``BURST``); what a pass could not write waits for the next. A new term marks every job, and
every object the informer lists, so whatever was lost while no one led (an object deleted, a
write that failed) is rebuilt; an object with no workload behind it (its job gone, or finished
longer ago than the store shows) is deleted.

Kueue's Events go on the objects too, from their conditions' transitions (``_post``): beside the
job's own, so ``kubectl describe workload`` tells what Kueue's would.

What a person may change is ``spec.active`` (the webhook turns it into a stop/resume request,
``admission.store.activity``, and refuses every other ``spec`` change but an elastic Workload's
pod counts, which this projection writes: another's edit of them is written over). An object someone deletes
while its workload is live is made again at the next pass, and the step is told (``lost``): as
Kueue, a workload that held quota is evicted (``NoMatchingWorkload``) and queued again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import itertools
import logging
import time
from collections import Counter as Tally
from collections.abc import Callable, Iterable, Sequence

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from admission.controller.capability import Capability, Loop, StepContext, Stepped
from admission.controller.events import EventPoster
from admission.controller.objects.workload_shown import Shown, desired
from admission.controller.term import Term
from admission.controller.watch.jobcache import JobCache
from admission.kube import client as kube_client
from admission.kube.client import Kube, KubeError, Obj, ResourceRef
from admission.kube.informer import Informer
from admission.store import database
from admission.store import workload_objects as store
from admission.store.workload_shape import JOB_UID_LABEL
from queues.cycle.decisions import Decision
from queues.kueue import workload_crd
from queues.podsets import jobs

log = logging.getLogger(__name__)

WORKLOADS = ResourceRef(f"{workload_crd.GROUP}/{workload_crd.VERSION}", workload_crd.KIND, workload_crd.PLURAL)
API_VERSION = WORKLOADS.api_version
INTERVAL = 0.5  # seconds between passes
RATE = 500.0  # objects looked at and written per second, sustained (Kueue's client allows 1,000 requests/s)
BURST = 1000
PAGE = 500  # workloads read from the store per query
WORKERS = 16  # objects written at once (one object's writes are in order; the API server takes many)


class Projection(Capability):
    """The leader's Workload objects: marked by steps, written in coalesced, rate-limited passes."""

    def __init__(
        self,
        kube: Kube,
        sessions: async_sessionmaker[AsyncSession],
        jobs: JobCache,
        current_term: Callable[[], Term | None],
        *,
        wake_step: Callable[[], None] = lambda: None,
        events: EventPoster | None = None,
        created: Callable[[str, float], None] = lambda _kind, _seconds: None,
        rate: float = RATE,
        burst: int = BURST,
        pods_ready: bool = False,
    ) -> None:
        self.kube, self.sessions, self.jobs, self.current_term = kube, sessions, jobs, current_term
        self.wake_step = wake_step  # a step is due: a Workload object someone else deleted (``deleted``)
        self.deleted: dict[str, None] = {}  # job uids whose object someone else deleted: the next step asks
        self.events = events  # Kueue's Events on the objects, from their conditions' transitions
        self.created = created  # told (job kind, seconds) from a job's creation to its object's
        self.pods_ready = pods_ready  # waitForPodsReady is on: the objects carry Kueue's PodsReady condition
        self.deleting: set[str] = set()  # job uids whose object this replica is deleting
        self.was_absent = False  # the CRD was not served at the last pass
        self.informer = Informer(kube, WORKLOADS, self._on_object, label_selector=JOB_UID_LABEL, optional=True)
        self.objects: dict[str, Shown] = {}  # job uid -> its Workload object as the cluster has it
        # the finished objects there are, per (cluster_queue, namespace, queue name): Kueue's
        # ``kueue_finished_workloads`` and ``kueue_local_queue_finished_workloads`` gauges
        self.finished: Tally[tuple[str, str, str]] = Tally()
        self.by_name: dict[tuple[str, str], str] = {}  # (namespace, name) -> job uid
        self.dirty: dict[str, None] = {}  # job uids whose object may differ from the store
        self.wake = asyncio.Event()
        self.rate, self.burst = rate, burst
        self.tokens, self.refilled = float(burst), time.monotonic()
        self.writes = 0  # objects created, patched or deleted (bench: the write rate)
        # job uid -> the object as this replica last wrote it, until the watch brings that write back
        self.written: dict[str, Shown] = {}

    # ----- inputs ----------------------------------------------------------------------------------

    def mark(self, uids: Iterable[str]) -> None:
        """These jobs' workloads may have changed: their objects are looked at in the next pass."""
        before = len(self.dirty)
        self.dirty.update(dict.fromkeys(uids))
        if len(self.dirty) != before:
            self.wake.set()

    def term_began(self, term: Term) -> None:
        """Rebuild: every workload of the term, and every object listed (orphans are deleted)."""
        self.mark(term.rows)
        self.mark(list(self.objects))

    def optional_informers(self) -> Sequence[Informer]:
        return (self.informer,)

    def stepped(self, step: StepContext, outcome: Stepped) -> None:
        """The objects of what the store now holds differently: jobs stored, finished or gone, and
        workloads decided, told or (no longer) preempting; not every job event (most are status
        updates that change nothing an object shows)."""
        rows = step.term.by_key
        self.mark([*outcome.stored, *(row.uid for key in outcome.changed if (row := rows.get(key)) is not None)])

    def _on_object(self, kind: str, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        where = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        # (a deletion noticed on a relist carries only namespace and name: its job by name)
        label = str((meta.get("labels") or {}).get(JOB_UID_LABEL) or "")
        uid = workload_crd.job_uid_of(label) if label else self.by_name.get(where, "")
        if not uid:
            return
        if kind == "DELETED":
            if (known := self.objects.get(uid)) is not None and known.name == where[1]:
                self._keep(uid, None)
            self.by_name.pop(where, None)
            if uid in self.deleting:
                self.deleting.discard(uid)
            elif not self.informer.absent:  # (not the CRD uninstalled, nor our list refused)
                self.deleted[uid] = None
                self.wake_step()
            self.mark([uid])  # (made again if its workload is live)
            return
        shown = Shown.of(obj)
        self._keep(uid, shown)
        self.by_name[where] = uid
        # What this replica wrote is kept only until the informer's copy catches up (then it is that copy).
        if not shown.same(self.written.pop(uid, None)):
            self.mark([uid])  # changed by someone else (or not written by this replica): look again

    def _keep(self, uid: str, shown: Shown | None) -> None:
        """The object of job ``uid`` is now ``shown`` (None: gone), its finished count kept with it."""
        old = self.objects.pop(uid, None) if shown is None else self.objects.get(uid)
        if old is not None and old.finished is not None:
            self.finished[old.finished] -= 1
            if not self.finished[old.finished]:
                del self.finished[old.finished]
        if shown is not None:
            self.objects[uid] = shown
            if shown.finished is not None:
                self.finished[shown.finished] += 1

    # ----- passes ----------------------------------------------------------------------------------

    def decide(self, step: StepContext) -> Sequence[Decision]:
        """A workload whose object someone deleted is gone, as in Kueue (``Scheduler.workload_lost``);
        a job being deleted takes its Workload with it, which is no loss."""
        deleted, self.deleted = self.deleted, {}
        term, out = step.term, []
        for uid in deleted:
            row = term.rows.get(uid)
            if row is None or uid not in self.jobs.views:
                continue
            if (evict := term.scheduler.retries.workload_lost(row.key)) is not None:
                out.append(evict)
        return out

    def loops(self) -> Sequence[Loop]:
        return (("informer-workloads", self.informer.run), ("workload-objects", self.run))

    async def run(self) -> None:
        """Passes while leading, until cancelled; a failed pass is logged and its jobs kept dirty."""
        while True:
            await self.wake.wait()
            self.wake.clear()
            await asyncio.sleep(INTERVAL)
            term = self.current_term()
            if self.informer.absent:
                self.dirty.clear()  # no CRD: nothing to keep
                self.was_absent = True
                continue
            if term is None or not self.informer.synced.is_set():
                continue  # (the next term marks everything again)
            if self.was_absent:  # the CRD was installed meanwhile: every workload's object is due
                self.was_absent = False
                self.term_began(term)
            try:
                await self.write(term)
            except database.ERRORS as exc:
                log.warning("Workload objects not written (the database): %s", database.describe_error(exc))
                await asyncio.sleep(1.0)
                self.wake.set()
            except Exception:  # a bug must not stop the projection for good
                log.exception("writing Workload objects failed")
                await asyncio.sleep(1.0)
                self.wake.set()

    def _take(self) -> list[str]:
        now = time.monotonic()
        self.tokens = min(float(self.burst), self.tokens + (now - self.refilled) * self.rate)
        self.refilled = now
        n = min(len(self.dirty), int(self.tokens), PAGE)
        self.tokens -= n  # (a workload's object costs one to three writes: at most RATE objects a second)
        uids = list(itertools.islice(self.dirty, n))
        for uid in uids:
            del self.dirty[uid]
        return uids

    async def write(self, term: Term) -> None:
        """One pass: the marked jobs' objects made to match the store (as many as the bucket allows)."""
        while self.current_term() is term and (uids := self._take()):
            async with database.transaction(self.sessions) as session:
                found = await store.by_job_uids(session, uids, pods_ready=self.pods_ready)
            gate = asyncio.Semaphore(WORKERS)
            # (one object's writes stay in order; WORKERS objects are written at once)
            await asyncio.gather(*(self._one(uid, found.get(uid), gate) for uid in uids))
            if self.dirty:
                self.wake.set()
                return

    async def _one(self, uid: str, want: Obj | None, gate: asyncio.Semaphore) -> None:
        async with gate:
            try:
                if want is None or (view := self.jobs.views.get(uid)) is None:
                    await self._delete(uid)
                else:
                    elastic = view.info is not None and view.info.elastic
                    await self._put(uid, desired(want, view.pods, elastic=elastic))
            except KubeError as exc:
                if exc.status in (0, 409, 429) or exc.status >= 500:
                    self.dirty[uid] = None  # (tried again in a later pass)
                else:
                    log.warning("Workload object of job %s: %s", uid, exc)

    async def _delete(self, uid: str) -> None:
        have = self.objects.get(uid)
        if have is None:
            return
        self.writes += 1
        self.deleting.add(uid)
        self.written.pop(uid, None)
        try:
            await self.kube.delete(WORKLOADS, have.namespace, have.name)
        except KubeError as exc:
            self.deleting.discard(uid)  # (404: already gone, its DELETED event said so)
            if exc.status != 404:
                raise

    async def _put(self, uid: str, want: Obj) -> None:
        meta, status = want["metadata"], want["status"]
        namespace, name, annotations = meta["namespace"], meta["name"], meta.get("annotations") or {}
        wanted = Shown.of(want)
        have = self.objects.get(uid)
        mine = self.written.get(uid)
        if have is not None and mine is not None and mine.uid == have.uid:
            have = mine  # (what this replica wrote last: the informer's copy may not have caught up)
        if have is not None and have.name == name and have.fixed != wanted.fixed and jobs.ELASTIC_JOB in annotations:
            # an elastic job resized: its pod counts patched in place, as Kueue's ``ApplyPodSetCounts``
            # (the webhook refuses any other spec change: then it is made again, below)
            self.writes += 1
            try:
                have = Shown.of(
                    await self.kube.patch(WORKLOADS, namespace, name, {"spec": {"podSets": want["spec"]["podSets"]}})
                )
            except KubeError as exc:
                if exc.temporary:
                    raise
        if have is not None and (have.name != name or have.fixed != wanted.fixed):
            # Its job now asks for other pod sets (or priority, queue): as Kueue, a new Workload (the
            # webhook lets nobody change a Workload's spec but its active flag, this replica neither).
            await self._delete(uid)
            self._keep(uid, None)
            have = None
        if have is None:
            self.writes += 1
            have = Shown.of(await self.kube.create(WORKLOADS, namespace, {**want, "status": {}}))
            self._creation_latency(uid)
        if have.owners != wanted.owners:  # (a pod group's pods replaced: its owners follow, as Kueue's)
            self.writes += 1
            have = Shown.of(
                await self.kube.patch(
                    WORKLOADS, namespace, name, {"metadata": {"ownerReferences": meta["ownerReferences"]}}
                )
            )
        if have.active != wanted.active:
            self.writes += 1
            have = Shown.of(await self.kube.patch(WORKLOADS, namespace, name, {"spec": {"active": wanted.active}}))
        if have.status != wanted.status:
            self.writes += 1
            patch = {**{k: None for k in have.status_keys - wanted.status_keys}, **status}
            path = WORKLOADS.path(namespace, name, "status")
            await self.kube.send("PATCH", path, body={"status": patch}, content_type=kube_client.MERGE_PATCH)
            self._post(namespace, name, have, status)
        self.written[uid] = dataclasses.replace(wanted, uid=have.uid)

    def _creation_latency(self, uid: str) -> None:
        view = self.jobs.views.get(uid)
        if view is not None and view.created:
            try:
                created = dt.datetime.fromisoformat(view.created.replace("Z", "+00:00")).timestamp()
            except ValueError:
                return
            kind = view.info.kind if view.info is not None else view.integration.ref.kind
            self.created(kind, time.time() - created)

    def _post(self, namespace: str, name: str, before: Shown, status: Obj) -> None:
        """Kueue's Events on a Workload, for the conditions its ``status`` (as just patched: a merge
        patch replaces the conditions whole) changed: ``QuotaReserved``, ``Admitted``, ``Preempted``,
        ``EvictedDueTo<reason>`` when they become true, ``Pending`` (a Warning) when the reason it
        waits for changes (not for new numbers in the message)."""
        if self.events is None:
            return
        old = {kind: (value, reason) for kind, value, reason in before.conditions}
        for c in status.get("conditions") or []:
            if old.get(c["type"]) == (c["status"], c["reason"]):
                continue
            kind, reason = c["type"], c["reason"]
            if c["status"] == "True" and kind in ("QuotaReserved", "Admitted", "Preempted"):
                event, type_ = kind, "Normal"
            elif c["status"] == "True" and kind == "Evicted":
                event, type_ = f"EvictedDueTo{reason}", "Normal"
            elif c["status"] == "False" and kind == "QuotaReserved":
                event, type_ = "Pending", "Warning"
            else:
                continue
            message = c["message"]
            if kind == "Admitted":  # (Kueue's words)
                message = f"Admitted by ClusterQueue {(status.get('admission') or {}).get('clusterQueue')}"
            self.events.post_on(
                API_VERSION, workload_crd.KIND, name, namespace, event, message, type=type_, uid=before.uid
            )
