"""What the API server refuses: schema violations of built-in kinds and the Job's update rules.

Built-in objects are checked against Kubernetes' own OpenAPI schemas (v1.35, strict: unknown
fields are errors; bundled, ``admission.sim.server.schema.kube_schemas``). A Job's pod template is
immutable, except its scheduling directives (node selector, affinity, tolerations, scheduling
gates, labels, annotations) while the Job is suspended and has never started; its selector and
completions never change.
Errors are 422 ``Invalid`` with a cause per field, as the real server sends them.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import jsonschema
import referencing

from admission.sim.server.objects import ApiError, Obj, Resource, clone
from admission.sim.server.schema import cel, claim_rules, kube_schemas
from queues.kueue import validation
from queues.podsets import jobs, pod_resources

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


def _definitions() -> Any:
    return kube_schemas.contents("_definitions.json")


@functools.cache
def _validator(api_version: str, kind: str) -> jsonschema.protocols.Validator | None:
    """Kubernetes' strict schema for a kind (``admission.sim.server.schema.kube_schemas``), compiled once."""
    api = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    try:
        contents = kube_schemas.contents(f"{kind.lower()}-{api}.json")
    except FileNotFoundError:
        return None
    registry: referencing.Registry[Any] = referencing.Resource.from_contents(contents) @ referencing.Registry()
    registry = referencing.Resource.from_contents(_definitions()) @ registry
    return jsonschema.validators.Draft202012Validator(contents, registry=registry, format_checker=INTEGERS)


# Go's integer fields: a number outside int32 (a pod's priority, a Job's parallelism) or int64 cannot
# be decoded into its struct, and the real server refuses it (there a 400, here a 422 with the path)
INTEGERS = jsonschema.FormatChecker(formats=())


@INTEGERS.checks("int32")
def _int32(value: object) -> bool:
    return not isinstance(value, int) or isinstance(value, bool) or -(2**31) <= value < 2**31


@INTEGERS.checks("int64")
def _int64(value: object) -> bool:
    return not isinstance(value, int) or isinstance(value, bool) or -(2**63) <= value < 2**63


FIELD_VALIDATION = ("Ignore", "Warn", "Strict")


def field_validation(value: str | None) -> str:
    """The request's ``fieldValidation`` (Warn when absent, as the real server since 1.23), or 400."""
    mode = value or "Warn"
    if mode not in FIELD_VALIDATION:
        raise ApiError(400, "BadRequest", f"fieldValidation must be one of {', '.join(FIELD_VALIDATION)}, not {mode!r}")
    return mode


def unknown_fields(res: Resource, unknown: list[str], mode: str) -> list[str]:
    """What the real server does with fields the kind does not declare: ``Strict`` refuses the
    request (400), ``Warn`` drops them with a warning each, ``Ignore`` drops them silently."""
    if not unknown:
        return []
    if mode == "Strict":
        fields = ", ".join(f'unknown field "{p}"' for p in unknown)
        raise ApiError(
            400,
            "BadRequest",
            f'{res.kind} in version "{res.version}" cannot be handled as a {res.kind}: strict decoding error: {fields}',
        )
    return [f'unknown field "{p}"' for p in unknown] if mode == "Warn" else []


def _path(parts: Any) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


@functools.cache
def _kinds() -> dict[tuple[str, str, str], str]:
    """(group, version, kind) -> the definition of that kind in Kubernetes' schemas."""
    defs = _definitions()["$defs"]
    out = {}
    for name, definition in defs.items():
        for gvk in definition.get("x-kubernetes-group-version-kind") or []:
            out[(gvk.get("group", ""), gvk.get("version", ""), gvk.get("kind", ""))] = name
    return out


def resolve(node: Any) -> dict[str, Any]:
    """A schema node with its ``$ref`` followed (into Kubernetes' definitions)."""
    if not isinstance(node, dict):
        return {}
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        found = _definitions()["$defs"].get(ref[len("#/$defs/") :])
        return found if isinstance(found, dict) else {}
    return node


def kind_schema(res: Resource) -> dict[str, Any] | None:
    """The resolved schema of a built-in kind (its patch metadata drives strategic merge), or None."""
    name = _kinds().get((res.group, res.version, res.kind))
    return resolve({"$ref": f"#/$defs/{name}"}) if name else None


def schema(res: Resource, obj: Obj, mode: str = "Warn") -> list[str]:
    """OpenAPI validation of a built-in object against its kind's schema: unknown fields as
    ``mode`` says (``unknown_fields``; dropped from ``obj`` unless refused), every other error
    a 422 with its field path. Custom resources are left to their CRD. Returns the warnings."""
    validator = _validator(res.api_version, res.kind)
    if validator is None:
        return []
    unknown: list[tuple[list[Any], str]] = []
    errors = []
    for e in validator.iter_errors(obj):
        if e.validator == "additionalProperties" and isinstance(e.instance, dict):
            declared = (e.schema.get("properties") or {}) if isinstance(e.schema, dict) else {}
            unknown.extend((list(e.absolute_path), k) for k in e.instance if k not in declared)
        else:
            errors.append(e)
    warnings = unknown_fields(res, sorted(_path([*at, key]) for at, key in unknown), mode)
    for at, key in unknown:  # dropped, as the real server's decoder does
        holder: Any = obj
        for part in at:
            holder = holder[part]
        holder.pop(key, None)
    if errors:
        errors.sort(key=lambda e: [str(p) for p in e.absolute_path])
        causes = [(_path(e.absolute_path) or "<object>", e.message) for e in errors]
        raise invalid(res, obj.get("metadata", {}).get("name", ""), causes)
    return warnings


MAX_ANNOTATIONS_BYTES = 256 * 1024


def object_rules(res: Resource, obj: Obj) -> None:
    """What the real server checks beyond the schema: the name (a namespace's a DNS label, a Job's at
    most 63 characters since it becomes the job-name label, others a DNS subdomain), label keys and
    values, annotation keys and their 256 KiB in total; Pods' and Jobs' containers' resources
    (``queues.podsets.jobs.api_problems``), DRA claims' requests (``claim_rules``). 422, every cause."""
    causes: list[tuple[str, str]] = []
    meta = obj.get("metadata") or {}
    name = str(meta.get("name") or "")
    if res.plural == "namespaces" and not res.group:
        if len(name) > 63 or not validation.dns_label_ok(name):
            causes.append(
                (
                    "metadata.name",
                    f"Invalid value: {name!r}: a lowercase RFC 1123 label must consist of "
                    "lower case alphanumeric characters or '-', and at most 63 characters",
                )
            )
    elif err := validation.dns_subdomain_error(name):
        causes.append(("metadata.name", f"Invalid value: {name!r}: {err}"))
    elif (res.group, res.kind) == ("batch", "Job") and len(name) > 63:
        causes.append(("metadata.name", f"Invalid value: {name!r}: must be no more than 63 characters"))
    for key, value in (meta.get("labels") or {}).items():
        if err := validation.label_key_error(str(key)) or validation.label_value_error(str(value)):
            causes.append(("metadata.labels", f"Invalid value: {err}"))
    total = 0
    for key, value in (meta.get("annotations") or {}).items():
        total += len(str(key)) + len(str(value))
        if err := validation.label_key_error(str(key)):
            causes.append(("metadata.annotations", f"Invalid value: {err.replace('label key', 'annotation key')}"))
    if total > MAX_ANNOTATIONS_BYTES:
        causes.append(("metadata.annotations", f"Too long: must have at most {MAX_ANNOTATIONS_BYTES} bytes"))
    if (res.group, res.kind) == ("", "Pod"):
        causes.extend((e.path, e.message) for e in pod_resources.pod_problems(obj.get("spec") or {}))
    elif (res.group, res.kind) == ("batch", "Job"):
        causes.extend((e.path, e.message) for e in jobs.api_problems(obj, jobs.KINDS[("batch/v1", "Job")]))
    elif (res.group, res.kind) == ("", "Event"):
        causes.extend(_event_namespace(obj))
    elif res.group == "resource.k8s.io":
        causes.extend(claim_rules.problems(res.kind, obj))
    elif res.group == "admissionregistration.k8s.io" and res.kind.endswith("WebhookConfiguration"):
        causes.extend(_match_conditions(obj))
    if causes:
        raise invalid(res, name, causes)


def _match_conditions(config: Obj) -> list[tuple[str, str]]:
    """As the real server, a webhook's ``matchConditions`` are compiled when the configuration is
    written, and one that does not compile refuses it (here: with cel-python, see ``cel``)."""
    causes = []
    for i, hook in enumerate(config.get("webhooks") or []):
        for j, condition in enumerate((hook or {}).get("matchConditions") or []):
            error = cel.compile_error(str((condition or {}).get("expression") or ""))
            if error is not None:
                causes.append(
                    (f"webhooks[{i}].matchConditions[{j}].expression", f"Invalid value: compilation failed: {error}")
                )
    return causes


def _event_namespace(event: Obj) -> list[tuple[str, str]]:
    """A core/v1 Event without ``eventTime`` (the legacy form) must live in its involved object's
    namespace, or, for a cluster-scoped object, in ``default`` (Kubernetes'
    ``legacyValidateEvent``)."""
    if event.get("eventTime"):
        return []
    involved = str((event.get("involvedObject") or {}).get("namespace") or "")
    own = str((event.get("metadata") or {}).get("namespace") or "")
    if (not involved and own not in ("", "default")) or (involved and own != involved):
        return [("involvedObject.namespace", f"Invalid value: {involved!r}: does not match event.namespace")]
    return []


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


# A pod's spec is immutable but for these (``ValidatePodUpdate``); the scheduling directives of a
# pod still held by a scheduling gate may be tightened (``ValidatePodSchedulingDirectives``).
POD_MUTABLE = ("activeDeadlineSeconds", "terminationGracePeriodSeconds")


def trainjob_update(res: Resource, old: Obj, new: Obj) -> None:
    """Kubeflow Trainer's webhook on a TrainJob: its runtime patches change only while it is
    suspended (the stricter reading: the TrainJob as updated is suspended)."""
    before, after = (old.get("spec") or {}).get("runtimePatches"), (new.get("spec") or {}).get("runtimePatches")
    if before != after and not (new.get("spec") or {}).get("suspend"):
        name = (new.get("metadata") or {}).get("name", "")
        raise invalid(res, name, [("spec.runtimePatches", "may be changed only while the TrainJob is suspended")])


def pod_update(res: Resource, old: Obj, new: Obj) -> None:
    """The real server's rules for updating a Pod: images may change, tolerations only be added,
    scheduling gates only be removed; while the pod was gated its nodeSelector may gain entries
    (never change or lose one) and its affinity change; nothing else. 422 naming the field."""
    name = str((new.get("metadata") or {}).get("name", ""))
    old_spec, new_spec = clone(old.get("spec") or {}), clone(new.get("spec") or {})
    causes: list[tuple[str, str]] = []
    was_gated = bool(old_spec.get("schedulingGates"))
    old_gates = [g.get("name") for g in old_spec.pop("schedulingGates", None) or [] if isinstance(g, dict)]
    new_gates = [g.get("name") for g in new_spec.pop("schedulingGates", None) or [] if isinstance(g, dict)]
    if any(g not in old_gates for g in new_gates):
        causes.append(("spec.schedulingGates", "Forbidden: only deletion is allowed, but found new scheduling gate"))
    old_tol, new_tol = old_spec.pop("tolerations", None) or [], new_spec.pop("tolerations", None) or []
    if any(t not in new_tol for t in old_tol):
        causes.append(
            ("spec.tolerations", "Forbidden: existing toleration can not be modified except its tolerationSeconds")
        )
    old_sel, new_sel = old_spec.pop("nodeSelector", None) or {}, new_spec.pop("nodeSelector", None) or {}
    if old_sel != new_sel and (not was_gated or any(new_sel.get(k) != v for k, v in old_sel.items())):
        causes.append(
            (
                "spec.nodeSelector",
                "Invalid value: only additions to spec.nodeSelector are allowed, "
                "and only while the pod has scheduling gates",
            )
        )
    old_aff, new_aff = old_spec.pop("affinity", None), new_spec.pop("affinity", None)
    if old_aff != new_aff and not was_gated:
        causes.append(
            ("spec.affinity", "Invalid value: spec.affinity may change only while the pod has scheduling gates")
        )
    for spec in (old_spec, new_spec):
        for key in POD_MUTABLE:
            spec.pop(key, None)
        for section in ("containers", "initContainers"):
            for c in spec.get(section) or []:
                if isinstance(c, dict):
                    c.pop("image", None)
    if old_spec != new_spec:
        causes.append(
            (
                "spec",
                "Forbidden: pod updates may not change fields other than `spec.containers[*].image`, "
                "`spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, `spec.tolerations` (only additions "
                "to existing tolerations), `spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was "
                "previously negative)",
            )
        )
    if causes:
        raise invalid(res, name, causes)


def apply_defaults(obj: Any, schema: Any) -> None:
    """A structural schema's ``default`` values filled in where a field is absent (its parent
    present), as the API server does for custom resources."""
    if not isinstance(schema, dict):
        return
    if isinstance(obj, dict):
        properties = schema.get("properties")
        if isinstance(properties, dict):
            for key, child in properties.items():
                if key not in obj and isinstance(child, dict) and "default" in child:
                    obj[key] = clone(child["default"])
                if key in obj:
                    apply_defaults(obj[key], child)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key in obj:
                if not (isinstance(properties, dict) and key in properties):
                    apply_defaults(obj[key], extra)
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        for item in obj:
            apply_defaults(item, schema["items"])


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
