"""What the API server refuses: schema violations of built-in kinds and the Job's update rules.

Built-in objects are checked against Kubernetes' own OpenAPI schemas (kubernetes-validate,
strict: unknown fields are errors). A Job's pod template is immutable, except its scheduling
directives (node selector, affinity, tolerations, scheduling gates, labels, annotations) while
the Job is suspended and has never started; its selector and completions never change.
Errors are 422 ``Invalid`` with a cause per field, as the real server sends them.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import jsonschema
import referencing
from kubernetes_validate import utils as kv_utils

from admission.sim.objects import ApiError, Obj, Resource, clone

KUBERNETES_VERSION = "1.30"
MUTABLE_WHILE_SUSPENDED = (
    ("metadata", "labels"),
    ("metadata", "annotations"),
    ("spec", "nodeSelector"),
    ("spec", "affinity"),
    ("spec", "tolerations"),
    ("spec", "schedulingGates"),
)


def invalid(res: Resource, name: str, causes: list[tuple[str, str]]) -> ApiError:
    group = f".{res.group}" if res.group else ""
    summary = ", ".join(f"{field}: {message}" for field, message in causes)
    return ApiError(
        422,
        "Invalid",
        f'{res.kind}{group} "{name}" is invalid: {summary}',
        details={
            "name": name,
            "group": res.group,
            "kind": res.kind,
            "causes": [{"reason": "FieldValueInvalid", "field": f, "message": m} for f, m in causes],
        },
    )


@functools.cache
def _definitions(schema_dir: str) -> Any:
    return kv_utils.schema_contents(f"kubernetes-json-schema/{schema_dir}/_definitions.json", KUBERNETES_VERSION)


@functools.cache
def _validator(api_version: str, kind: str) -> jsonschema.protocols.Validator | None:
    """kubernetes-validate's strict schema for a kind, compiled once (it re-reads its files per call)."""
    version = [v for v in kv_utils.all_versions() if kv_utils.major_minor(v) <= KUBERNETES_VERSION][-1]
    api = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    schema_dir = f"v{version}-local-strict"
    try:
        contents = kv_utils.schema_contents(
            f"kubernetes-json-schema/{schema_dir}/{kind.lower()}-{api}.json", KUBERNETES_VERSION
        )
    except FileNotFoundError:
        return None
    registry: referencing.Registry[Any] = referencing.Resource.from_contents(contents) @ referencing.Registry()
    registry = referencing.Resource.from_contents(_definitions(schema_dir)) @ registry
    return jsonschema.validators.Draft202012Validator(contents, registry=registry)


def schema(res: Resource, obj: Obj) -> None:
    """Strict OpenAPI validation of a built-in object (every error); custom resources are left to their CRD."""
    validator = _validator(res.api_version, res.kind)
    if validator is None:
        return
    errors = sorted(validator.iter_errors(obj), key=lambda e: [str(p) for p in e.absolute_path])
    if errors:
        causes = [(".".join(str(p) for p in e.absolute_path) or "<object>", e.message) for e in errors]
        raise invalid(res, obj.get("metadata", {}).get("name", ""), causes)


def _without_directives(template: Any) -> Any:
    out = clone(template) if isinstance(template, dict) else {}
    for section, key in MUTABLE_WHILE_SUSPENDED:
        (out.get(section) or {}).pop(key, None)
    # An absent and an empty metadata/spec are the same struct to the real API server.
    return {k: v for k, v in out.items() if v not in ({}, None)}


def job_update(res: Resource, old: Obj, new: Obj) -> None:
    causes: list[tuple[str, str]] = []
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    if "selector" in old_spec and new_spec.get("selector") != old_spec["selector"]:
        causes.append(("spec.selector", "field is immutable"))
    if new_spec.get("completions") != old_spec.get("completions"):
        elastic = new_spec.get("completionMode") == "Indexed" and new_spec.get("completions") == new_spec.get(
            "parallelism"
        )
        if not elastic:
            causes.append(("spec.completions", "field is immutable"))
    old_t, new_t = old_spec.get("template"), new_spec.get("template")
    if old_t != new_t:
        never_started = bool(old_spec.get("suspend")) and not (old.get("status") or {}).get("startTime")
        if not never_started or _without_directives(old_t) != _without_directives(new_t):
            allowed = (
                "; only nodeSelector, affinity, tolerations, schedulingGates, labels and annotations may "
                "change, and only while the Job is suspended and has never started"
            )
            causes.append(("spec.template", "field is immutable" + allowed))
    if causes:
        raise invalid(res, new.get("metadata", {}).get("name", ""), causes)


def prune(obj: Any, schema: Any, path: str = "") -> list[str]:
    """Drop fields a CRD's structural schema does not declare, as the API server does; return their paths.

    Kept: everything under ``x-kubernetes-preserve-unknown-fields: true``, values of
    ``additionalProperties``, and at the root (and in embedded resources) apiVersion, kind and
    metadata. Since Kubernetes 1.27 the server's default field validation (Warn) reports each
    dropped field as a warning: ``unknown field "spec.foo"``.
    """
    if not isinstance(schema, dict):
        return []
    dropped: list[str] = []
    if isinstance(obj, dict):
        properties = schema.get("properties")
        additional = schema.get("additionalProperties")
        keep_unknown = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
        always = (
            {"apiVersion", "kind", "metadata"} if not path or schema.get("x-kubernetes-embedded-resource") else set()
        )
        for key in list(obj):
            child_path = f"{path}.{key}" if path else key
            if isinstance(properties, dict) and key in properties:
                dropped += prune(obj[key], properties[key], child_path)
            elif isinstance(additional, dict):
                dropped += prune(obj[key], additional, child_path)
            elif key in always or keep_unknown or additional is True or properties is None:
                continue
            else:
                del obj[key]
                dropped.append(child_path)
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(obj):
            dropped += prune(item, schema["items"], f"{path}[{i}]")
    return dropped
