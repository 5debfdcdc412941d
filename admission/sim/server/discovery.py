"""Discovery, as kubectl and client libraries read it: ``/version``, ``/api``, ``/apis``, each
group version's resource list (verbs, short names, status subresources) and the OpenAPI documents
(``admission.sim.server.schema.openapi`` writes them); a path not served is answered as the real server
does, in plain text.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from admission.sim.server.objects import Resource
from admission.sim.server.schema import openapi

# The server models Kubernetes 1.35 (its schemas: ``kube_schemas.VERSION``) but says 1.31: kubectl
# sends protobuf bodies to servers from 1.32 on (``kubectl create namespace``), which this one does
# not decode (docs/simulated-cluster.md)
REPORTED = "1.31.0"
VERSION = {
    "major": "1",
    "minor": REPORTED.split(".")[1],
    "gitVersion": f"v{REPORTED}-turnstile-sim",
    "gitCommit": "turnstile",
    "gitTreeState": "clean",
    "buildDate": "2026-11-30T00:00:00Z",
    "goVersion": "n/a (python)",
    "compiler": "cpython",
    "platform": "linux/amd64",
}


def groups(served: list[Resource], aggregated: list[tuple[str, str]]) -> dict[str, Any]:
    """``/apis``: every group and its versions, the served kinds' and the aggregated APIs'."""
    groups: dict[str, list[str]] = {}
    for group, version in [(r.group, r.version) for r in served] + aggregated:
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


def resource_list(served: list[Resource], group: str, version: str) -> dict[str, Any] | None:
    """``/apis/GROUP/VERSION`` (``/api/v1``): the kinds served there; None when none is."""
    mine = [r for r in served if r.group == group and r.version == version]
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


def openapi_document(parts: list[str], accept: str, served: list[Resource]) -> web.StreamResponse:
    """``/openapi/v2`` (JSON or protobuf) and ``/openapi/v3[/api/v1|/apis/GROUP/VERSION]``."""
    if parts == ["v2"] and openapi.V2_PROTOBUF in accept:
        return web.Response(body=openapi.swagger_protobuf(), content_type="application/octet-stream")
    if parts == ["v2"]:
        return web.json_response(openapi.swagger(served))
    if parts == ["v3"]:
        return web.json_response(openapi.root(served))
    if parts[:1] == ["v3"] and parts[1:2] == ["api"] and len(parts) == 3:
        group, version = "", parts[2]
    elif parts[:1] == ["v3"] and parts[1:2] == ["apis"] and len(parts) == 4:
        group, version = parts[2], parts[3]
    else:
        return page_not_found()
    if not any(r.group == group and r.version == version for r in served):
        return page_not_found()
    return web.json_response(openapi.group_version_document(group, version, served))


def page_not_found() -> web.Response:
    """What a real API server answers for a path it does not serve: plain text, not a Status."""
    return web.Response(status=404, text="404 page not found\n", content_type="text/plain")
