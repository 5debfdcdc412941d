"""An HTTP API server (aiohttp) over the object store, speaking the Kubernetes REST API.

Paths: ``/api/v1/[namespaces/NS/]PLURAL[/NAME[/status]]`` and the same under
``/apis/GROUP/VERSION``; GET, LIST (``listing``), WATCH (``watch``), POST, PUT, PATCH (merge,
JSON, strategic for built-in kinds: ``patches``), DELETE with finalizers and namespace
termination; the ``scale`` and ``log`` subresources (``subresources``); discovery and OpenAPI
(``discovery``) so kubectl and DynamicClient work; the kinds CRDs define (``catalog``); injected
faults (``faults``). Errors are ``kind: Status`` bodies. This module routes a request and runs
the verbs through admission (defaults, validation, webhooks) into the store.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from admission.sim.server import (
    aggregation,
    discovery,
    event_views,
    listing,
    patches,
    rbac,
    resources,
    subresources,
    tables,
    watch,
    webhooks,
)
from admission.sim.server.catalog import Catalog, established
from admission.sim.server.faults import Faults, inject
from admission.sim.server.object_store import ObjectStore
from admission.sim.server.objects import ApiError, Obj, Resource, clone
from admission.sim.server.schema import defaults, validation
from admission.sim.server.webhooks import user_of

MAX_BODY = 3 * 1024 * 1024  # the real server's default request limit


class ApiServer:
    def __init__(
        self,
        store: ObjectStore | None = None,
        served: tuple[Resource, ...] = resources.BUILT_IN,
        faults: Faults | None = None,
        crds: tuple[Resource, ...] = resources.OPERATORS,
        definitions: tuple[Obj, ...] = (),
    ) -> None:
        """``served``: the built-in kinds; ``crds``: the operators' kinds installed as CRDs at start (a
        cluster without some operators: leave them out, POST their CRDs later); ``definitions``: more
        CRDs, whole (Kueue's configuration kinds, ``queues.kueue.crds``)."""
        self.faults = faults or Faults()
        self.time_scale = 1.0  # wall seconds per simulated second (``SimHost`` sets it)
        self.store = store or ObjectStore()
        self.catalog = Catalog(served)
        self.watches = watch.Watches(self.store, self._table, lambda: self.faults.watch_delay)
        self.status_writes = 0  # PUT/PATCH of a status subresource (bench: what controllers send)
        self.writing = 0  # writes in hand (a create waiting on its admission webhooks): not settled
        for ns in ("default", "kube-system"):
            self.store.create(resources.NAMESPACES, "", {"metadata": {"name": ns}}, namespaces=resources.NAMESPACES)
        for name, value in resources.SYSTEM_PRIORITY_CLASSES.items():  # as the real server makes at bootstrap
            self.store.create(resources.PRIORITY_CLASSES, "", {"metadata": {"name": name}, "value": value,
                "description": "Used for system critical pods that must run in the cluster."},
                namespaces=resources.NAMESPACES)  # fmt: skip
        self.webhooks = webhooks.Webhooks(self.store, served)
        self.aggregator = aggregation.Aggregator(self.store, self.webhooks.services)
        self.aggregator.publish(resources.NAMESPACES)
        for crd in (*(resources.crd_for(res) for res in crds), *definitions):
            self.store.create(resources.CRDS, "", established(crd), namespaces=resources.NAMESPACES)
        self._sync_crds()
        self.app = web.Application(client_max_size=MAX_BODY)
        # side endpoints on the same port (a dcgm-exporter's: ``mount``), GET only, without faults
        self.mounted: dict[str, Callable[[web.Request], Awaitable[web.StreamResponse]]] = {}
        self.app.router.add_route("*", "/{tail:.*}", self.handle)
        self.app.on_shutdown.append(self._end_streams)

    async def _end_streams(self, _app: web.Application) -> None:
        self.drop_watches()
        await self.webhooks.close()
        await self.aggregator.close()

    def drop_watches(self) -> None:
        """End every open watch stream (on shutdown, or as an injected fault: clients must re-watch)."""
        self.watches.drop()

    @property
    def watches_served(self) -> int:
        return self.watches.served

    # ----- routing -------------------------------------------------------------------------

    def mount(self, path: str, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> None:
        """Serve ``handler`` at ``path`` (GET) beside the API, on the same port: how the simulated
        cluster's operators publish an endpoint of their own (``admission.sim.host`` wires them)."""
        self.mounted[path] = handler

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.method == "GET" and (side := self.mounted.get(request.path)) is not None:
            return await side(request)
        self.writing += (write := request.method in ("POST", "PUT", "PATCH", "DELETE"))
        try:
            await inject(self.faults, request)
            return await self._route(request)
        except ApiError as exc:
            headers = {"Retry-After": "1"} if exc.code == 429 else None
            return web.json_response(exc.status(), status=exc.code, headers=headers)
        except web.HTTPRequestEntityTooLarge:
            too_large = ApiError(413, "RequestEntityTooLarge", "request is too large")
            return web.json_response(too_large.status(), status=413)
        finally:
            self.writing -= write

    async def _route(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        if parts == ["version"]:
            return web.json_response(discovery.VERSION)
        if parts[:1] == ["openapi"]:
            return discovery.openapi_document(parts[1:], request.headers.get("Accept", ""), self.catalog.served)
        if parts in (["healthz"], ["readyz"], ["livez"]):
            return web.Response(text="ok")
        if parts == ["api"]:
            return web.json_response({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []})
        if parts == ["apis"]:
            return web.json_response(discovery.groups(self.catalog.served, self.aggregator.groups()))
        if parts[:1] == ["api"] and len(parts) >= 2:
            group, version, rest = "", parts[1], parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return discovery.page_not_found()
        claimed = self.aggregator.claimed(group, version)
        if claimed is not None:  # an APIService's group: its backend answers (discovery too)
            return await self.aggregator.proxy(request, claimed, user_of(request))
        if (group, version, rest) == ("authorization.k8s.io", "v1", ["subjectaccessreviews"]):
            if request.method != "POST":
                raise ApiError(405, "MethodNotAllowed", "subjectaccessreviews can only be created")
            return web.json_response(rbac.subject_access_review(self.store, await self._body(request)), status=201)
        if not rest:
            listed = discovery.resource_list(self.catalog.served, group, version)
            return web.json_response(listed) if listed is not None else discovery.page_not_found()
        namespace = ""
        if rest[0] == "namespaces" and len(rest) >= 3 and not (group == "" and rest[2] in ("status", "finalize")):
            namespace, rest = rest[1], rest[2:]
        res = self.catalog.by_path.get((group, version, rest[0]))
        if res is None:
            # As the real server, for a kind it does not serve (a CRD not installed): not a Status.
            return discovery.page_not_found()
        name = rest[1] if len(rest) > 1 else ""
        sub = rest[2] if len(rest) > 2 else ""
        if sub == "log" and res.plural == "pods" and not res.group and request.method == "GET":
            return subresources.pod_log(self.store.get(res, namespace, name), namespace, name)
        if sub == "scale" and res.group == "apps" and name:
            return await self._scale(request, res, namespace, name)
        if sub and (sub != "status" or not res.has_status):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return await self._serve(request, res, namespace, name, sub)

    async def _scale(self, request: web.Request, res: Resource, namespace: str, name: str) -> web.Response:
        """The ``scale`` subresource of Deployments, ReplicaSets and StatefulSets (``kubectl scale``):
        an ``autoscaling/v1`` Scale whose ``spec.replicas`` is the object's."""
        obj = self.store.get(res, namespace, name)

        if request.method == "GET":
            return web.json_response(subresources.scale_of(obj))
        if request.method not in ("PUT", "PATCH"):
            raise ApiError(405, "MethodNotAllowed", f"{request.method} is not supported on scale")
        current = subresources.scale_of(obj)
        wanted = await self._body(request) if request.method == "PUT" else await self._patched(request, res, current)
        replicas = (wanted.get("spec") or {}).get("replicas")
        if not isinstance(replicas, int) or replicas < 0:
            raise validation.invalid(
                res, name, [("spec.replicas", f"Invalid value: {replicas!r}: must be greater than or equal to 0")]
            )
        new = clone(obj)
        new["spec"]["replicas"] = replicas
        admitted = await self.webhooks.admit(res, "UPDATE", namespace, new, obj, "", user=user_of(request))
        updated = self.store.replace(
            res, namespace, name, admitted.obj, validate=self.catalog.update_rules(res, "", "Warn", [])
        )
        return _respond(subresources.scale_of(updated), admitted.warnings)

    async def _serve(
        self, request: web.Request, res: Resource, namespace: str, name: str, sub: str
    ) -> web.StreamResponse:
        method = request.method
        mode = validation.field_validation(request.query.get("fieldValidation"))
        as_table = tables.wants_table(request.headers.get("Accept", ""))
        if res.group == "events.k8s.io":  # one storage, two APIs (``admission.sim.server.event_views``)
            return await self._serve_event_view(request, res, namespace, name, mode, as_table)
        if method == "GET" and not name:
            if request.query.get("watch") in watch.WATCH_TRUE:
                return await self.watches.serve(request, res, namespace or None)
            listed = listing.list_of(self.store, request, res, namespace or None, custom=res in self.catalog.custom)
            if as_table:
                return web.json_response(self._table(request, res, listed["items"], listed["metadata"]))
            return web.json_response(listed)
        if method == "GET":
            got = self.store.get(res, namespace, name)
            if as_table:
                return web.json_response(self._table(request, res, [got], got["metadata"]))
            return web.json_response(got)
        if method == "POST" and not name:
            body = await self._body(request)
            created, warnings = await self.create(res, namespace, body, user=user_of(request), mode=mode)
            return _respond(created, warnings, status=201)
        if method in ("PUT", "PATCH") and name:
            if sub == "status":
                self.status_writes += 1
            # A PATCH that names no resourceVersion is applied to whatever the object is when it is
            # written: on a conflict (another writer got in while the webhooks were asked) the real
            # server reads, patches and admits it again, up to MAX_PATCH_CONFLICTS times
            # (GuaranteedUpdate; handlers/patch.go's maxRetryWhenPatchConflicts).
            retries = MAX_PATCH_CONFLICTS if method == "PATCH" and not _pins_version(await self._body(request)) else 0
            while True:
                old = self.store.get(res, namespace, name)
                if method == "PUT":
                    new = await self._body(request)
                else:
                    new = await self._patched(request, res, old)
                admitted = await self.webhooks.admit(res, "UPDATE", namespace, new, old, sub, user=user_of(request))
                rules = self.catalog.update_rules(res, sub, mode, admitted.warnings)
                try:
                    updated = self.store.replace(res, namespace, name, admitted.obj, subresource=sub, validate=rules)
                except ApiError as exc:
                    if exc.code != 409 or exc.reason != "Conflict" or retries <= 0:
                        raise
                    retries -= 1
                    continue
                if res == resources.CRDS:
                    self._sync_crds()
                return _respond(updated, admitted.warnings)
        if method == "DELETE" and name:
            old = self.store.get(res, namespace, name)
            options = await self._body(request) if request.can_read_body else {}
            wanted = (options.get("preconditions") or {}) if isinstance(options, dict) else {}
            for field_name in ("uid", "resourceVersion"):
                if wanted.get(field_name) and wanted[field_name] != old["metadata"].get(field_name):
                    raise ApiError(
                        409, "Conflict", f"Precondition failed: {field_name} in precondition: {wanted[field_name]}, "
                        f"{field_name} in object meta: {old['metadata'].get(field_name)}",
                    )  # fmt: skip
            admitted = await self.webhooks.admit(res, "DELETE", namespace, None, old, user=user_of(request))
            if res is resources.NAMESPACES:
                return _respond(self._delete_namespace(name), admitted.warnings)
            deleted = self.store.delete(res, namespace, name)
            if res == resources.CRDS:
                self._remove_crd(old)
            return _respond(deleted, admitted.warnings)
        raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on this path")

    async def _serve_event_view(
        self, request: web.Request, res: Resource, namespace: str, name: str, mode: str, as_table: bool
    ) -> web.StreamResponse:
        """``events.k8s.io/v1`` requests, served from the core Events (converted both ways)."""
        core = self.catalog.by_path[("", "v1", "events")]
        view, stored = event_views.to_events_v1, event_views.to_core
        method = request.method
        if method == "GET" and not name:
            if request.query.get("watch") in watch.WATCH_TRUE:
                return await self.watches.serve(request, core, namespace or None, convert=view, shown_as=res)
            listed = listing.list_of(self.store, request, core, namespace or None, custom=core in self.catalog.custom)
            items = [view(o) for o in listed["items"]]
            if as_table:
                return web.json_response(self._table(request, res, items, listed["metadata"]))
            return web.json_response({**listed, "apiVersion": res.api_version, "kind": "EventList", "items": items})
        if method == "GET":
            got = view(self.store.get(core, namespace, name))
            if as_table:
                return web.json_response(self._table(request, res, [got], got["metadata"]))
            return web.json_response(got)
        if method == "POST" and not name:
            body = stored(await self._body(request))
            created, warnings = await self.create(core, namespace, body, user=user_of(request), mode=mode)
            return _respond(view(created), warnings, status=201)
        if method in ("PUT", "PATCH") and name:
            old = self.store.get(core, namespace, name)
            new = await self._body(request) if method == "PUT" else await self._patched(request, res, view(old))
            updated = self.store.replace(core, namespace, name, stored(new), subresource="", validate=None)
            return _respond(view(updated), [])
        if method == "DELETE" and name:
            return _respond(view(self.store.delete(core, namespace, name)), [])
        raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on this path")

    async def create(
        self, res: Resource, namespace: str, body: Obj, *, user: dict[str, Any], mode: str = "Warn"
    ) -> tuple[Obj, list[str]]:
        """A create as the real server runs it: named, defaulted, through the admission webhooks,
        validated, stored. Also how the simulated cluster's controllers create what they create
        (a ReplicaSet's pods go through the webhooks as on a real cluster)."""
        body = {**body, "apiVersion": res.api_version, "kind": res.kind}
        meta = body["metadata"] = dict(body.get("metadata") or {})
        if res.namespaced:
            meta["namespace"] = namespace
        if not meta.get("name") and meta.get("generateName"):  # named first, as the real server
            meta["name"] = str(meta["generateName"]) + uuid.uuid4().hex[:5]
        defaults.default(res, body)  # as the real server's decoding, before admission
        if res in self.catalog.schemas:  # a custom resource's schema defaults, also at decoding
            validation.apply_defaults(body, self.catalog.schemas[res].schema)
        if res.plural == "pods" and not res.group:
            defaults.pod_priority(self.store, body)  # the Priority admission plugin runs before the webhooks
        admitted = await self.webhooks.admit(res, "CREATE", namespace, body, None, user=user)
        if res not in self.catalog.custom:
            admitted.warnings.extend(validation.schema(res, admitted.obj, mode))
        else:
            admitted.warnings.extend(self.catalog.validate_custom(res, admitted.obj, mode))
        validation.object_rules(res, admitted.obj)  # names, labels, annotations (and built-ins' own rules)
        if res == resources.CRDS:
            admitted.obj = established(admitted.obj)
        created = self.store.create(
            res, namespace, admitted.obj, namespaces=resources.NAMESPACES, prepare=lambda o: defaults.prepare(res, o)
        )
        if res == resources.CRDS:
            self._sync_crds()
        return created, admitted.warnings

    async def _body(self, request: web.Request) -> Any:
        if request.content_type.startswith("application/vnd.kubernetes.protobuf"):
            # Not decoded here (a real server accepts protobuf for built-in kinds); a client told so
            # sends JSON instead, as client-go does after a 415 (docs/simulated-cluster.md)
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - accepted media types include: "
                f"application/json, application/merge-patch+json (not {request.content_type})",
            )
        raw = await request.read()
        try:
            body = json.loads(raw) if raw else None
        except ValueError as exc:
            raise ApiError(400, "BadRequest", f"the request body is not valid JSON: {exc}") from None
        if body is None:
            raise ApiError(400, "BadRequest", "the request needs a body")
        return body

    # ----- verbs ---------------------------------------------------------------------------

    async def _patched(self, request: web.Request, res: Resource, current: Obj) -> Obj:
        """The object after applying the request's patch (merge, JSON, or strategic for built-ins)."""
        body = await self._body(request)
        built_in = res not in self.catalog.custom
        schema = validation.kind_schema(res) if built_in else None
        patched: Obj = patches.apply(
            request.content_type, body, current, strategic=built_in, schema=schema, resolve=validation.resolve
        )
        if not _pins_version(body):
            patched.setdefault("metadata", {})["resourceVersion"] = current["metadata"]["resourceVersion"]
        return patched

    def _table(self, request: web.Request, res: Resource, objects: list[Obj], meta: dict[str, Any]) -> Obj:
        return tables.for_request(request, self.catalog.columns, res, objects, meta)

    def _sync_crds(self) -> None:
        """Serve what the installed CRDs define (they override the pre-installed operator kinds)."""
        self.catalog.sync(self.store.list(resources.CRDS, None)[0])
        self.webhooks.by_plural = {(r.group, r.plural): r for r in self.catalog.served}

    @property
    def served(self) -> list[Resource]:
        """Every kind served now, built-in and custom."""
        return self.catalog.served

    @property
    def by_path(self) -> dict[tuple[str, str, str], Resource]:
        return self.catalog.by_path

    def _remove_crd(self, crd: Obj) -> None:
        """A deleted CRD: its objects are deleted, its watches end, its kind is no longer served."""
        for res, _ in resources.from_crd(crd):
            self.store.purge(res)
            for w in list(self.watches.streams):
                if w.resource == res:
                    w.queue.put_nowait(None)
        self._sync_crds()

    def _delete_namespace(self, name: str) -> Any:
        ns = self.store.get(resources.NAMESPACES, "", name)
        self.store.delete_namespace_contents(name, self.catalog.served)
        ns["metadata"]["finalizers"] = []
        return self.store.delete(resources.NAMESPACES, "", name)


MAX_PATCH_CONFLICTS = 5  # the real server's maxRetryWhenPatchConflicts


def _pins_version(body: Any) -> bool:
    """Whether a patch names the resourceVersion it applies to (then a conflict is the client's)."""
    return isinstance(body, dict) and "resourceVersion" in (body.get("metadata") or {})


def _respond(obj: Obj, warnings: list[str], *, status: int = 200) -> web.Response:
    """A JSON object response, with admission warnings as ``Warning`` headers (kubectl shows them)."""
    response = web.json_response(obj, status=status)
    for warning in warnings:
        response.headers.add("Warning", '299 - "' + warning.replace('"', "'") + '"')
    return response
