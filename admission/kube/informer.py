"""List + watch of one resource, as client-go's informers: a level the controller can trust.

``Informer.run`` lists every object (page by page), reports what changed since the last
list (including objects deleted while it was not watching), then watches from the list's
resourceVersion with bookmarks. When the server ends the stream it watches again from the
last version it saw; on ``410 Gone`` it lists again and watches from the new version; on a
broken connection or a 429/5xx it waits (exponential backoff, with the server's Retry-After
when there is one) and starts over. ``synced`` is set once the first list has been handed
over, which is what readiness means.

Handlers get ``(type, object)`` with type ``ADDED``, ``MODIFIED`` or ``DELETED``; they are
called inline, in order, and must not block (the controller queues work and returns). Every
object handed over carries the ``apiVersion`` and ``kind`` of the resource it was listed from:
a real API server leaves them off the items of a built-in kind's list, so nothing downstream
may depend on the object's own TypeMeta.

Backoff stays short (``BACKOFF_MAX``): after an API server restart the informers must be back
within a few seconds of it answering, not half a minute later.

An ``optional`` informer watches a kind the cluster may not serve (a CRD not installed: the list
answers 404) or may not let us read (403). Such a kind is *absent*: said once, counted as listed
and empty (so it never holds back readiness or leadership; objects known before are reported
deleted, as a CRD's removal deletes them), and looked at again every ``ABSENT_RETRY`` seconds or
at once when ``recheck`` is called (the controller does when CRDs change). A kind refused with 403
is looked at again with the usual backoff (within ``BACKOFF_MAX`` seconds): right after an API
server restart, or with RBAC applied just after the controller, the refusal passes in seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable

from admission.kube.client import Kube, KubeError, Obj, ResourceRef

log = logging.getLogger(__name__)

Handler = Callable[[str, Obj], None]

BACKOFF_START = 0.2
BACKOFF_MAX = 3.2  # 0.2 s doubled four times; a Retry-After from the server overrides it
ABSENT_RETRY = 60.0


class Informer:
    def __init__(
        self,
        kube: Kube,
        ref: ResourceRef,
        handler: Handler,
        *,
        label_selector: str | None = None,
        watch_timeout: int = 300,
        optional: bool = False,
        announce: bool = True,
    ) -> None:
        self.kube = kube
        self.ref = ref
        self.handler = handler
        self.label_selector = label_selector
        self.watch_timeout = watch_timeout
        self.synced = asyncio.Event()
        self.known: dict[str, tuple[str, str, str]] = {}  # uid -> (namespace, name, resourceVersion)
        self.relists = 0
        self.rewatches = 0
        # optional: a kind the cluster may not serve (a CRD not installed); then 404 is said once
        # and looked at again every ABSENT_RETRY seconds, not warned about every time
        self.optional = optional
        self.announce = announce  # False: the owner says whether the kind is served (INFO here: once per kind)
        self.absent = False
        self.forbidden = False  # absent because the list was refused (403), not because the kind is not served
        self._recheck = asyncio.Event()
        self.listing_since: float | None = None  # monotonic start of the list being handed over, if any

    async def run(self) -> None:
        """Keep the handler up to date until cancelled."""
        backoff = BACKOFF_START
        while True:
            try:
                version = await self._relist()
                if self.absent:
                    log.log(self._level, "%s (%s) is served now", self.ref.kind, self.ref.api_version)
                self.absent = self.forbidden = False
                backoff = BACKOFF_START
                while True:
                    version = await self._watch(version)
                    self.rewatches += 1
            except KubeError as exc:
                if exc.status == 410:
                    log.info("watch of %s expired (410 Gone); listing again", self.ref.plural)
                    continue
                if exc.status in (403, 404) and self.optional:
                    # a refusal is often passing (RBAC applied a moment later, an API server loading
                    # its RBAC cache after a restart): looked at again within seconds, as any error
                    await self._absent(exc, ABSENT_RETRY if exc.status == 404 else backoff)
                    backoff = min(BACKOFF_MAX, backoff * 2)
                    continue
                delay = exc.retry_after if exc.retry_after is not None else backoff
                log.warning("%s informer: %s; retrying in %.1fs", self.ref.plural, exc, delay)
                await asyncio.sleep(delay * (1 + random.random() / 4))
                backoff = min(BACKOFF_MAX, backoff * 2)

    @property
    def _level(self) -> int:
        return logging.INFO if self.announce else logging.DEBUG

    def recheck(self) -> None:
        """Look again now whether an absent kind is served (its CRD may just have been installed)."""
        self._recheck.set()

    async def _absent(self, exc: KubeError, wait: float) -> None:
        what = f"{self.ref.kind} ({self.ref.api_version})"
        if not self.absent:
            if exc.status == 404:
                said = "%s is not served by this cluster (no CRD installed); looking again when CRDs change"
                log.log(self._level, said, what)
            else:
                log.warning("%s may not be listed by this replica (403: %s); check its RBAC", what, exc.message)
        self.absent = True
        self.forbidden = exc.status == 403
        for uid, (namespace, name, _) in list(self.known.items()):  # a CRD's removal deletes its objects
            gone = {"metadata": {"uid": uid, "namespace": namespace, "name": name}}
            self._stamp(gone)
            self._deliver("DELETED", gone)
        self.known = {}
        self.synced.set()
        self._recheck.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait):
                await self._recheck.wait()

    async def _relist(self) -> str:
        self.relists += 1
        started = time.monotonic()
        seen: dict[str, tuple[str, str, str]] = {}
        version = ""
        # (an optional kind's 404 is the answer "not installed", not a failed call)
        expected = (404,) if self.optional else ()
        async for page in self.kube.list_pages(self.ref, label_selector=self.label_selector, expected=expected):
            version = str((page.get("metadata") or {}).get("resourceVersion") or version)
            for obj in page.get("items") or []:
                self._stamp(obj)
                meta = obj.get("metadata") or {}
                uid = str(meta.get("uid"))
                seen[uid] = (str(meta.get("namespace") or ""), str(meta.get("name")), str(meta.get("resourceVersion")))
                old = self.known.get(uid)
                if old is None or old[2] != seen[uid][2]:
                    self.listing_since = started
                    try:
                        self._deliver("ADDED" if old is None else "MODIFIED", obj)
                    finally:
                        self.listing_since = None
        for uid, (namespace, name, _) in list(self.known.items()):
            if uid not in seen:
                gone = {"metadata": {"uid": uid, "namespace": namespace, "name": name}}
                self._stamp(gone)
                self._deliver("DELETED", gone)
        self.known = seen
        self.synced.set()
        return version

    async def _watch(self, version: str) -> str:
        async for event in self.kube.watch(
            self.ref, resource_version=version, timeout_seconds=self.watch_timeout, label_selector=self.label_selector
        ):
            obj = event.get("object") or {}
            meta = obj.get("metadata") or {}
            version = str(meta.get("resourceVersion") or version)
            kind = event.get("type")
            if kind == "BOOKMARK":
                continue
            self._stamp(obj)
            uid = str(meta.get("uid"))
            if kind == "DELETED":
                self.known.pop(uid, None)
            else:
                self.known[uid] = (str(meta.get("namespace") or ""), str(meta.get("name")), version)
            self._deliver(str(kind), obj)
        return version

    def _stamp(self, obj: Obj) -> None:
        """The kind is the resource's, whatever the object says (or does not say)."""
        obj["apiVersion"] = self.ref.api_version
        obj["kind"] = self.ref.kind

    def _deliver(self, kind: str, obj: Obj) -> None:
        try:
            self.handler(kind, obj)
        except Exception:  # a handler bug must not stop the informer for every other object
            log.exception("%s informer: handler failed on %s %s", self.ref.plural, kind, obj.get("metadata"))
