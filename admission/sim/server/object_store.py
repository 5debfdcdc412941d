"""The simulated API server's object store: every object by kind, namespace and name, with
Kubernetes' semantics: resourceVersion, uid, generation, conflicts, finalizers, namespaces that
must exist, label indexes, pages, and the history a watch resumes from.

One global, increasing resourceVersion orders every change. A bounded history of changes lets a
watch resume from any recent version; an older version gets 410 Gone, as after etcd compaction.
"""

from __future__ import annotations

import asyncio
import bisect
import builtins
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from admission.sim.server.objects import (
    NAMESPACE_NAME_LABEL,
    ApiError,
    Event,
    Obj,
    Resource,
    clone,
    field_matcher,
    not_found,
    parse_label_selector,
    timestamp,
)

HISTORY = 10_000


@dataclass(slots=True, eq=False)  # identity: each open watch is its own subscriber
class Watcher:
    resource: Resource
    namespace: str | None
    queue: asyncio.Queue[Event | None] = field(default_factory=asyncio.Queue)


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a list: the copied items, the store's resourceVersion, the key of the last item
    when more match after it (else None), and how many keys are left unread after it."""

    items: builtins.list[Obj]
    rv: int
    last: tuple[str, str] | None
    remaining: int


class ObjectStore:
    """Every object of the simulated cluster, keyed by (resource, namespace, name).

    A stored object is never changed in place: every write stores a new one. So watch events
    share the stored objects (no copy per event); reads hand out copies, since callers change them.
    """

    def __init__(self) -> None:
        self.rv = 1
        self.changed_at = time.monotonic()  # when the last write was (engine cluster waits for quiet)
        self.objects: dict[tuple[Resource, str, str], Obj] = {}
        self.by_resource: dict[Resource, dict[tuple[str, str], Obj]] = {}  # the same objects, per resource
        self._order: dict[Resource, builtins.list[tuple[str, str]]] = {}  # their keys sorted, dropped when keys change
        self.history: deque[Event] = deque(maxlen=HISTORY)
        self.watchers: list[Watcher] = []
        self.horizon = 0  # watches from a resourceVersion older than this get 410 Gone
        # label -> value -> key -> object, for the labels registered with ``index_label``
        self.label_index: dict[str, dict[str, dict[tuple[Resource, str, str], Obj]]] = {}

    def index_label(self, label: str) -> None:
        """Keep an index of objects by the value of ``label`` (as an informer's indexer would)."""
        index = self.label_index.setdefault(label, {})
        for key, obj in self.objects.items():
            self._index_one(index, label, key, obj)

    def labelled(self, res: Resource, label: str, value: str) -> builtins.list[Obj]:
        """The stored objects of ``res`` whose ``label`` is ``value`` (an indexed label), uncopied:
        callers read them and must ``clone`` before changing anything."""
        found = self.label_index[label].get(value, {})
        return [obj for key, obj in found.items() if key[0] == res]

    # ----- reads ---------------------------------------------------------------------------

    def get(self, res: Resource, namespace: str, name: str) -> Obj:
        obj = self.objects.get((res, namespace if res.namespaced else "", name))
        if obj is None:
            raise not_found(res, name)
        return clone(obj)

    def list(
        self, res: Resource, namespace: str | None, *, labels: str = "", fields: str = ""
    ) -> tuple[builtins.list[Obj], int]:
        page = self.page(res, namespace, labels=labels, fields=fields)
        return page.items, page.rv

    def page(
        self,
        res: Resource,
        namespace: str | None,
        *,
        labels: str = "",
        fields: str = "",
        after: tuple[str, str] | None = None,
        limit: int = 0,
    ) -> Page:
        """Up to ``limit`` (0: all) matching objects in key order, starting after the key ``after``.

        As the real server's storage, a page walks the keys from where the last one ended and
        copies only what it returns: listing 100,000 objects in pages of 500 copies each object
        once (copying every object per page made ``kubectl get -A`` quadratic)."""
        selector = parse_label_selector(labels) if labels else None
        match_fields = field_matcher(fields, res.kind) if fields else None
        stored = self.by_resource.get(res, {})
        keys = self._order.get(res)
        if keys is None:
            keys = self._order[res] = sorted(stored)
        if namespace is not None and res.namespaced:
            lo = bisect.bisect_left(keys, (namespace, ""))
            hi = bisect.bisect_left(keys, (namespace + "\x00", ""))
        else:
            lo, hi = 0, len(keys)
        if after is not None:
            lo = max(lo, bisect.bisect_right(keys, after))
        out: builtins.list[Obj] = []
        last: tuple[str, str] | None = None
        i = lo
        while i < hi:
            key = keys[i]
            i += 1
            obj = stored[key]
            if selector is not None and not selector.matches(obj.get("metadata", {}).get("labels") or {}):
                continue
            if match_fields is not None and not match_fields(obj):
                continue
            out.append(clone(obj))
            if limit and len(out) == limit:
                last = key
                break
        more = last is not None and i < hi
        return Page(out, self.rv, last if more else None, hi - i if more else 0)

    # ----- writes --------------------------------------------------------------------------

    def _emit(self, kind: str, res: Resource, obj: Obj, prev: Obj | None = None) -> None:
        event = Event(self.rv, kind, res, obj, prev=prev)  # shared: a stored object is never changed in place
        self.changed_at = time.monotonic()
        self.history.append(event)
        ns = obj.get("metadata", {}).get("namespace")
        for w in self.watchers:
            if w.resource == res and (w.namespace is None or w.namespace == ns):
                w.queue.put_nowait(event)

    def _put(self, key: tuple[Resource, str, str], obj: Obj) -> None:
        old = self.objects.get(key)
        if old is not None:
            self._unindex(key, old)
        else:
            self._order.pop(key[0], None)
        self.objects[key] = obj
        self.by_resource.setdefault(key[0], {})[(key[1], key[2])] = obj
        for label, index in self.label_index.items():
            self._index_one(index, label, key, obj)

    def _drop(self, key: tuple[Resource, str, str]) -> None:
        self._unindex(key, self.objects.pop(key))
        del self.by_resource[key[0]][(key[1], key[2])]
        self._order.pop(key[0], None)

    @staticmethod
    def _index_one(
        index: dict[str, dict[tuple[Resource, str, str], Obj]], label: str, key: tuple[Resource, str, str], obj: Obj
    ) -> None:
        value = (obj.get("metadata", {}).get("labels") or {}).get(label)
        if value is not None:
            index.setdefault(value, {})[key] = obj

    def _unindex(self, key: tuple[Resource, str, str], obj: Obj) -> None:
        labels = obj.get("metadata", {}).get("labels") or {}
        for label, index in self.label_index.items():
            value = labels.get(label)
            entries = index.get(value) if isinstance(value, str) else None
            if entries is not None:
                entries.pop(key, None)
                if not entries:
                    del index[str(value)]

    def _bump(self, obj: Obj) -> None:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)

    def _check_namespace(self, res: Resource, namespace: str, namespaces: Resource) -> None:
        if not res.namespaced:
            return
        ns = self.objects.get((namespaces, "", namespace))
        if ns is None:
            raise ApiError(
                404,
                "NotFound",
                f'namespaces "{namespace}" not found',
                details={"name": namespace, "kind": "namespaces"},
            )
        if ns["metadata"].get("deletionTimestamp"):
            raise ApiError(
                403,
                "Forbidden",
                f"unable to create new content in namespace {namespace} because it is being terminated",
                details={"name": namespace, "kind": "namespaces"},
            )

    def create(
        self,
        res: Resource,
        namespace: str,
        body: Obj,
        *,
        namespaces: Resource,
        prepare: Callable[[Obj], None] | None = None,
    ) -> Obj:
        """Store a new object; ``prepare`` completes it once it has its uid (the registry's
        PrepareForCreate: a Job's selector)."""
        obj = clone(body)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        name = meta.get("name")
        if not name:
            raise ApiError(
                422,
                "Invalid",
                f"{res.kind} is invalid: metadata.name: Required value: name or generateName is required",
                details={
                    "kind": res.kind,
                    "causes": [
                        {
                            "reason": "FieldValueRequired",
                            "field": "metadata.name",
                            "message": "Required value: name or generateName is required",
                        }
                    ],
                },
            )
        if res.namespaced:
            if meta.get("namespace") and meta["namespace"] != namespace:
                raise ApiError(
                    400,
                    "BadRequest",
                    "the namespace of the provided object does not match the namespace sent on the request",
                )
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        self._check_namespace(res, namespace, namespaces)
        key = (res, namespace if res.namespaced else "", name)
        if key in self.objects:
            what = f"{res.plural}.{res.group}" if res.group else res.plural
            raise ApiError(
                409, "AlreadyExists", f'{what} "{name}" already exists', details={"name": name, "kind": res.plural}
            )
        obj["apiVersion"], obj["kind"] = res.api_version, res.kind
        if res is namespaces:  # as the real server: every namespace is selectable by its name
            meta["labels"] = {**(meta.get("labels") or {}), NAMESPACE_NAME_LABEL: name}
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=timestamp(), generation=1)
        meta.pop("deletionTimestamp", None)
        if prepare is not None:
            prepare(obj)
        self._bump(obj)
        self._put(key, obj)
        self._emit("ADDED", res, obj)
        return clone(obj)

    def replace(
        self,
        res: Resource,
        namespace: str,
        name: str,
        body: Obj,
        *,
        subresource: str = "",
        validate: Callable[[Obj, Obj], None] | None = None,
    ) -> Obj:
        """PUT (and the end of every PATCH): optimistic concurrency on resourceVersion."""
        key = (res, namespace if res.namespaced else "", name)
        old = self.objects.get(key)
        if old is None:
            raise not_found(res, name)
        new = clone(body)
        meta = new.setdefault("metadata", {})
        sent_rv = meta.get("resourceVersion")
        if sent_rv and sent_rv != old["metadata"]["resourceVersion"]:
            what = f"{res.plural}.{res.group}" if res.group else res.plural
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {what} "{name}": the object has been '
                "modified; please apply your changes to the latest version and try again",
                details={"name": name, "kind": res.plural},
            )
        if meta.get("name", name) != name:
            raise ApiError(400, "BadRequest", "the name of the object does not match the name on the URL")
        if subresource == "status":  # only status changes
            merged = clone(old)
            merged["status"] = new.get("status", {})
            new = merged
        elif res.has_status:  # the main resource never changes status
            new["status"] = clone(old.get("status", {})) if "status" in old else new.get("status", {})
            if "status" not in old:
                new.pop("status", None)
        for keep in ("uid", "creationTimestamp", "namespace", "deletionTimestamp", "generation"):
            if keep in old["metadata"]:
                new["metadata"][keep] = old["metadata"][keep]
            else:
                new["metadata"].pop(keep, None)
        new["metadata"]["name"] = name
        if res.plural == "namespaces" and not res.group:
            new["metadata"]["labels"] = {**(new["metadata"].get("labels") or {}), NAMESPACE_NAME_LABEL: name}
        new["apiVersion"], new["kind"] = res.api_version, res.kind
        if validate is not None:
            validate(old, new)
        if new.get("spec") != old.get("spec"):
            new["metadata"]["generation"] = old["metadata"].get("generation", 1) + 1
        if _same(old, new):
            return clone(old)  # a no-op write keeps the resourceVersion, as the real server
        self._bump(new)
        if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
            self._drop(key)
            self._emit("DELETED", res, new)
            return clone(new)
        self._put(key, new)
        self._emit("MODIFIED", res, new, prev=old)
        return clone(new)

    def delete(self, res: Resource, namespace: str, name: str) -> Obj:
        key = (res, namespace if res.namespaced else "", name)
        old = self.objects.get(key)
        if old is None:
            raise not_found(res, name)
        if old["metadata"].get("finalizers"):
            if not old["metadata"].get("deletionTimestamp"):
                stored, old = old, clone(old)  # the stored object may be an earlier event's: change a copy
                old["metadata"]["deletionTimestamp"] = timestamp()
                self._bump(old)
                self._put(key, old)
                self._emit("MODIFIED", res, old, prev=stored)
            return clone(old)
        self._drop(key)
        old = clone(old)
        self._bump(old)
        self._emit("DELETED", res, old)
        return clone(old)

    def purge(self, res: Resource) -> None:
        """Every object of ``res`` gone at once, finalizers or not (its CRD was deleted)."""
        for ns, name in list(self.by_resource.get(res, {})):
            key = (res, ns, name)
            old = clone(self.objects[key])
            self._drop(key)
            self._bump(old)
            self._emit("DELETED", res, old)

    def delete_namespace_contents(self, namespace: str, resources: Iterable[Resource]) -> None:
        for res in resources:
            if res.namespaced:
                for r, ns, name in [k for k in self.objects if k[0] == res and k[1] == namespace]:
                    self.delete(r, ns, name)

    # ----- watch ---------------------------------------------------------------------------

    def events_since(self, res: Resource, namespace: str | None, rv: int) -> builtins.list[Event]:
        """Changes after ``rv``; ApiError 410 when ``rv`` is older than the kept history."""
        horizon = max(self.horizon, self.history[0].rv - 1 if len(self.history) == self.history.maxlen else 0)
        if rv < horizon:
            raise ApiError(410, "Expired", f"too old resource version: {rv} ({horizon})")
        return [
            e
            for e in self.history
            if e.rv > rv
            and e.resource == res
            and (namespace is None or e.obj.get("metadata", {}).get("namespace") == namespace)
        ]

    def compact(self) -> None:
        """Forget all history (fault injection: the next watch from an old version gets 410)."""
        self.history.clear()
        self.horizon = self.rv


def _same(old: Obj, new: Obj) -> bool:
    a = {k: v for k, v in old.items() if k != "metadata"}
    b = {k: v for k, v in new.items() if k != "metadata"}
    ma = {k: v for k, v in old["metadata"].items() if k != "resourceVersion"}
    mb = {k: v for k, v in new["metadata"].items() if k != "resourceVersion"}
    return a == b and ma == mb
