"""Queues declared as Kubernetes objects, reconciled into PostgreSQL by the leading replica.

Kueue users manage ResourceFlavors, ClusterQueues, LocalQueues, Cohorts, priority classes and
admission checks with kubectl, Argo CD or Flux (``kueue.x-k8s.io/v1beta2``). Where the cluster
serves those CRDs the install's configuration source is ``kubernetes``
(``admission.store.source``): each object is watched here and written to PostgreSQL through
the path ``turnstile apply`` uses (validated, one transaction, audited, NOTIFY so the
scheduler sees it at once). The audit names the Kubernetes user: the mutating webhook stamps
``turnstile.dev/edited-by`` from the request's userInfo whenever an object's content changes.

- Every version the watch delivers is applied in order, so two edits in quick succession (kubectl
  and a GitOps tool) are both audited. Status-only and finalizer-only updates are skipped.
- With the database away, versions wait and are applied when it returns; the object's
  ``turnstile.dev/Reconciled`` condition says it is not applied yet (``admission.controller.objects.queuestatus``).
- Deletion is guarded as Kueue's: ResourceFlavors, Topologies, ClusterQueues and LocalQueues carry the
  finalizer ``kueue.x-k8s.io/resource-in-use``, removed (and the row deleted) only once nothing
  uses them (``admission.store.deletion``); a busy ClusterQueue stops admitting meanwhile.
- On becoming ``kubernetes``, what PostgreSQL holds but the cluster does not is created in the
  cluster first (nothing declared before is lost); from then on what the cluster no longer has is
  deleted from PostgreSQL. If the CRDs go away, the source falls back to ``database``.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from admission.controller.capability import Capability, Loop
from admission.controller.readiness import DatabaseHealth
from admission.controller.term import Term
from admission.kube import client as kube_client
from admission.kube.client import Kube, KubeError, Obj, ResourceRef
from admission.kube.informer import Informer
from admission.store import config as config_store
from admission.store import database, deletion, source
from admission.webhook.queue_objects import declared, editor
from queues import errors
from queues.kueue import api, codec, crds

log = logging.getLogger(__name__)

ACTOR = "kubernetes"  # the audit's actor when an object names no editor
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
KEPT_RETRY = 2.0  # seconds between looks at deletions kept by the finalizer (is it still in use?)
BATCH = 500  # object versions per transaction

Key = tuple[str, str]  # (kind, key): key is ``namespace/name`` for a LocalQueue, else the name


def refs() -> dict[str, ResourceRef]:
    """The Kueue kinds PostgreSQL stores, as Kubernetes resources (Topology is served, not stored)."""
    out = {}
    for kind in api.KINDS:
        plural, _, namespaced, _ = crds.KINDS[kind]
        out[kind] = ResourceRef(f"{api.GROUP}/{crds.VERSION}", kind, plural, namespaced=namespaced)
    return out


def key_of(kind: str, obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}" if kind == "LocalQueue" else str(meta.get("name"))


def actor_of(obj: Obj) -> str:
    return editor(obj) or ACTOR


def _has_finalizer(obj: Obj) -> bool:
    return deletion.FINALIZER in ((obj.get("metadata") or {}).get("finalizers") or [])


def _version(obj: Obj) -> object:
    return (obj.get("metadata") or {}).get("resourceVersion")


def _deleting(obj: Obj) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def _content(obj: Obj) -> tuple[Any, ...]:
    """What a reconciliation acts on; an update that changes none of it (status) is not one."""
    return (declared(obj), actor_of(obj), _deleting(obj), _has_finalizer(obj))


class Declared(Capability):
    """The informers of Kueue's kinds (every replica) and the reconciliation (the leader only)."""

    def __init__(
        self,
        kube: Kube,
        sessions: async_sessionmaker[AsyncSession],
        *,
        leading: Callable[[], bool],
        database_health: DatabaseHealth,
    ) -> None:
        self.kube = kube
        self.sessions = sessions
        self.leading = leading
        self.database = database_health
        self.refs = refs()
        self.informers = {
            kind: Informer(kube, ref, functools.partial(self._on_event, kind), optional=True, announce=False)
            for kind, ref in self.refs.items()
        }
        self.objects: dict[Key, Obj] = {}  # what the cluster declares now
        self.pending: dict[Key, list[Obj | None]] = {}  # versions still to reconcile, in order; None: gone
        self.applied: dict[Key, int] = {}  # metadata.generation last reconciled into PostgreSQL
        self.problems: dict[Key, tuple[str, str]] = {}  # why an object is not applied: (reason, message)
        self.kept: dict[Key, str] = {}  # deleted in the cluster, kept by the finalizer: what uses it
        self.stale: set[Key] = set()  # a finalizer patch lost a race: reconcile its next version, whatever it changes
        self.source: str | None = None  # the install's configuration source, as last read
        self.wake = asyncio.Event()
        self._was_leading = False
        self._said_absent = False
        self.reconciled = 0  # object versions reconciled so far

    def optional_informers(self) -> Sequence[Informer]:
        return tuple(self.informers.values())

    def term_began(self, term: Term) -> None:
        self.wake.set()  # the leader reconciles the declared queues

    # ----- what the cluster says -----------------------------------------------------------------

    def _on_event(self, kind: str, event: str, obj: Obj) -> None:
        k = (kind, key_of(kind, obj))
        if event == "DELETED":
            self.objects.pop(k, None)
            self.stale.discard(k)
            if self.informers[kind].absent:
                return  # the CRD is gone (the source falls back to database): PostgreSQL keeps the object
            self.pending.setdefault(k, []).append(None)
        else:
            old = self.objects.get(k)
            self.objects[k] = obj
            if old is not None and _content(old) == _content(obj) and k not in self.stale:
                return  # a status or bookkeeping update
            self.stale.discard(k)
            self.pending.setdefault(k, []).append(obj)
        self.wake.set()

    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self.informers.values())

    def served(self) -> bool:
        """Every stored kind is served by the cluster (Kueue's CRDs installed) and listed."""
        return self.synced() and not any(i.absent for i in self.informers.values())

    # ----- running -------------------------------------------------------------------------------

    def loops(self) -> Sequence[Loop]:
        return (("declared-queues", self.run),)

    async def run(self) -> None:
        tasks = [asyncio.create_task(i.run(), name=f"informer-{i.ref.plural}") for i in self.informers.values()]
        backoff = 0.2
        try:
            while True:
                try:
                    async with asyncio.timeout(KEPT_RETRY if self.kept else None):
                        await self.wake.wait()
                except TimeoutError:  # still in use? (workloads finished, a queue stopped naming a flavor)
                    for k in self.kept:
                        self.pending.setdefault(k, []).append(self.objects.get(k))
                self.wake.clear()
                try:
                    await self.step()
                    backoff = 0.2
                    continue
                except database.ERRORS as exc:
                    cause = database.describe_error(exc)
                    self.database.failed("reconciling declared queues", cause)
                    for k in self.pending:
                        self.problems[k] = ("DatabaseUnavailable", f"not applied yet, the database is away: {cause}")
                except Exception:  # a bug must not stop reconciliation for good
                    log.exception("reconciling declared queues failed; trying again")
                await asyncio.sleep(backoff)
                backoff = min(5.0, backoff * 2)
                self.wake.set()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def step(self) -> None:
        """One round: the source, and (leading, source kubernetes) every pending version."""
        leading = self.leading()
        if not leading or not self.synced():
            self._was_leading = False
            if self.database.ok:
                self.pending.clear()  # the leader reconciles (a new leader, everything from its own cache)
            else:  # no replica can apply them now: the status says so (``queuestatus``)
                for k in self.pending:
                    self.problems[k] = ("DatabaseUnavailable", "not applied yet: the database cannot be reached")
            return
        if any(i.forbidden for i in self.informers.values()):
            # Not "not served": the replica may not list them (RBAC missing, or the API server's first
            # second while RBAC loads). Change nothing, apply nothing; the informers look again.
            self._was_leading = False
            return
        if self.source is None or not self._was_leading:  # only this leader changes it while it leads
            async with database.transaction(self.sessions) as session:
                self.source = await source.get(session)
        if not self.served():
            if not self._said_absent:
                absent = sorted(kind for kind, i in self.informers.items() if i.absent)
                log.info(
                    "Kueue's CRDs are not served (%s): the queue configuration is edited in PostgreSQL "
                    "(turnstile apply); install manifests/base/crds.yaml to declare queues as Kubernetes objects",
                    ", ".join(absent),
                )
                self._said_absent = True
            if self.source == source.KUBERNETES:
                async with database.transaction(self.sessions) as session:
                    await source.put(session, source.DATABASE, actor=ACTOR, why="Kueue's CRDs are not served")
                self.source = source.DATABASE
                log.warning("Kueue's CRDs are not served: the queue configuration is edited in PostgreSQL again")
            self.pending.clear()
            return
        self._said_absent = False
        if self.source != source.KUBERNETES:
            if not await self._export():
                return
            self.source = source.KUBERNETES
            self._was_leading = False
        if not self._was_leading:
            await self._full()  # a new term, or a new source: everything once
            self._was_leading = True
        await self._drain()

    async def _export(self) -> bool:
        """Create in the cluster what PostgreSQL holds and the cluster lacks, then declare the
        source ``kubernetes``; False (tried again later) if the cluster refused any."""
        async with database.transaction(self.sessions) as session:
            stored = {kind: await config_store.list_objects(session, kind) for kind in self.refs}
        missing = [obj for kind, objs in stored.items() for obj in objs if (kind, obj.key) not in self.objects]
        for obj in missing:
            body = codec.to_manifest(obj, version=crds.VERSION)
            # as ``kubectl apply`` would have left it: a later ``kubectl apply`` of the same YAML
            # merges (three-way) without warning that the annotation is missing
            applied = json.dumps(body, separators=(",", ":")) + "\n"
            body["metadata"].setdefault("annotations", {})[LAST_APPLIED] = applied
            try:
                await self.kube.create(self.refs[obj.kind], obj.metadata.namespace, body)
            except KubeError as exc:
                if exc.status != 409:  # 409: created meanwhile
                    log.warning("exporting %s/%s to the cluster failed: %s; trying again", obj.kind, obj.key, exc)
                    return False
        async with database.transaction(self.sessions) as session:
            await source.put(
                session,
                source.KUBERNETES,
                actor=ACTOR,
                why=f"Kueue's CRDs are served; {len(missing)} object(s) exported from PostgreSQL to the cluster",
            )
        log.info("the queue configuration is declared as Kubernetes objects now (%d exported)", len(missing))
        return True

    async def _full(self) -> None:
        """Every declared object to reconcile; and what PostgreSQL holds that the cluster does not
        (deleted while no replica led) to delete."""
        for k, obj in self.objects.items():
            self.pending.setdefault(k, []).append(obj)
        async with database.transaction(self.sessions) as session:
            for kind in self.refs:
                for stored in await config_store.list_objects(session, kind):
                    if (kind, stored.key) not in self.objects:
                        self.pending.setdefault((kind, stored.key), []).append(None)

    async def _drain(self) -> None:
        while self.pending:
            batch: list[tuple[Key, Obj | None]] = []
            taken: dict[Key, list[Obj | None]] = {}
            for k in list(self.pending):
                versions = self.pending.pop(k)
                taken[k] = versions
                batch.extend((k, v) for v in versions)
                if len(batch) >= BATCH:
                    break
            actions: list[tuple[str, Key, Obj]] = []
            try:
                async with database.transaction(self.sessions) as session:
                    for k, obj in batch:
                        action = await self._reconcile(session, k, obj)
                        if action is not None and obj is not None:
                            actions.append((action, k, obj))
            except BaseException:
                for k, versions in taken.items():  # back in front, in order
                    self.pending[k] = versions + self.pending.get(k, [])
                raise
            self.database.succeeded()
            for k, obj in batch:
                if obj is not None:
                    self.applied[k] = int((obj.get("metadata") or {}).get("generation") or 0)
            self.reconciled += len(batch)
            for action, k, obj in actions:
                await self._finalizer(action, k, obj)

    async def _reconcile(self, session: AsyncSession, k: Key, obj: Obj | None) -> str | None:
        """One version into PostgreSQL; the finalizer change it asks for (add | remove), if any."""
        kind, key = k
        guarded = kind in deletion.GUARDED
        if obj is None or (_deleting(obj) and guarded and _has_finalizer(obj)):
            why = await deletion.in_use(session, kind, key)
            if why is not None:
                if kind == "ClusterQueue":
                    await deletion.mark_deleting(session, key)
                self.kept[k] = why
                return None
            self.kept.pop(k, None)
            self.problems.pop(k, None)
            if await config_store.get_row(session, kind, key) is not None:
                uid = str((obj.get("metadata") or {}).get("uid")) if obj is not None else None
                # who deleted it (the DELETE review's user), else its last editor
                actor = await deletion.requester(session, kind, key, uid) or (actor_of(obj) if obj else ACTOR)
                await deletion.delete_object(session, kind, key, actor=actor, guard=False)
            return "remove" if obj is not None else None
        if _deleting(obj):
            return None  # another finalizer keeps it; it goes when the API server deletes it
        try:
            parsed = codec.parse(declared(obj))
        except errors.Invalid as exc:
            message = "; ".join(str(e) for e in exc.errors)
            self.problems[k] = ("Invalid", message)
            log.warning("%s/%s is invalid and not applied: %s", kind, key, message)
            return None
        await config_store.apply(session, [parsed], actor=actor_of(obj))
        self.problems.pop(k, None)
        return "add" if guarded and not _has_finalizer(obj) else None

    async def _finalizer(self, action: str, k: Key, obj: Obj) -> None:
        """Add or remove ``kueue.x-k8s.io/resource-in-use``, guarded by the version we read (a
        conflict means a newer version is on its way, reconciled in turn)."""
        kind, _ = k
        meta = obj.get("metadata") or {}
        finalizers = list(meta.get("finalizers") or [])
        ops: list[Obj] = [{"op": "test", "path": "/metadata/resourceVersion", "value": meta.get("resourceVersion")}]
        if action == "add":
            if finalizers:
                ops.append({"op": "add", "path": "/metadata/finalizers/-", "value": deletion.FINALIZER})
            else:
                ops.append({"op": "add", "path": "/metadata/finalizers", "value": [deletion.FINALIZER]})
        else:
            at = finalizers.index(deletion.FINALIZER)
            ops.append({"op": "remove", "path": f"/metadata/finalizers/{at}"})
        try:
            await self.kube.patch(
                self.refs[kind], meta.get("namespace"), str(meta.get("name")), ops, content_type=kube_client.JSON_PATCH
            )
        except KubeError as exc:
            if exc.status in (409, 422):
                # A newer version was written meanwhile (a status write, say, which is no content
                # change and so is not reconciled by itself): decide again on it, now if the
                # informer has it, else when it comes (never a retry of the version that failed).
                latest = self.objects.get(k)
                if latest is not None and _version(latest) != meta.get("resourceVersion"):
                    self.pending.setdefault(k, []).append(latest)
                    self.wake.set()
                else:
                    self.stale.add(k)
            elif exc.status not in (404, 409, 422):
                log.warning("%s finalizer of %s/%s failed: %s; trying again", action, kind, k[1], exc)
                self._was_leading = False  # the next round reconciles everything, this one included
