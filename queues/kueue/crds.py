"""Kueue's configuration kinds as CustomResourceDefinitions (``kueue.x-k8s.io/v1beta2``).

The schemas are written from the very models ``turnstile apply`` validates with (``queues.kueue.api``),
so the fields a cluster accepts and the fields Turnstile reads cannot drift apart: every field
of the v1beta2 shape (the v1beta1-only ``spec.cohort``, ``spec.admissionChecks`` and Cohort
``spec.parent`` are left out: v1beta1 files are converted by ``turnstile apply``), with its
type, enum, default and bounds, quantities as Kubernetes' int-or-string. Schemas are structural,
as the API server requires, with Kueue's CEL rules and the list bounds that keep their cost in
the API server's budget (borrowing limits only with a cohort, every flavor listing the group's
resources, a LocalQueue's ClusterQueue immutable). Everything else that needs more than a schema
(each resource covered once, ...) is checked by Turnstile's validating webhook with the same code
as ``turnstile apply`` (``queues.kueue.validation``), every error with its path.

Short names and printer columns are Kueue's (``kubectl get cq`` shows the cohort, the queueing
strategy, pending and admitted workloads; ``kubectl get lq`` the ClusterQueue, pending and
admitted). Topology (levels of node labels) is served and checked by the webhook; placement by it
is ``queues.cycle.tas``.
"""

from __future__ import annotations

import types
import typing
from typing import Any, Literal

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from queues.kueue import api, validation

VERSION = "v1beta2"
# fields of the models that belong to v1beta1 only (converted by ``turnstile apply``)
V1BETA1_ONLY = {("ClusterQueueSpec", "cohort"), ("ClusterQueueSpec", "admissionChecks"), ("CohortSpec", "parent")}
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)

Schema = dict[str, Any]


# kind -> (plural, short names, namespaced, printer columns)
KINDS: dict[str, tuple[str, tuple[str, ...], bool, list[Schema]]] = {
    "ResourceFlavor": ("resourceflavors", ("flavor", "flavors", "rf"), False, []),
    "ClusterQueue": (
        "clusterqueues",
        ("cq",),
        False,
        [
            {"name": "Cohort", "type": "string", "jsonPath": ".spec.cohortName", "description": "The cohort"},
            {"name": "Strategy", "type": "string", "jsonPath": ".spec.queueingStrategy"},
            {"name": "Pending Workloads", "type": "integer", "jsonPath": ".status.pendingWorkloads"},
            {"name": "Admitted Workloads", "type": "integer", "jsonPath": ".status.admittedWorkloads"},
            {"name": "Active", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Active")].status'},
        ],
    ),
    "LocalQueue": (
        "localqueues",
        ("queue", "queues", "lq"),
        True,
        [
            {"name": "ClusterQueue", "type": "string", "jsonPath": ".spec.clusterQueue"},
            {"name": "Pending Workloads", "type": "integer", "jsonPath": ".status.pendingWorkloads"},
            {"name": "Admitted Workloads", "type": "integer", "jsonPath": ".status.admittedWorkloads"},
        ],
    ),
    "Cohort": ("cohorts", (), False, [{"name": "Parent", "type": "string", "jsonPath": ".spec.parentName"}]),
    "WorkloadPriorityClass": (
        "workloadpriorityclasses",
        ("wpc",),
        False,
        [{"name": "Value", "type": "integer", "jsonPath": ".value"}],
    ),
    "AdmissionCheck": (
        "admissionchecks",
        (),
        False,
        [{"name": "Controller", "type": "string", "jsonPath": ".spec.controllerName"}],
    ),
    "ProvisioningRequestConfig": ("provisioningrequestconfigs", (), False, []),
    "Topology": ("topologies", (), False, []),
}


def _annotation_schema(annotation: Any, metadata: list[Any]) -> Schema:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _annotation_schema(args[0], list(args[1:]))
    if origin in (typing.Union, types.UnionType):
        real = [a for a in args if a is not type(None)]
        if len(real) == 1:
            return _annotation_schema(real[0], metadata)
        return {"x-kubernetes-preserve-unknown-fields": True}
    if any(getattr(m, "func", None) is api.parse_quantity for m in metadata):
        return {"anyOf": [{"type": "integer"}, {"type": "string"}], "pattern": QUANTITY_PATTERN,
                "x-kubernetes-int-or-string": True}  # fmt: skip
    if origin is Literal:
        values = [a for a in args if a is not None]
        return {"type": "string", "enum": list(values)}
    if origin is list:
        return {"type": "array", "items": _annotation_schema(args[0], [])}
    if origin is dict:
        value = args[1] if len(args) == 2 else Any
        if value is Any:
            return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        return {"type": "object", "additionalProperties": _annotation_schema(value, [])}
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return model_schema(annotation)
    if annotation is str:
        return {"type": "string"}
    if annotation is bool:
        return {"type": "boolean"}
    if annotation is int:
        return {"type": "integer", "format": "int32"}
    if annotation is float:
        return {"type": "number"}
    return {"x-kubernetes-preserve-unknown-fields": True}


def _field_schema(info: FieldInfo) -> Schema:
    schema = _annotation_schema(info.annotation, list(info.metadata))
    for constraint in info.metadata:
        if getattr(constraint, "ge", None) is not None:
            schema["minimum"] = constraint.ge
        if getattr(constraint, "le", None) is not None:
            schema["maximum"] = constraint.le
    default = info.default
    if default is not PydanticUndefined and default is not None and isinstance(default, str | int | bool):
        schema["default"] = default
    return schema


def model_schema(model: type[BaseModel]) -> Schema:
    properties: Schema = {}
    required = []
    for name, info in model.model_fields.items():
        key = info.alias or name
        if (model.__name__, key) in V1BETA1_ONLY:
            continue
        properties[key] = _field_schema(info)
        if info.is_required():
            required.append(key)
    schema: Schema = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


def _object_schema(kind: str) -> Schema:
    properties: Schema = {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    }
    if kind == "Topology":
        level = {"type": "object", "properties": {"nodeLabel": {"type": "string", "minLength": 1, "maxLength": 316}},
                 "required": ["nodeLabel"]}  # fmt: skip
        levels = {"type": "array", "items": level, "minItems": 1, "maxItems": 16,
                  "x-kubernetes-validations": [{"rule": "self.all(x, self.exists_one(y, x.nodeLabel == y.nodeLabel))",
                                                "message": "must have unique nodeLabel values"}]}  # fmt: skip
        properties["spec"] = {"type": "object", "properties": {"levels": levels}, "required": ["levels"]}
        return {"type": "object", "properties": properties, "required": ["spec"]}
    model = api.model_of(kind)
    own = model_schema(model)
    for key, value in own["properties"].items():
        if key not in ("apiVersion", "kind", "metadata", "status"):
            properties[key] = value
    schema: Schema = {"type": "object", "properties": properties}
    required = [k for k in own.get("required", []) if k not in ("apiVersion", "kind", "metadata")]
    if required:
        schema["required"] = required
    _kueue_rules(kind, properties)
    return schema


# Kueue's CEL rules (its kubebuilder markers), with the list bounds that keep their cost within the
# API server's budget; Turnstile's webhook checks the same (``queues.kueue.validation``), every error at once.
BORROWING_WITHOUT_COHORT = (
    "!has(self.cohortName) && has(self.resourceGroups) ? "
    "self.resourceGroups.all(rg, rg.flavors.all(f, f.resources.all(r, !has(r.borrowingLimit)))) : true"
)
FLAVORS_COVER_RESOURCES = "self.flavors.all(x, size(x.resources) == size(self.coveredResources))"


def _kueue_rules(kind: str, properties: Schema) -> None:
    spec = properties.get("spec")
    if not isinstance(spec, dict):
        return
    fields = spec.get("properties") or {}
    groups = fields.get("resourceGroups")
    if isinstance(groups, dict):
        groups["maxItems"] = validation.MAX_RESOURCE_GROUPS
        group = groups["items"]
        message = "flavors must have the same number of resources as the coveredResources"
        group["x-kubernetes-validations"] = [{"rule": FLAVORS_COVER_RESOURCES, "message": message}]
        covered, flavors = group["properties"]["coveredResources"], group["properties"]["flavors"]
        covered.update(minItems=1, maxItems=validation.MAX_RESOURCES_PER_GROUP)
        flavors.update(minItems=1, maxItems=validation.MAX_FLAVORS_PER_GROUP)
        flavors["items"]["properties"]["resources"].update(minItems=1, maxItems=validation.MAX_RESOURCES_PER_GROUP)
    if kind == "ClusterQueue":
        spec["x-kubernetes-validations"] = [
            {"rule": BORROWING_WITHOUT_COHORT, "message": "borrowingLimit must be nil when cohort is empty"}
        ]
    if kind == "LocalQueue":
        immutable = {"rule": "self == oldSelf", "message": "field is immutable"}
        fields["clusterQueue"]["x-kubernetes-validations"] = [immutable]


def crd(kind: str) -> Schema:
    """The CustomResourceDefinition of one kind."""
    plural, short, namespaced, columns = KINDS[kind]
    names: Schema = {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower()}
    if short:
        names["shortNames"] = list(short)
    version: Schema = {
        "name": VERSION,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": _object_schema(kind)},
        "subresources": {"status": {}},
    }
    if columns:
        version["additionalPrinterColumns"] = [
            *columns,
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{api.GROUP}"},
        "spec": {
            "group": api.GROUP,
            "names": names,
            "scope": "Namespaced" if namespaced else "Cluster",
            "versions": [version],
        },
    }


def crds() -> list[Schema]:
    """Every Kueue configuration kind's CRD, in a stable order."""
    return [crd(kind) for kind in KINDS]
