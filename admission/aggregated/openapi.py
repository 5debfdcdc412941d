"""The aggregated API's OpenAPI documents, as the Kubernetes aggregator downloads them.

The API server's aggregator fetches ``/openapi/v2`` and ``/openapi/v3`` from every APIService's
backend (every minute, and logs an error for each one that serves none); ``kubectl explain`` and
client-side validation read what it merged. So the two group-versions served here describe their
kinds: ``turnstile.dev/v1alpha1`` Workload (and its list) and ``visibility.kueue.x-k8s.io/v1beta2``
PendingWorkloadsSummary, each schema tagged with ``x-kubernetes-group-version-kind`` as the
aggregator and kubectl expect. The documents are static (no queue data), so they are served to any
caller of the TLS port, as the API server serves its own ``/openapi`` to any authenticated user.

The schemas name the fields a reader needs and leave the rest open
(``x-kubernetes-preserve-unknown-fields``): a Workload here is Kueue's Workload shape
(``admission.store.workload_objects``), whose full schema is Kueue's CRD.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from aiohttp import web

from admission.controller.objects import visibility
from admission.store import workload_shape as shape

VISIBILITY_VERSION = "v1beta2"  # (the preferred one)
VISIBILITY_VERSIONS = ("v1beta2", "v1beta1")  # Kueue serves both; v0.15-v0.19 clients ask v1beta1
OPEN: dict[str, Any] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def _meta(description: str) -> dict[str, Any]:
    return {
        "apiVersion": {"type": "string", "description": "the API version of this object"},
        "kind": {"type": "string", "description": "the kind of this object"},
        "metadata": {**OPEN, "description": f"standard object metadata ({description})"},
    }


def _gvk(group: str, version: str, kind: str) -> list[dict[str, str]]:
    return [{"group": group, "version": version, "kind": kind}]


def schemas() -> dict[str, dict[str, Any]]:
    """Definition name (Kubernetes' reverse-domain convention) -> schema, for both group-versions."""
    wl = f"dev.turnstile.{shape.VERSION}.Workload"
    summary = f"io.x-k8s.kueue.visibility.{VISIBILITY_VERSION}.PendingWorkloadsSummary"
    return {
        wl: {
            "type": "object",
            "description": "A queued, admitted or finished job as Turnstile keeps it, in Kueue's Workload shape "
            "(read-only; from PostgreSQL).",
            "properties": {
                **_meta("namespace and name of the job's workload"),
                "spec": {
                    **OPEN,
                    "description": "podSets (each pod set's count, requests and node constraints), queueName, "
                    "priority, priorityClassRef, active",
                },
                "status": {
                    **OPEN,
                    "description": "conditions (QuotaReserved, Admitted, Evicted, Preempted, Finished) with Kueue's "
                    "reasons, and admission (clusterQueue, podSetAssignments)",
                },
            },
            "x-kubernetes-group-version-kind": _gvk(shape.GROUP, shape.VERSION, "Workload"),
        },
        f"{wl}List": {
            "type": "object",
            "description": "A page of Workloads.",
            "properties": {
                **_meta("resourceVersion and continue"),
                "items": {"type": "array", "items": {"$ref": f"#/definitions/{wl}"}},
            },
            "required": ["items"],
            "x-kubernetes-group-version-kind": _gvk(shape.GROUP, shape.VERSION, "WorkloadList"),
        },
        summary: {
            "type": "object",
            "description": "The pending workloads of a ClusterQueue or LocalQueue, in queue order (Kueue's "
            "visibility API).",
            "properties": {
                **_meta("the queue's"),
                "items": {
                    "type": "array",
                    "description": "each pending workload with positionInClusterQueue and positionInLocalQueue",
                    "items": OPEN,
                },
            },
            "x-kubernetes-group-version-kind": [  # (the same shape in both versions)
                g for v in VISIBILITY_VERSIONS for g in _gvk(visibility.GROUP, v, "PendingWorkloadsSummary")
            ],
        },
    }


def _v3_refs(schema: Any) -> Any:
    """A v2 schema as OpenAPI v3 writes it: ``#/definitions/`` references become ``#/components/schemas/``."""
    if isinstance(schema, dict):
        return {k: (v.replace("#/definitions/", "#/components/schemas/") if k == "$ref" else _v3_refs(v))
                for k, v in schema.items()}  # fmt: skip
    if isinstance(schema, list):
        return [_v3_refs(v) for v in schema]
    return schema


def _get(summary: str, ref: str, version3: bool) -> dict[str, Any]:
    target = f"#/components/schemas/{ref}" if version3 else f"#/definitions/{ref}"
    ok: dict[str, Any] = {"description": "OK"}
    if version3:
        ok["content"] = {"application/json": {"schema": {"$ref": target}}}
    else:
        ok["schema"] = {"$ref": target}
    return {"get": {"description": summary, "responses": {"200": ok, "401": {"description": "Unauthorized"}}}}


def _paths(group_version: str, version3: bool) -> dict[str, Any]:
    defs = list(schemas())
    wl, wl_list, summary = defs[0], defs[1], defs[2]
    if group_version == f"{shape.GROUP}/{shape.VERSION}":
        base = f"/apis/{group_version}"
        return {
            f"{base}/workloads": _get("list Workloads in every namespace", wl_list, version3),
            f"{base}/namespaces/{{namespace}}/workloads": _get("list Workloads in a namespace", wl_list, version3),
            f"{base}/namespaces/{{namespace}}/workloads/{{name}}": _get("read a Workload", wl, version3),
        }
    base = f"/apis/{group_version}"
    return {
        f"{base}/clusterqueues/{{name}}/pendingworkloads": _get(
            "the pending workloads of a ClusterQueue", summary, version3
        ),
        f"{base}/namespaces/{{namespace}}/localqueues/{{name}}/pendingworkloads": _get(
            "the pending workloads of a LocalQueue", summary, version3
        ),
    }


GROUP_VERSIONS = (f"{shape.GROUP}/{shape.VERSION}", *(f"{visibility.GROUP}/{v}" for v in VISIBILITY_VERSIONS))
INFO = {"title": "Turnstile", "version": shape.VERSION}


def v2() -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for gv in GROUP_VERSIONS:
        paths.update(_paths(gv, version3=False))
    return {"swagger": "2.0", "info": INFO, "paths": paths, "definitions": schemas()}


def v3(group_version: str) -> dict[str, Any]:
    wanted = {name: _v3_refs(s) for name, s in schemas().items() if _in(s, group_version)}
    return {"openapi": "3.0.0", "info": INFO, "paths": _paths(group_version, version3=True),
            "components": {"schemas": wanted}}  # fmt: skip


def _in(schema: dict[str, Any], group_version: str) -> bool:
    group, _, version = group_version.rpartition("/")
    return any(g["group"] == group and g["version"] == version for g in schema["x-kubernetes-group-version-kind"])


def _hash(doc: dict[str, Any]) -> str:
    return hashlib.sha512(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32].upper()


def routes(app: web.Application) -> None:
    """``/openapi/v2``, ``/openapi/v3`` (the index of group-versions) and each group-version's document."""

    async def serve_v2(_request: web.Request) -> web.Response:
        return web.json_response(v2())

    async def serve_index(_request: web.Request) -> web.Response:
        paths = {f"apis/{gv}": {"serverRelativeURL": f"/openapi/v3/apis/{gv}?hash={_hash(v3(gv))}"}
                 for gv in GROUP_VERSIONS}  # fmt: skip
        return web.json_response({"paths": paths})

    async def serve_group(request: web.Request) -> web.Response:
        gv = f"{request.match_info['group']}/{request.match_info['version']}"
        if gv not in GROUP_VERSIONS:
            return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404,
                                      "reason": "NotFound", "message": f"no OpenAPI for {gv}"}, status=404)  # fmt: skip
        return web.json_response(v3(gv))

    app.router.add_get("/openapi/v2", serve_v2)
    app.router.add_get("/openapi/v3", serve_index)
    app.router.add_get("/openapi/v3/apis/{group}/{version}", serve_group)
