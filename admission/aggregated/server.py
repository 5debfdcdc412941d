"""The controller's aggregated API: workloads and Kueue's visibility API, through the API server.

Two APIServices route here (``manifests/base/apiservices.yaml``), on the webhook's TLS port:

- ``turnstile.dev/v1alpha1``, resource ``workloads`` (short name ``wl``; get, list): queued,
  admitted and finished workloads in Kueue's Workload shape (``admission.store.workload_objects``),
  so ``kubectl get workloads -A`` lists them with their queue, ClusterQueue, state, priority,
  flavors and reason; ``-o yaml`` shows one as Kueue would. Lists are paged (``limit`` and
  ``continue``, as kubectl asks), straight from PostgreSQL's index.
- ``visibility.kueue.x-k8s.io/v1beta2`` (and ``v1beta1``, the same answers): Kueue's visibility
  API, the pending workloads of a ClusterQueue or LocalQueue in queue order with their positions
  (``kubectl get --raw /apis/visibility.kueue.x-k8s.io/v1beta2/clusterqueues/CQ/pendingworkloads``).

Every replica answers from PostgreSQL, so the Service may route to any of them. Requests must
come through the API server (front-proxy certificate) and are authorized by it
(SubjectAccessReview, ``admission.aggregated.auth``): a data scientist lists the workloads of the
namespaces RBAC lets them read, and ``-A`` needs the right cluster-wide, as for any resource. If
every replica is down, the API server reports the APIService unavailable; discovery then degrades
as Kubernetes does for any unavailable APIService (kubectl warns, and the rest works).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from admission.aggregated import openapi
from admission.aggregated.auth import Access, Authorizer, FrontProxy, User
from admission.controller.objects import visibility
from admission.controller.objects.visibility import status
from admission.kube import table
from admission.kube.client import KubeError
from admission.store import database
from admission.store import workload_objects as objects
from admission.store import workload_shape as shape

VISIBILITY = visibility.GROUP
VISIBILITY_VERSIONS = openapi.VISIBILITY_VERSIONS  # v1beta2 and v1beta1: the same answers
WORKLOADS = f"/apis/{shape.GROUP}/{shape.VERSION}"
MAX_PAGE = 5000  # objects per page at most, whatever the client asks

Handler = Callable[[web.Request, User], Awaitable[web.StreamResponse]]


def _resources(group_version: str, resources: list[dict[str, Any]]) -> dict[str, Any]:
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}


WORKLOAD_RESOURCES = _resources(
    f"{shape.GROUP}/{shape.VERSION}",
    [{"name": "workloads", "singularName": "workload", "namespaced": True, "kind": "Workload",
      "verbs": ["get", "list"], "shortNames": ["twl"]}],
)  # fmt: skip
VISIBILITY_RESOURCES = [
    {"name": "clusterqueues", "singularName": "clusterqueue", "namespaced": False, "kind": "ClusterQueue",
     "verbs": ["get"]},
    {"name": "clusterqueues/pendingworkloads", "singularName": "", "namespaced": False,
     "kind": "PendingWorkloadsSummary", "verbs": ["get"]},
    {"name": "localqueues", "singularName": "localqueue", "namespaced": True, "kind": "LocalQueue",
     "verbs": ["get"]},
    {"name": "localqueues/pendingworkloads", "singularName": "", "namespaced": True,
     "kind": "PendingWorkloadsSummary", "verbs": ["get"]},
]  # fmt: skip

COLUMNS = [
    table.column("Name", fmt="name"),
    table.column("Queue"),
    table.column("Reserved in"),
    table.column("Admitted"),
    table.column("Finished"),
    table.column("State"),
    table.column("Priority", "integer"),
    table.column("Flavor"),
    table.column("Reason"),
    table.column("Age", "date"),
]


def _cells(obj: dict[str, Any]) -> list[Any]:
    s = shape.summary(obj)
    conditions = {c["type"]: c["status"] for c in obj["status"]["conditions"]}
    return [
        obj["metadata"]["name"],
        s["queue"],
        s["clusterQueue"],
        conditions.get("Admitted", ""),
        conditions.get("Finished", ""),
        s["state"],
        int(s["priority"]),
        s["flavors"],
        s["reason"],
        shape.age(obj),
    ]


class AggregatedApi:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        front_proxy: FrontProxy,
        authorizer: Authorizer,
        *,
        pods_ready: bool = False,
    ) -> None:
        self.sessions = sessions
        self.pods_ready = pods_ready  # waitForPodsReady is on: the workloads carry Kueue's PodsReady condition
        self.front_proxy = front_proxy
        self.authorizer = authorizer
        self.requests = 0

    def routes(self, app: web.Application) -> None:
        openapi.routes(app)  # (static schemas, for the aggregator and kubectl explain: not guarded)
        app.router.add_get(WORKLOADS, self._guard(self._discovery(WORKLOAD_RESOURCES)))
        app.router.add_get(f"{WORKLOADS}/workloads", self._guard(self._list))
        app.router.add_get(f"{WORKLOADS}/namespaces/{{namespace}}/workloads", self._guard(self._list))
        app.router.add_get(f"{WORKLOADS}/namespaces/{{namespace}}/workloads/{{name}}", self._guard(self._get))
        for version in VISIBILITY_VERSIONS:
            pending = f"/apis/{VISIBILITY}/{version}"
            found = _resources(f"{VISIBILITY}/{version}", VISIBILITY_RESOURCES)
            app.router.add_get(pending, self._guard(self._discovery(found)))
            app.router.add_get(f"{pending}/clusterqueues/{{name}}/pendingworkloads", self._guard(self._pending))
            app.router.add_get(
                f"{pending}/namespaces/{{namespace}}/localqueues/{{name}}/pendingworkloads", self._guard(self._pending)
            )

    def _guard(self, handler: Handler) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        """Authenticated through the API server, or 401; the store away: 503; never a traceback."""

        async def guarded(request: web.Request) -> web.StreamResponse:
            self.requests += 1
            user = self.front_proxy.user(request)
            if user is None:
                return status(401, "Unauthorized", "Unauthorized: ask through the Kubernetes API server")
            try:
                return await handler(request, user)
            except database.ERRORS as exc:
                return status(503, "ServiceUnavailable", f"the database is unavailable: {database.describe_error(exc)}")
            except KubeError as exc:
                return status(503, "ServiceUnavailable", f"could not ask the API server who may read this: {exc}")

        return guarded

    def _discovery(self, body: dict[str, Any]) -> Handler:
        async def discovery(_request: web.Request, _user: User) -> web.StreamResponse:
            return web.json_response(body)

        return discovery

    async def _authorize(self, user: User, access: Access) -> web.Response | None:
        if await self.authorizer.allowed(user, access):
            return None
        return status(403, "Forbidden", access.denial(user))

    async def _list(self, request: web.Request, user: User) -> web.StreamResponse:
        namespace = request.match_info.get("namespace")
        refused = await self._authorize(user, Access("list", shape.GROUP, "workloads", namespace or ""))
        if refused is not None:
            return refused
        if request.query.get("watch") in ("1", "true"):
            return status(405, "MethodNotAllowed", "workloads cannot be watched here; list them again")
        try:
            limit = int(request.query["limit"]) if request.query.get("limit") else None
        except ValueError:
            return status(400, "BadRequest", "limit must be a whole number")
        limit = min(limit or MAX_PAGE, MAX_PAGE)
        token = request.query.get("continue")
        try:
            async with database.transaction(self.sessions) as session:
                page = await objects.page(
                    session, namespace=namespace, limit=limit, token=token, pods_ready=self.pods_ready
                )
        except ValueError as exc:
            return status(410, "Expired", str(exc))
        meta: dict[str, Any] = {"resourceVersion": ""}
        if page.next:
            meta["continue"] = page.next
        if table.wants_table(request.headers.get("Accept", "")):
            include = request.query.get("includeObject", "Metadata")
            return web.json_response(table.table(COLUMNS, _cells, page.items, include=include, metadata=meta))
        body = {"apiVersion": shape.API_VERSION, "kind": "WorkloadList", "metadata": meta, "items": page.items}
        return web.json_response(body)

    async def _get(self, request: web.Request, user: User) -> web.StreamResponse:
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        refused = await self._authorize(user, Access("get", shape.GROUP, "workloads", namespace, name))
        if refused is not None:
            return refused
        async with database.transaction(self.sessions) as session:
            obj = await objects.get(session, namespace, name, pods_ready=self.pods_ready)
        if obj is None:
            return status(404, "NotFound", f'workloads.{shape.GROUP} "{name}" not found')
        if table.wants_table(request.headers.get("Accept", "")):
            include = request.query.get("includeObject", "Metadata")
            return web.json_response(table.table(COLUMNS, _cells, [obj], include=include, metadata={}))
        return web.json_response(obj)

    async def _pending(self, request: web.Request, user: User) -> web.StreamResponse:
        namespace, name = request.match_info.get("namespace"), request.match_info["name"]
        resource = "localqueues" if namespace else "clusterqueues"
        access = Access("get", VISIBILITY, resource, namespace or "", name, "pendingworkloads")
        refused = await self._authorize(user, access)
        if refused is not None:
            return refused
        try:
            offset, limit = visibility.paging(request.query)
        except ValueError as exc:
            return status(400, "BadRequest", str(exc))
        async with database.transaction(self.sessions) as session:
            if namespace:
                found = await objects.local_queue_target(session, namespace, name)
                if found is None:
                    return status(404, "NotFound", f'localqueues.{VISIBILITY} "{name}" not found')
                cq, lq = found, (namespace, name)
            else:
                if not await objects.cluster_queue_exists(session, name):
                    return status(404, "NotFound", f'clusterqueues.{VISIBILITY} "{name}" not found')
                cq, lq = name, None
            items = await objects.pending(session, cq, local_queue=lq, offset=offset, limit=min(limit, MAX_PAGE))
        version = request.path.split("/")[3]  # (/apis/visibility.kueue.x-k8s.io/<version>/...)
        return web.json_response(visibility.envelope(items, version))
