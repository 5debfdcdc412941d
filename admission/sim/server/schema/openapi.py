"""``/openapi/v3`` and ``/openapi/v2`` of the simulated API server: enough for kubectl to validate.

kubectl (1.27+) validates by asking the server: it reads ``/openapi/v3`` (a root naming one
document per group-version), finds in the group-version's document the PATCH operation of the
object's kind (``x-kubernetes-group-version-kind``) and, when that operation takes the
``fieldValidation`` query parameter, sends its writes with ``fieldValidation=Strict`` and leaves
the checking to the server (``admission.sim.server.schema.validation``). So plain ``kubectl create -f`` and
``kubectl apply -f`` work without ``--validate=false``, as on a real cluster. For a custom
resource kubectl falls back to the Namespace document, as the real server's CRDs publish theirs.

The documents describe paths and operations only, not every field's schema (``kubectl explain``
needs those: a known difference from a real server, listed in ``docs/simulated-cluster.md``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

from admission.sim.server.objects import Resource
from admission.sim.server.schema import kube_schemas

FIELD_VALIDATION = {
    "name": "fieldValidation",
    "in": "query",
    "description": "Ignore, Warn (the default) or Strict: what the server does with unknown or duplicate fields.",
    "schema": {"type": "string", "uniqueItems": True},
}
DRY_RUN = {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": True}}
FIELD_MANAGER = {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": True}}
PATCH_TYPES = [
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
]


def group_version_path(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def _gvk(res: Resource) -> dict[str, str]:
    return {"group": res.group, "version": res.version, "kind": res.kind}


def _operation(res: Resource, verb: str, action: str, params: list[dict[str, Any]]) -> dict[str, Any]:
    op: dict[str, Any] = {
        "operationId": f"{verb}{res.kind}",
        "parameters": params,
        "responses": {"200": {"description": "OK"}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": _gvk(res),
    }
    if verb in ("patch",):
        op["requestBody"] = {"content": {t: {"schema": {"type": "object"}} for t in PATCH_TYPES}, "required": True}
    elif verb in ("create", "replace"):
        op["requestBody"] = {"content": {"application/json": {"schema": {"type": "object"}}}, "required": True}
    return op


def group_version_document(group: str, version: str, served: Iterable[Resource]) -> dict[str, Any]:
    """The OpenAPI v3 document of one group-version: every path and operation of its kinds."""
    paths: dict[str, Any] = {}
    base = "/" + group_version_path(group, version)
    writes = [FIELD_VALIDATION, DRY_RUN, FIELD_MANAGER]
    for res in served:
        if (res.group, res.version) != (group, version):
            continue
        scope = f"{base}/namespaces/{{namespace}}/{res.plural}" if res.namespaced else f"{base}/{res.plural}"
        paths[scope] = {
            "get": _operation(res, "list", "list", []),
            "post": _operation(res, "create", "post", writes),
        }
        one = {
            "get": _operation(res, "read", "get", []),
            "put": _operation(res, "replace", "put", writes),
            "patch": _operation(res, "patch", "patch", writes),
            "delete": _operation(res, "delete", "delete", [DRY_RUN]),
        }
        paths[f"{scope}/{{name}}"] = one
        if res.has_status:
            paths[f"{scope}/{{name}}/status"] = {
                "get": _operation(res, "readStatus", "get", []),
                "put": _operation(res, "replaceStatus", "put", writes),
                "patch": _operation(res, "patchStatus", "patch", writes),
            }
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (turnstile simulated cluster)", "version": f"v{kube_schemas.VERSION}"},
        "paths": paths,
        "components": {"schemas": {}},
    }


def root(served: Iterable[Resource]) -> dict[str, Any]:
    """``/openapi/v3``: one entry per group-version, each with a content hash (as the real server)."""
    out: dict[str, Any] = {}
    resources = list(served)
    for group, version in sorted({(r.group, r.version) for r in resources}):
        doc = group_version_document(group, version, resources)
        digest = hashlib.sha512(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:64].upper()
        path = group_version_path(group, version)
        out[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest}"}
    return {"paths": out}


V2_PROTOBUF = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"


def swagger_protobuf() -> bytes:
    """``/openapi/v2`` as kubectl asks for it (protobuf only, gnostic's ``openapi_v2.Document``), for
    a group-version ``/openapi/v3`` does not list, i.e. a kind the server does not serve: a document
    with no definitions, so kubectl finds no schema for the kind, validates nothing, and says what a
    real server's kubectl says (``no matches for kind "Widget" in version "example.com/v1"``)
    instead of failing to parse JSON as protobuf. Field 1 is ``swagger``: "2.0"."""
    value = b"2.0"
    return bytes([(1 << 3) | 2, len(value)]) + value


def swagger(served: Iterable[Resource]) -> dict[str, Any]:
    """``/openapi/v2`` as JSON (clients older than kubectl 1.27 ask for it): paths and operations."""
    paths: dict[str, Any] = {}
    resources = list(served)
    for group, version in sorted({(r.group, r.version) for r in resources}):
        for path, item in group_version_document(group, version, resources)["paths"].items():
            converted = {}
            for method, op in item.items():
                params = [
                    {"name": p["name"], "in": p["in"], "type": "string", "uniqueItems": True} for p in op["parameters"]
                ]
                if "requestBody" in op:
                    params.append({"name": "body", "in": "body", "required": True, "schema": {"type": "object"}})
                converted[method] = {**{k: v for k, v in op.items() if k != "requestBody"}, "parameters": params}
            paths[path] = converted
    return {
        "swagger": "2.0",
        "info": {"title": "Kubernetes (turnstile simulated cluster)", "version": f"v{kube_schemas.VERSION}"},
        "paths": paths,
        "definitions": {},
    }
