"""Kueue's visibility API on the controller: the pending workloads of a ClusterQueue or LocalQueue,
in the order they will be considered, with their positions.

The paths and the ``PendingWorkloadsSummary`` shape are Kueue's (``visibility.kueue.x-k8s.io``,
served there by an aggregated API server; here on the metrics port, by the leading replica,
which holds the queues; a standby answers 503 so a client retries against the Service):

- ``/apis/visibility.kueue.x-k8s.io/{v1beta1,v1beta2}/clusterqueues/{cq}/pendingworkloads``
- ``/apis/visibility.kueue.x-k8s.io/{v1beta1,v1beta2}/namespaces/{ns}/localqueues/{lq}/pendingworkloads``

with ``offset`` (default 0) and ``limit`` (default 1000), as Kueue.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web

from admission.controller.term import Term
from admission.jobs.base import JobView
from admission.store.workload_objects import object_name
from queues.model import Workload

GROUP = "visibility.kueue.x-k8s.io"
VERSIONS = ("v1beta1", "v1beta2")
DEFAULT_LIMIT = 1000


def status(code: int, reason: str, message: str) -> web.Response:
    """A ``kind: Status`` failure, as an API server answers one."""
    body = {
        "apiVersion": "v1",
        "kind": "Status",
        "metadata": {},
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }
    return web.json_response(body, status=code)


def paging(query: Mapping[str, str]) -> tuple[int, int]:
    """Kueue's ``offset`` (default 0) and ``limit`` (default 1000); ``ValueError`` says what is wrong."""
    try:
        offset = int(query.get("offset", "0"))
        limit = int(query.get("limit", str(DEFAULT_LIMIT)))
    except ValueError:
        raise ValueError("offset and limit must be whole numbers") from None
    if offset < 0 or limit < 1:
        raise ValueError("offset must be >= 0 and limit >= 1")
    return offset, limit


def envelope(items: list[dict[str, Any]], version: str) -> dict[str, Any]:
    """Kueue's ``PendingWorkloadsSummary`` of ``items``, in the API version the path asked."""
    return {
        "kind": "PendingWorkloadsSummary",
        "apiVersion": f"{GROUP}/{version}",
        "metadata": {"creationTimestamp": None},
        "items": items,
    }


def _item(wl: Workload, cq_position: int, lq_position: int, view: JobView | None) -> dict[str, Any]:
    job = wl.key.split("/", 1)[1]
    # named as the Workload object is (as kubectl and the aggregated API name it), where the job is known
    name = object_name(view.integration.ref.kind, job, view.uid) if view is not None else job
    meta: dict[str, Any] = {
        "name": name,
        "namespace": wl.namespace,
        "creationTimestamp": dt.datetime.fromtimestamp(wl.created, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    if view is not None:
        ref = view.integration.ref
        meta["ownerReferences"] = [
            {"apiVersion": ref.api_version, "kind": ref.kind, "name": view.name, "uid": view.uid}
        ]
    return {
        "metadata": meta,
        "priority": wl.priority,
        "localQueueName": wl.local_queue,
        "positionInClusterQueue": cq_position,
        "positionInLocalQueue": lq_position,
    }


def summary(
    term: Term,
    cluster_queue: str,
    *,
    local_queue: tuple[str, str] | None,
    offset: int,
    limit: int,
    view_of: Callable[[str], JobView | None],
    version: str = "v1beta2",
) -> dict[str, Any]:
    """The pending workloads of ``cluster_queue`` (or of one of its LocalQueues), in order."""
    waiting = term.scheduler.pending.waiting(cluster_queue)
    per_lq: dict[tuple[str, str | None], int] = {}
    items = []
    for position, wl in enumerate(waiting):
        lq = (wl.namespace, wl.local_queue)
        lq_position = per_lq.get(lq, 0)
        per_lq[lq] = lq_position + 1
        if local_queue is None or lq == local_queue:
            items.append((wl, position, lq_position))
    page = items[offset : offset + limit]
    return envelope([_item(wl, p, lp, view_of(wl.key)) for wl, p, lp in page], version)


def routes(app: web.Application, term_of: Callable[[], Term | None], view_of: Callable[[str], JobView | None]) -> None:
    def answer(request: web.Request, cq: str | None, lq: tuple[str, str] | None) -> web.Response:
        if request.match_info["version"] not in VERSIONS:
            return status(404, "NotFound", f"{GROUP} serves {', '.join(VERSIONS)}")
        try:
            offset, limit = paging(request.query)
        except ValueError as exc:
            return status(400, "BadRequest", str(exc))
        term = term_of()
        if term is None:
            return status(
                503, "ServiceUnavailable", "this replica does not lead; ask again (another replica holds the queues)"
            )
        if lq is not None:
            obj = term.scheduler.config.local_queues.get(f"{lq[0]}/{lq[1]}")
            if obj is None:
                return status(404, "NotFound", f'localqueues.{GROUP} "{lq[1]}" not found in namespace {lq[0]}')
            cq = obj.spec.cluster_queue
        assert cq is not None
        if cq not in term.scheduler.config.cluster_queues:
            return status(404, "NotFound", f'clusterqueues.{GROUP} "{cq}" not found')
        version = request.match_info["version"]
        answer = summary(term, cq, local_queue=lq, offset=offset, limit=limit, view_of=view_of, version=version)
        return web.json_response(answer)

    async def cluster_queue(request: web.Request) -> web.Response:
        return answer(request, request.match_info["name"], None)

    async def local_queue(request: web.Request) -> web.Response:
        return answer(request, None, (request.match_info["namespace"], request.match_info["name"]))

    base = f"/apis/{GROUP}/{{version}}"
    app.router.add_get(f"{base}/clusterqueues/{{name}}/pendingworkloads", cluster_queue)
    app.router.add_get(f"{base}/namespaces/{{namespace}}/localqueues/{{name}}/pendingworkloads", local_queue)
