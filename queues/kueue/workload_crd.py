"""Kueue's ``Workload`` CustomResourceDefinition (``workloads.kueue.x-k8s.io``, v1beta2).

Why: kueuectl, KueueViz and every script built on Kueue read ``workloads.kueue.x-k8s.io``. The
leader keeps one such object per queued job, a projection of what PostgreSQL holds
(``admission.controller.objects.workload_projection``), so the definition must accept what Kueue's does.

Written from Kueue's API types (``apis/kueue/v1beta2/workload_types.go``): the same names, short
name (``wl``; Turnstile's aggregated ``workloads.turnstile.dev`` answers to ``twl``), printer columns,
``spec`` and ``status`` fields with their types, enums and bounds, and the rules a user's edit
meets in the API server (a podSet's ``minCount`` at most its ``count``; ``priorityClassRef`` only
with ``priority``). Two places are looser than Kueue's: a pod set's ``template`` and a topology
assignment's slices are kept as given (``x-kubernetes-preserve-unknown-fields``) instead of
repeating Kubernetes' 9,000-line PodTemplateSpec schema; Turnstile writes them from the job, and
the webhook refuses a person's edit of anything in ``spec`` but ``active``.
"""

from __future__ import annotations

from typing import Any

from queues.kueue import crds
from queues.kueue.crds import QUANTITY_PATTERN

Schema = dict[str, Any]

GROUP, VERSION, PLURAL, KIND = "kueue.x-k8s.io", "v1beta2", "workloads", "Workload"
NAME = f"{PLURAL}.{GROUP}"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"  # (Kueue's label on a Workload: the uid of the job it is for)
POD_GROUP_UID = "podgroup:"  # (a pod group's job uid: this, then its first pod's uid)
_POD_GROUP_LABEL = "podgroup."  # (the same in the label: a label value has no ':')
SHORT_NAMES = ("wl",)  # Kueue's: +kubebuilder:resource:shortName={wl}
_DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"

COLUMNS: list[Schema] = [
    {"name": "Queue", "type": "string", "jsonPath": ".spec.queueName",
     "description": "Name of the queue this workload was submitted to"},
    {"name": "Reserved in", "type": "string", "jsonPath": ".status.admission.clusterQueue",
     "description": "Name of the ClusterQueue where the workload is reserving quota"},
    {"name": "Admitted", "type": "string", "jsonPath": ".status.conditions[?(@.type=='Admitted')].status",
     "description": "Admission status"},
    {"name": "Finished", "type": "string", "jsonPath": ".status.conditions[?(@.type=='Finished')].status",
     "description": "Workload finished"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp",
     "description": "Time this workload was created"},
]  # fmt: skip


def _str(max_length: int, pattern: str | None = None) -> Schema:
    out: Schema = {"type": "string", "maxLength": max_length}
    if pattern is not None:
        out["pattern"] = pattern
    return out


def _int(minimum: int | None = None, fmt: str = "int32") -> Schema:
    out: Schema = {"type": "integer", "format": fmt}
    if minimum is not None:
        out["minimum"] = minimum
    return out


def _obj(properties: Schema, required: list[str] | None = None) -> Schema:
    out: Schema = {"type": "object", "properties": properties}
    if required:
        out["required"] = required
    return out


def _map_list(item: Schema, keys: list[str], max_items: int) -> Schema:
    return {
        "type": "array",
        "items": item,
        "maxItems": max_items,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": keys,
    }


def _quantities() -> Schema:
    quantity = {"anyOf": [{"type": "integer"}, {"type": "string"}], "pattern": QUANTITY_PATTERN,
                "x-kubernetes-int-or-string": True}  # fmt: skip
    return {"type": "object", "additionalProperties": quantity}


_OPEN: Schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
_TIME: Schema = {"type": "string", "format": "date-time"}


def _spec() -> Schema:
    topology = _obj(
        {
            "podIndexLabel": _str(317),
            "podSetGroupName": _str(256),
            "podSetSliceRequiredTopology": _str(63),
            "podSetSliceSize": _int(1),
            "podsetSliceRequiredTopologyConstraints": {
                "type": "array",
                "maxItems": 3,
                "x-kubernetes-list-type": "atomic",
                "items": {**_OPEN, "required": ["size", "topology"]},
            },
            "preferred": _str(63),
            "required": _str(63),
            "subGroupCount": _int(0),
            "subGroupIndexLabel": _str(317),
            "unconstrained": {"type": "boolean"},
        }
    )
    pod_set = _obj(
        {
            "count": {**_int(0), "default": 1},
            "minCount": _int(1),
            "name": {**_str(63, _DNS_LABEL), "default": "main"},
            "template": _OPEN,
            "topologyRequest": topology,
        },
        ["template"],
    )
    pod_set["x-kubernetes-validations"] = [
        {"rule": "has(self.minCount) ? self.minCount <= self.count : true", "message": "minCount should be <= count"}
    ]
    reference = _obj(
        {
            "group": {"type": "string", "enum": ["kueue.x-k8s.io", "scheduling.k8s.io"]},
            "kind": {"type": "string", "enum": ["WorkloadPriorityClass", "PriorityClass"]},
            "name": _str(253, _DNS_SUBDOMAIN),
        },
        ["group", "kind", "name"],
    )
    spec = _obj(
        {
            "active": {"type": "boolean", "default": True},
            "maximumExecutionTimeSeconds": _int(1),
            "podSets": _map_list(pod_set, ["name"], 18),
            "preemptionGates": _map_list(_obj({"name": _str(63)}, ["name"]), ["name"], 8),
            "priority": _int(),
            "priorityClassRef": reference,
            "queueName": _str(253, _DNS_SUBDOMAIN),
        }
    )
    rule = "!has(self.priorityClassRef) || has(self.priority)"
    spec["x-kubernetes-validations"] = [
        {"rule": rule, "message": "priority should not be nil when priorityClassRef is set"}
    ]
    return spec


def _status() -> Schema:
    condition = _obj(
        {
            "lastTransitionTime": _TIME,
            "message": _str(32768),
            "observedGeneration": _int(0, "int64"),
            "reason": _str(1024, r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"),
            "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
            "type": _str(316),
        },
        ["lastTransitionTime", "message", "reason", "status", "type"],
    )
    assignment = _obj(
        {
            "count": _int(0),
            "delayedTopologyRequest": {"type": "string", "enum": ["Pending", "Ready"], "maxLength": 7},
            "flavors": {"type": "object", "additionalProperties": _str(253, _DNS_SUBDOMAIN)},
            "name": {**_str(63, _DNS_LABEL), "default": "main"},
            "resourceUsage": _quantities(),
            "topologyAssignment": {**_OPEN, "required": ["levels", "slices"]},
        }
    )
    check = _obj(
        {
            "lastTransitionTime": _TIME,
            "message": _str(32768),
            "name": _str(316),
            "podSetUpdates": {"type": "array", "maxItems": 18, "x-kubernetes-list-type": "atomic", "items": _OPEN},
            "requeueAfterSeconds": _int(0),
            "retryCount": _int(0),
            "state": {"type": "string", "enum": ["Pending", "Ready", "Retry", "Rejected"]},
        },
        ["lastTransitionTime", "message", "name", "state"],
    )
    eviction = _obj(
        {"count": _int(0), "reason": _str(316), "underlyingCause": _str(316)}, ["count", "reason", "underlyingCause"]
    )
    position = {"type": "string", "enum": ["Closed", "Open"]}
    gate_fields = {"lastTransitionTime": _TIME, "name": _str(63), "position": position}
    gate = _obj(gate_fields, list(gate_fields))
    named_count = _obj({"count": _int(0), "name": _str(63, _DNS_LABEL)}, ["count", "name"])
    return _obj(
        {
            "accumulatedPastExecutionTimeSeconds": _int(),
            "admission": _obj(
                {"clusterQueue": _str(253, _DNS_SUBDOMAIN), "podSetAssignments": _map_list(assignment, ["name"], 18)}
            ),
            "admissionChecks": _map_list(check, ["name"], 8),
            "clusterName": _str(256),
            "conditions": _map_list(condition, ["type"], 16),
            "nominatedClusterNames": {
                "type": "array", "maxItems": 20, "items": _str(256), "x-kubernetes-list-type": "atomic"
            },
            "preemptionGates": _map_list(gate, ["name"], 8),
            "reclaimablePods": _map_list(named_count, ["name"], 18),
            "requeueState": _obj({"count": _int(0), "requeueAt": _TIME}),
            "resourceRequests": _map_list(
                _obj({"name": _str(63, _DNS_LABEL), "resources": _quantities()}, ["name"]), ["name"], 18
            ),
            "schedulingStats": _obj({"evictions": _map_list(eviction, ["reason", "underlyingCause"], 256)}),
            "unhealthyNodes": _map_list(_obj({"name": _str(63)}, ["name"]), ["name"], 8),
        }
    )  # fmt: skip


def crd() -> Schema:
    """Kueue's Workload CRD, served at v1beta2 with a status subresource."""
    top = {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": _spec(),
        "status": _status(),
    }
    version: Schema = {
        "name": VERSION,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": _obj(top)},
        "subresources": {"status": {}},
        "additionalPrinterColumns": COLUMNS,
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": NAME},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": KIND.lower(),
                "shortNames": list(SHORT_NAMES),
            },
            "scope": "Namespaced",
            "versions": [version],
        },
    }


def installed() -> list[Schema]:
    """Every CRD the install ships: Kueue's configuration kinds, then the Workload."""
    return [*crds.crds(), crd()]


def uid_label(job_uid: str) -> str:
    """The ``JOB_UID_LABEL`` value for ``job_uid``: a pod group's ``podgroup:<uid>`` is not a label
    value (no ``:``), so it is written ``podgroup.<uid>``; a job's uid as it is, as Kueue writes it."""
    return _POD_GROUP_LABEL + job_uid.removeprefix(POD_GROUP_UID) if job_uid.startswith(POD_GROUP_UID) else job_uid


def job_uid_of(label: str) -> str:
    """The job uid a ``JOB_UID_LABEL`` value stands for (``uid_label`` undone)."""
    return POD_GROUP_UID + label.removeprefix(_POD_GROUP_LABEL) if label.startswith(_POD_GROUP_LABEL) else label
