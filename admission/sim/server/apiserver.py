"""An HTTP API server (aiohttp) over the object store, speaking the Kubernetes REST API.

Paths: ``/api/v1/[namespaces/NS/]PLURAL[/NAME[/status]]`` and the same under
``/apis/GROUP/VERSION``; GET/LIST/WATCH, POST, PUT, PATCH (merge, JSON, strategic for built-in
kinds; 415 for strategic merge on custom resources, as the real server), DELETE with
finalizers and namespace termination; discovery (``/version``, ``/api``, ``/apis``, group
versions) so kubectl and DynamicClient work. Errors are ``kind: Status`` bodies.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from random import Random
from typing import Any

from aiohttp import web
from openapi_schema_validator import OAS30Validator

from admission.sim.operators import dcgm
from admission.sim.server import (
    aggregation,
    cel,
    defaults,
    event_views,
    openapi,
    patches,
    rbac,
    resources,
    tables,
    validation,
    webhooks,
)
from admission.sim.server.objects import (
    ApiError,
    Event,
    Obj,
    ObjectStore,
    Resource,
    Watcher,
    clone,
    field_matcher,
    parse_label_selector,
)

MAX_BODY = 3 * 1024 * 1024  # the real server's default request limit
BOOKMARK_SECONDS = 1.0
WATCH_TRUE = ("true", "True", "1")
VERSION = {
    "major": "1",
    "minor": "30",
    "gitVersion": "v1.30.0-turnstile-sim",
    "gitCommit": "turnstile",
    "gitTreeState": "clean",
    "buildDate": "2026-11-30T00:00:00Z",
    "goVersion": "n/a (python)",
    "compiler": "cpython",
    "platform": "linux/amd64",
}


@dataclass(slots=True)
class Faults:
    """Fault injection for tests: what a flaky API server does to its clients. Seeded, so repeatable."""

    latency: float = 0.0  # seconds added to every request
    error_rate: float = 0.0  # share of API requests answered 500 or 429 (with Retry-After)
    conflict_rate: float = 0.0  # share of updates refused with 409 Conflict
    # seconds a watch event reaches its watchers after the write that made it: a real API server's
    # watch cache lags the write's own answer by a few milliseconds, so a client often holds a
    # write's answer before the events of earlier writes by others
    watch_delay: float = 0.0
    # resources (plurals) whose requests are refused with 403, as a real server does while it loads
    # its RBAC cache after a restart or before a Role is applied; tests change it while running
    forbidden: set[str] = field(default_factory=set)
    seed: int = 0
    random: Random = field(init=False)

    def __post_init__(self) -> None:
        self.random = Random(self.seed)


class ApiServer:
    def __init__(
        self,
        store: ObjectStore | None = None,
        served: tuple[Resource, ...] = resources.BUILT_IN,
        faults: Faults | None = None,
        crds: tuple[Resource, ...] = resources.OPERATORS,
        definitions: tuple[Obj, ...] = (),
    ) -> None:
        """``served``: the built-in kinds; ``crds``: the operators' kinds installed as CRDs at start
        (a cluster without some operators: leave them out, and POST their CRDs later);
        ``definitions``: more CRDs, whole (Kueue's configuration kinds, ``queues.kueue.crds``)."""
        self.faults = faults or Faults()
        self.time_scale = 1.0  # wall seconds per simulated second (``SimHost`` sets it)
        self.store = store or ObjectStore()
        self.base = served
        self.served: list[Resource] = list(served)
        self.by_path = {(r.group, r.version, r.plural): r for r in served}
        self.custom: set[Resource] = set()
        self.schemas: dict[Resource, OAS30Validator] = {}
        self.columns: dict[Resource, list[dict[str, Any]]] = {}  # CRD additionalPrinterColumns
        self.streams: set[Watcher] = set()
        self.watches_served = 0
        self.status_writes = 0  # PUT/PATCH of a status subresource (bench: what controllers send)
        for ns in ("default", "kube-system"):
            self.store.create(resources.NAMESPACES, "", {"metadata": {"name": ns}}, namespaces=resources.NAMESPACES)
        for name, value in resources.SYSTEM_PRIORITY_CLASSES.items():  # as the real server makes at bootstrap
            self.store.create(
                resources.PRIORITY_CLASSES, "", {"metadata": {"name": name}, "value": value,
                "description": "Used for system critical pods that must run in the cluster."},
                namespaces=resources.NAMESPACES,
            )  # fmt: skip
        self.webhooks = webhooks.Webhooks(self.store, served)
        self.aggregator = aggregation.Aggregator(self.store, self.webhooks.services)
        self.aggregator.publish(resources.NAMESPACES)
        for crd in (*(resources.crd_for(res) for res in crds), *definitions):
            self.store.create(resources.CRDS, "", _established(crd), namespaces=resources.NAMESPACES)
        self._sync_crds()
        self.app = web.Application(client_max_size=MAX_BODY)
        # (a dcgm-exporter's; a trace's times are scaled as the simulated kubelet's runtimes)
        self.app.router.add_get(dcgm.PATH, dcgm.handler(self.store, lambda: self.served, lambda: self.time_scale))
        self.app.router.add_route("*", "/{tail:.*}", self.handle)
        self.app.on_shutdown.append(self._end_streams)

    async def _end_streams(self, _app: web.Application) -> None:
        self.drop_watches()
        await self.webhooks.close()
        await self.aggregator.close()

    def drop_watches(self) -> None:
        """End every open watch stream (on shutdown, or as an injected fault: clients must re-watch)."""
        for w in list(self.streams):
            w.queue.put_nowait(None)

    async def _inject(self, request: web.Request) -> None:
        faults = self.faults
        if faults.latency:
            await asyncio.sleep(faults.latency)
        if not request.path.startswith(("/api/", "/apis/")):
            return
        if faults.forbidden and request.path.rstrip("/").rpartition("/")[2] in faults.forbidden:
            raise ApiError(403, "Forbidden", f"{request.path} is forbidden (injected: RBAC not loaded yet)")
        if faults.error_rate and faults.random.random() < faults.error_rate:
            if faults.random.random() < 0.5:
                raise ApiError(
                    429,
                    "TooManyRequests",
                    "the server has received too many requests and has asked us to try again later",
                    details={"retryAfterSeconds": 1},
                )
            raise ApiError(500, "InternalError", "an error on the server (injected) has prevented the request")
        if (
            request.method in ("PUT", "PATCH")
            and faults.conflict_rate
            and faults.random.random() < faults.conflict_rate
        ):
            raise ApiError(
                409,
                "Conflict",
                "Operation cannot be fulfilled: the object has been modified; please "
                "apply your changes to the latest version and try again (injected)",
            )

    # ----- routing -------------------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.StreamResponse:
        try:
            await self._inject(request)
            return await self._route(request)
        except ApiError as exc:
            headers = {"Retry-After": "1"} if exc.code == 429 else None
            return web.json_response(exc.status(), status=exc.code, headers=headers)
        except web.HTTPRequestEntityTooLarge:
            return web.json_response(
                ApiError(413, "RequestEntityTooLarge", "request is too large").status(), status=413
            )

    async def _route(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        if parts == ["version"]:
            return web.json_response(VERSION)
        if parts[:1] == ["openapi"]:
            return self._openapi(parts[1:], request.headers.get("Accept", ""))
        if parts in (["healthz"], ["readyz"], ["livez"]):
            return web.Response(text="ok")
        if parts == ["api"]:
            return web.json_response({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []})
        if parts == ["apis"]:
            return web.json_response(self._groups())
        if parts[:1] == ["api"] and len(parts) >= 2:
            group, version, rest = "", parts[1], parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return _page_not_found()
        claimed = self.aggregator.claimed(group, version)
        if claimed is not None:  # an APIService's group: its backend answers (discovery too)
            return await self.aggregator.proxy(request, claimed, user_of(request))
        if (group, version, rest) == ("authorization.k8s.io", "v1", ["subjectaccessreviews"]):
            if request.method != "POST":
                raise ApiError(405, "MethodNotAllowed", "subjectaccessreviews can only be created")
            return web.json_response(rbac.subject_access_review(self.store, await self._body(request)), status=201)
        if not rest:
            listed = self._resource_list(group, version)
            return web.json_response(listed) if listed is not None else _page_not_found()
        namespace = ""
        if rest[0] == "namespaces" and len(rest) >= 3 and not (group == "" and rest[2] in ("status", "finalize")):
            namespace, rest = rest[1], rest[2:]
        res = self.by_path.get((group, version, rest[0]))
        if res is None:
            # As the real server, for a kind it does not serve (a CRD not installed): not a Status.
            return _page_not_found()
        name = rest[1] if len(rest) > 1 else ""
        sub = rest[2] if len(rest) > 2 else ""
        if sub == "log" and res.plural == "pods" and not res.group and request.method == "GET":
            return self._log(namespace, name)
        if sub == "scale" and res.group == "apps" and name:
            return await self._scale(request, res, namespace, name)
        if sub and (sub != "status" or not res.has_status):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return await self._serve(request, res, namespace, name, sub)

    async def _scale(self, request: web.Request, res: Resource, namespace: str, name: str) -> web.Response:
        """The ``scale`` subresource of Deployments, ReplicaSets and StatefulSets (``kubectl scale``):
        an ``autoscaling/v1`` Scale whose ``spec.replicas`` is the object's."""
        obj = self.store.get(res, namespace, name)

        def scale(of: Obj) -> Obj:
            selector = ((of.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
            return {
                "apiVersion": "autoscaling/v1",
                "kind": "Scale",
                "metadata": {
                    k: of["metadata"][k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                },
                "spec": {"replicas": (of.get("spec") or {}).get("replicas", 1)},
                "status": {
                    "replicas": (of.get("status") or {}).get("replicas", 0),
                    "selector": ",".join(f"{k}={v}" for k, v in sorted(selector.items())),
                },
            }

        if request.method == "GET":
            return web.json_response(scale(obj))
        if request.method not in ("PUT", "PATCH"):
            raise ApiError(405, "MethodNotAllowed", f"{request.method} is not supported on scale")
        current = scale(obj)
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
            res, namespace, name, admitted.obj, validate=self._update_rules(res, "", "Warn", [])
        )
        return _respond(scale(updated), admitted.warnings)

    def _log(self, namespace: str, name: str) -> web.Response:
        """``kubectl logs``: the simulated kubelet's account of the pod (no container really runs)."""
        pods = next(r for r in self.served if r.plural == "pods" and not r.group)
        pod = self.store.get(pods, namespace, name)
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        images = ", ".join(str(c.get("image")) for c in spec.get("containers") or [])
        lines = [f"[turnstile simulated kubelet] pod {namespace}/{name}: {images}"]
        if spec.get("nodeName"):
            lines.append(f"scheduled on node {spec['nodeName']}; phase {status.get('phase', 'Pending')}")
        else:
            lines.append(f"not scheduled yet; phase {status.get('phase', 'Pending')}")
        selector = spec.get("nodeSelector")
        if selector:
            lines.append("nodeSelector: " + ", ".join(f"{k}={v}" for k, v in sorted(selector.items())))
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

    def _table(self, request: web.Request, res: Resource, objects: list[Obj], meta: dict[str, Any]) -> Obj:
        printer = tables.printer_for(res, self.columns)
        include = request.query.get("includeObject") or "Metadata"
        if include == "Object":  # (a row's object is whole, kind and apiVersion too: kubectl --sort-by decodes it)
            objects = [{"apiVersion": res.api_version, "kind": res.kind, **o} for o in objects]
        out = tables.table(printer, objects, include=include, resource_version=str(meta.get("resourceVersion") or ""))
        if meta.get("continue"):
            out["metadata"]["continue"] = meta["continue"]
        return out

    def _openapi(self, parts: list[str], accept: str) -> web.StreamResponse:
        if parts == ["v2"] and openapi.V2_PROTOBUF in accept:
            return web.Response(body=openapi.swagger_protobuf(), content_type="application/octet-stream")
        if parts == ["v2"]:
            return web.json_response(openapi.swagger(self.served))
        if parts == ["v3"]:
            return web.json_response(openapi.root(self.served))
        if parts[:1] == ["v3"] and parts[1:2] == ["api"] and len(parts) == 3:
            group, version = "", parts[2]
        elif parts[:1] == ["v3"] and parts[1:2] == ["apis"] and len(parts) == 4:
            group, version = parts[2], parts[3]
        else:
            return _page_not_found()
        if not any(r.group == group and r.version == version for r in self.served):
            return _page_not_found()
        return web.json_response(openapi.group_version_document(group, version, self.served))

    async def _serve(
        self, request: web.Request, res: Resource, namespace: str, name: str, sub: str
    ) -> web.StreamResponse:
        method = request.method
        mode = validation.field_validation(request.query.get("fieldValidation"))
        as_table = tables.wants_table(request.headers.get("Accept", ""))
        if res.group == "events.k8s.io":  # one storage, two APIs (``admission.sim.server.event_views``)
            return await self._serve_event_view(request, res, namespace, name, mode, as_table)
        if method == "GET" and not name:
            if request.query.get("watch") in WATCH_TRUE:
                return await self._watch(request, res, namespace or None)
            listed = self._list(request, res, namespace or None)
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
                rules = self._update_rules(res, sub, mode, admitted.warnings)
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
        core = self.by_path[("", "v1", "events")]
        view, stored = event_views.to_events_v1, event_views.to_core
        method = request.method
        if method == "GET" and not name:
            if request.query.get("watch") in WATCH_TRUE:
                return await self._watch(request, core, namespace or None, convert=view, shown_as=res)
            listed = self._list(request, core, namespace or None)
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
        if res in self.schemas:  # a custom resource's schema defaults, also at decoding
            validation.apply_defaults(body, self.schemas[res].schema)
        if res.plural == "pods" and not res.group:
            self._priority(body)  # the Priority admission plugin runs before the webhooks
        admitted = await self.webhooks.admit(res, "CREATE", namespace, body, None, user=user)
        if res not in self.custom:
            admitted.warnings.extend(validation.schema(res, admitted.obj, mode))
        else:
            admitted.warnings.extend(self._validate_custom(res, admitted.obj, mode))
        validation.object_rules(res, admitted.obj)  # names, labels, annotations (and built-ins' own rules)
        if res == resources.CRDS:
            admitted.obj = _established(admitted.obj)
        created = self.store.create(
            res, namespace, admitted.obj, namespaces=resources.NAMESPACES, prepare=lambda o: defaults.prepare(res, o)
        )
        if res == resources.CRDS:
            self._sync_crds()
        return created, admitted.warnings

    def _priority(self, pod: Obj) -> None:
        """The Priority admission plugin: ``spec.priority`` from the PriorityClass the pod names (or
        the one marked ``globalDefault``); a name that does not exist, or a priority given that differs
        from the class's, is refused, as on a real server."""
        spec = pod.get("spec")
        if not isinstance(spec, dict):
            return
        classes = {str(o["metadata"]["name"]): o for o in self.store.list(resources.PRIORITY_CLASSES, None)[0]}
        name = spec.get("priorityClassName")
        if name:
            found = classes.get(str(name))
            if found is None:
                raise ApiError(
                    403, "Forbidden", f'pods "{(pod.get("metadata") or {}).get("name")}" is forbidden: '
                    f"no PriorityClass with name {name} was found",
                )  # fmt: skip
        else:
            found = next((o for o in classes.values() if o.get("globalDefault")), None)
            if found is not None:
                spec["priorityClassName"] = found["metadata"]["name"]
        computed = int(found.get("value") or 0) if found is not None else 0
        given = spec.get("priority")
        if given is not None and given != computed:
            raise ApiError(
                403, "Forbidden", f'pods "{(pod.get("metadata") or {}).get("name")}" is forbidden: the integer value '
                f"of priority ({given}) must not be provided in pod spec; priority admission controller computed "
                f"{computed} from the given PriorityClass name",
            )  # fmt: skip
        spec["priority"] = computed

    async def _body(self, request: web.Request) -> Any:
        raw = await request.read()
        try:
            body = json.loads(raw) if raw else None
        except ValueError as exc:
            raise ApiError(400, "BadRequest", f"the request body is not valid JSON: {exc}") from None
        if body is None:
            raise ApiError(400, "BadRequest", "the request needs a body")
        return body

    # ----- verbs ---------------------------------------------------------------------------

    def _list(self, request: web.Request, res: Resource, namespace: str | None) -> dict[str, Any]:
        after, since = self._continue_from(request.query.get("continue"))
        try:
            limit = int(request.query.get("limit") or 0)
        except ValueError:
            raise ApiError(400, "BadRequest", f"invalid limit {request.query.get('limit')!r}") from None
        labels, fields = request.query.get("labelSelector", ""), request.query.get("fieldSelector", "")
        page = self.store.page(res, namespace, labels=labels, fields=fields, after=after, limit=max(limit, 0))
        # As the real server, every page of one list carries the first page's resourceVersion: a
        # watch started from the last page replays whatever changed while the pages were read.
        meta: dict[str, Any] = {"resourceVersion": str(since or page.rv)}
        if page.last is not None:
            token = {"v": "meta.k8s.io/v1", "rv": since or page.rv, "start": f"{page.last[0]}/{page.last[1]}\x00"}
            meta["continue"] = base64.urlsafe_b64encode(json.dumps(token).encode()).decode()
            if not labels and not fields:  # the real server counts what is left only for an unfiltered list
                meta["remainingItemCount"] = page.remaining
        items = page.items
        if res not in self.custom:
            # As the real server: a built-in kind's list carries TypeMeta once, on the list; its
            # items have none (a custom resource's items keep theirs). Clients must take the kind
            # from the resource they listed.
            for item in items:
                item.pop("apiVersion", None)
                item.pop("kind", None)
        return {"kind": f"{res.kind}List", "apiVersion": res.api_version, "metadata": meta, "items": items}

    def _continue_from(self, token: str | None) -> tuple[tuple[str, str] | None, int]:
        """The key a continue token resumes after and the resourceVersion of its first page."""
        if not token:
            return None, 0
        try:
            parsed = json.loads(base64.urlsafe_b64decode(token))
            rv, start = int(parsed["rv"]), str(parsed["start"]).rstrip("\x00")
            namespace, _, name = start.rpartition("/")
        except (ValueError, KeyError, TypeError):
            raise ApiError(400, "BadRequest", "continue key is not valid: invalid continue token") from None
        if rv < self.store.horizon:
            raise ApiError(
                410, "Expired", "The provided continue parameter is too old to display a consistent list result. "
                "You can start a new list without the continue parameter.",
            )  # fmt: skip
        return (namespace, name), rv

    async def _patched(self, request: web.Request, res: Resource, current: Obj) -> Obj:
        """The object after applying the request's patch (merge, JSON, or strategic for built-ins)."""
        ctype = request.content_type
        body = await self._body(request)
        if ctype == "application/merge-patch+json":
            patched = patches.merge_patch(current, body)
        elif ctype == "application/json-patch+json":
            patched = patches.json_patch(current, body)
        elif ctype == "application/strategic-merge-patch+json":
            if res in self.custom:
                raise ApiError(
                    415,
                    "UnsupportedMediaType",
                    "the body of the request was in an unknown format - accepted media types include: "
                    "application/json-patch+json, application/merge-patch+json",
                )
            patched = patches.strategic_merge_patch(current, body, validation.kind_schema(res), validation.resolve)
        else:
            raise ApiError(415, "UnsupportedMediaType", f"unsupported patch type {ctype!r}")
        if not _pins_version(body):
            patched.setdefault("metadata", {})["resourceVersion"] = current["metadata"]["resourceVersion"]
        return dict(patched)

    def _sync_crds(self) -> None:
        """Serve what the installed CRDs define (they override the pre-installed operator kinds)."""
        dynamic: dict[tuple[str, str, str], Resource] = {}
        self.schemas = {}
        self.columns = {}
        for crd in self.store.list(resources.CRDS, None)[0]:
            columns = resources.printer_columns(crd)
            for res, schema in resources.from_crd(crd):
                dynamic[(res.group, res.version, res.plural)] = res
                self.columns[res] = [dict(c) for c in columns.get(res.version, [])]
                if schema is not None:
                    self.schemas[res] = OAS30Validator(schema)
        self.by_path = {(r.group, r.version, r.plural): r for r in self.base} | dynamic
        self.served = list(self.by_path.values())
        self.custom = set(dynamic.values())
        self.webhooks.by_plural = {(r.group, r.plural): r for r in self.served}

    def _remove_crd(self, crd: Obj) -> None:
        """A deleted CRD: its objects are deleted, its watches end, its kind is no longer served."""
        for res, _ in resources.from_crd(crd):
            self.store.purge(res)
            for w in list(self.streams):
                if w.resource == res:
                    w.queue.put_nowait(None)
        self._sync_crds()

    def _validate_custom(self, res: Resource, obj: Obj, mode: str = "Warn", old: Obj | None = None) -> list[str]:
        """A custom resource against its CRD's openAPIV3Schema: unknown fields pruned (a warning each
        with the default field validation, refused with Strict, as the real server), then every
        error, with its field path, then its CEL rules (``cel``; transition rules against ``old``)."""
        validator = self.schemas.get(res)
        if validator is None:
            return []
        warnings = validation.unknown_fields(res, validation.prune(obj, validator.schema), mode)
        validation.apply_defaults(obj, validator.schema)
        problems = sorted(validator.iter_errors(obj), key=lambda e: [str(p) for p in e.absolute_path])
        if problems:
            causes = [(".".join(str(p) for p in e.absolute_path) or "<object>", e.message) for e in problems]
            raise validation.invalid(res, (obj.get("metadata") or {}).get("name", ""), causes)
        broken = cel.violations(validator.schema, obj, old)
        if broken:
            raise validation.invalid(res, (obj.get("metadata") or {}).get("name", ""), broken)
        return warnings

    def _update_rules(
        self, res: Resource, sub: str, mode: str, warnings: list[str]
    ) -> Callable[[Obj, Obj], None] | None:
        """What an update must satisfy: the kind's schema (not for status writes) and its own rules;
        warnings about dropped fields go into ``warnings``."""
        if sub == "status":
            return None
        if res in self.custom:

            def check_custom(old: Obj, new: Obj) -> None:
                warnings.extend(self._validate_custom(res, new, mode, old))
                if (res.group, res.kind) == ("trainer.kubeflow.org", "TrainJob"):
                    validation.trainjob_update(res, old, new)

            return check_custom

        def check(old: Obj, new: Obj) -> None:
            warnings.extend(validation.schema(res, new, mode))
            validation.object_rules(res, new)
            if res.group == "batch" and res.plural == "jobs":
                validation.job_update(res, old, new)
            elif not res.group and res.plural == "pods":
                validation.pod_update(res, old, new)

        return check

    def _delete_namespace(self, name: str) -> Any:
        ns = self.store.get(resources.NAMESPACES, "", name)
        self.store.delete_namespace_contents(name, self.served)
        ns["metadata"]["finalizers"] = []
        return self.store.delete(resources.NAMESPACES, "", name)

    async def _watch(
        self,
        request: web.Request,
        res: Resource,
        namespace: str | None,
        *,
        convert: Callable[[Obj], Obj] | None = None,
        shown_as: Resource | None = None,
    ) -> web.StreamResponse:
        """A watch of ``res``; with ``convert``, its objects shown as ``shown_as`` (a view's)."""
        rv_param = request.query.get("resourceVersion", "")
        timeout = float(request.query.get("timeoutSeconds") or 1800)
        bookmarks = request.query.get("allowWatchBookmarks") in WATCH_TRUE
        self.watches_served += 1
        watcher = Watcher(res, namespace)
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)

        as_table = tables.wants_table(request.headers.get("Accept", ""))
        # As the real server's watch cache filters a selected watch: an object that stops matching
        # is sent as DELETED, one that starts matching as ADDED, others not at all.
        labels, fields = request.query.get("labelSelector", ""), request.query.get("fieldSelector", "")
        label_match = parse_label_selector(labels) if labels else None
        field_match = field_matcher(fields, res.kind) if fields else None

        def matches(obj: Obj) -> bool:
            meta = obj.get("metadata") or {}
            return (label_match is None or label_match.matches(meta.get("labels") or {})) and (
                field_match is None or field_match(obj)
            )

        async def send(kind: str, obj: Any, prev: Obj | None = None) -> None:
            if kind in ("ADDED", "MODIFIED", "DELETED") and (label_match is not None or field_match is not None):
                now, before = matches(obj), kind == "MODIFIED" and prev is not None and matches(prev)
                if kind == "MODIFIED" and now != before:
                    kind = "ADDED" if now else "DELETED"
                elif not now:
                    return
            if convert is not None and kind in ("ADDED", "MODIFIED", "DELETED"):
                obj = convert(obj)
            if as_table and kind in ("ADDED", "MODIFIED", "DELETED"):
                obj = self._table(request, shown_as or res, [obj], obj.get("metadata") or {})
            await response.write(json.dumps({"type": kind, "object": obj}).encode() + b"\n")

        # Register before reading history, so nothing falls between the two.
        self.store.watchers.append(watcher)
        self.streams.add(watcher)
        try:
            backlog: list[Event] = []
            if rv_param in ("", "0"):
                items, _ = self.store.list(res, namespace)
                for obj in items:
                    await send("ADDED", obj)
                last = self.store.rv
            else:
                try:
                    last = int(rv_param)
                    backlog = self.store.events_since(res, namespace, last)
                except ApiError as exc:
                    await send("ERROR", exc.status())
                    return await self._end(response)
                except ValueError:
                    await send("ERROR", ApiError(400, "BadRequest", f"invalid resourceVersion {rv_param!r}").status())
                    return await self._end(response)
            for old in backlog:
                await send(old.type, old.obj, old.prev)
                last = old.rv
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            while (remaining := deadline - loop.time()) > 0:
                try:
                    async with asyncio.timeout(min(remaining, BOOKMARK_SECONDS)):
                        event = await watcher.queue.get()
                except TimeoutError:
                    if bookmarks:
                        version = bookmark_version(watcher, self.store.rv, last)
                        await send(
                            "BOOKMARK",
                            {
                                "kind": (shown_as or res).kind,
                                "apiVersion": (shown_as or res).api_version,
                                "metadata": {"resourceVersion": str(version)},
                            },
                        )
                    continue
                if event is None:
                    break
                if event.rv > last:
                    if self.faults.watch_delay:
                        await asyncio.sleep(max(0.0, event.at + self.faults.watch_delay - loop.time()))
                    await send(event.type, event.obj, event.prev)
                    last = event.rv
        except (ConnectionError, asyncio.CancelledError):
            pass  # the client went away (ConnectionResetError, aiohttp's "Connection lost"), or we stop
        finally:
            with contextlib.suppress(ValueError):
                self.store.watchers.remove(watcher)
            self.streams.discard(watcher)
        return await self._end(response)

    @staticmethod
    async def _end(response: web.StreamResponse) -> web.StreamResponse:
        """End a watch's chunked stream cleanly (the client sees a complete response)."""
        with contextlib.suppress(ConnectionError, RuntimeError):
            await response.write_eof()
        return response

    # ----- discovery -------------------------------------------------------------------------

    def _groups(self) -> dict[str, Any]:
        groups: dict[str, list[str]] = {}
        for group, version in [(r.group, r.version) for r in self.served] + self.aggregator.groups():
            if group and version not in groups.setdefault(group, []):
                groups[group].append(version)
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [
                {
                    "name": g,
                    "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in vs],
                    "preferredVersion": {"groupVersion": f"{g}/{vs[0]}", "version": vs[0]},
                }
                for g, vs in sorted(groups.items())
            ],
        }

    def _resource_list(self, group: str, version: str) -> dict[str, Any] | None:
        mine = [r for r in self.served if r.group == group and r.version == version]
        if not mine:
            return None
        verbs = ["create", "delete", "get", "list", "patch", "update", "watch"]
        out: list[dict[str, Any]] = []
        for r in mine:
            out.append(
                {
                    "name": r.plural,
                    "singularName": r.kind.lower(),
                    "namespaced": r.namespaced,
                    "kind": r.kind,
                    "verbs": verbs,
                    "shortNames": list(r.short_names),
                }
            )
            if r.has_status:
                out.append(
                    {
                        "name": f"{r.plural}/status",
                        "singularName": "",
                        "namespaced": r.namespaced,
                        "kind": r.kind,
                        "verbs": ["get", "patch", "update"],
                    }
                )
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version,
            "resources": out,
        }


DEFAULT_TOKEN = "turnstile-sim"  # the token of the kubeconfig the simulator writes: an administrator


MAX_PATCH_CONFLICTS = 5  # the real server's maxRetryWhenPatchConflicts


def _pins_version(body: Any) -> bool:
    """Whether a patch names the resourceVersion it applies to (then a conflict is the client's)."""
    return isinstance(body, dict) and "resourceVersion" in (body.get("metadata") or {})


def user_of(request: web.Request) -> dict[str, Any]:
    """Who asks (the ``userInfo`` admission webhooks see). The simulator authenticates nobody: a
    bearer token names its user (``alice``, ``system:serviceaccount:ns:name``); the token of the
    kubeconfig it writes is ``system:admin``. So a test (or a second kubeconfig) can act as anyone."""
    header = request.headers.get("Authorization", "")
    token = header[len("Bearer ") :].strip() if header.startswith("Bearer ") else ""
    if not token or token == DEFAULT_TOKEN:
        return dict(webhooks.ADMIN)
    groups = ["system:authenticated"]
    if token.startswith("system:serviceaccount:"):
        groups.insert(0, "system:serviceaccounts")
    return {"username": token, "groups": groups}


def bookmark_version(watcher: Watcher, latest: int, sent: int) -> int:
    """The version up to which a stream has delivered everything: the store's latest only when
    nothing is still queued for it. A client resumes from a bookmark, so one ahead of a queued
    event would make it lose that event."""
    queued = [e.rv for e in watcher.queue._queue if e is not None]  # type: ignore[attr-defined]
    return max(sent, min(queued) - 1) if queued else max(sent, latest)


def _page_not_found() -> web.Response:
    """What a real API server answers for a path it does not serve: plain text, not a Status."""
    return web.Response(status=404, text="404 page not found\n", content_type="text/plain")


def _established(crd: Obj) -> Obj:
    """A CRD as the real server's CRD controllers leave it moments after its creation."""
    spec = crd.get("spec") or {}
    condition = {"status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
    return {
        **crd,
        "status": {
            "acceptedNames": dict(spec.get("names") or {}),
            "storedVersions": [v.get("name") for v in spec.get("versions") or [] if v.get("storage")],
            "conditions": [
                {**condition, "type": "NamesAccepted", "reason": "NoConflicts", "message": "no conflicts found"},
                {
                    **condition,
                    "type": "Established",
                    "reason": "InitialNamesAccepted",
                    "message": "the initial names have been accepted",
                },
            ],
        },
    }


def _respond(obj: Obj, warnings: list[str], *, status: int = 200) -> web.Response:
    """A JSON object response, with admission warnings as ``Warning`` headers (kubectl shows them)."""
    response = web.json_response(obj, status=status)
    for warning in warnings:
        response.headers.add("Warning", '299 - "' + warning.replace('"', "'") + '"')
    return response
