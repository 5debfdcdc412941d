"""The manifests of a scenario that are not Kueue objects: Kubernetes PriorityClasses (a pod's
``priorityClassName``), Kubeflow Trainer's training runtimes (a TrainJob's pods) and DRA's
DeviceClasses, ResourceClaimTemplates and ResourceSlices (the devices pods claim, and what a
partitionable one consumes), read into what the scheduling core needs of them, every problem at
its path."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from queues import errors
from queues.dra import charges, slices
from queues.errors import FieldError
from queues.podsets import trainjobs

PRIORITY_CLASS = ("scheduling.k8s.io/v1", "PriorityClass")
TRAINING_RUNTIMES = {(trainjobs.API_VERSION, trainjobs.CLUSTER_RUNTIME), (trainjobs.API_VERSION, trainjobs.RUNTIME)}
DEVICE_CLASS = (charges.API_VERSION, "DeviceClass")
CLAIM_TEMPLATE = (charges.API_VERSION, "ResourceClaimTemplate")
RESOURCE_SLICE = (charges.API_VERSION, "ResourceSlice")
DRA_KINDS = {DEVICE_CLASS, CLAIM_TEMPLATE, RESOURCE_SLICE}


def priority_class(
    raw: Mapping[str, Any], path: str, into: dict[str, tuple[int, bool]], problems: list[FieldError]
) -> None:
    """A Kubernetes PriorityClass (a pod's ``priorityClassName``): its value and globalDefault."""
    name = (raw.get("metadata") or {}).get("name") if isinstance(raw.get("metadata"), Mapping) else None
    value = raw.get("value")
    if not isinstance(name, str) or not name:
        problems.append(FieldError(f"{path}.metadata.name", "required: the PriorityClass's name"))
    elif isinstance(value, bool) or not isinstance(value, int) or not -(2**31) <= value <= 1_000_000_000:
        problems.append(FieldError(f"{path}.value", f"must be a whole number up to 1000000000, not {value!r}"))
    elif name in into:
        problems.append(FieldError(f"{path}.metadata.name", f"duplicate PriorityClass {name!r}"))
    else:
        into[name] = (value, raw.get("globalDefault") is True)


def runtime(
    raw: Mapping[str, Any],
    path: str,
    into: dict[tuple[str, str | None, str], Mapping[str, Any]],
    problems: list[FieldError],
) -> None:
    """A Kubeflow Trainer (Cluster)TrainingRuntime, for the TrainJobs that name it."""
    meta: Mapping[str, Any] = raw["metadata"] if isinstance(raw.get("metadata"), Mapping) else {}
    name, kind = meta.get("name"), str(raw.get("kind"))
    namespace = (meta.get("namespace") or "default") if kind == trainjobs.RUNTIME else None
    if not isinstance(name, str) or not name:
        problems.append(FieldError(f"{path}.metadata.name", f"required: the {kind}'s name"))
    elif (kind, namespace, name) in into:
        problems.append(FieldError(f"{path}.metadata.name", f"duplicate {kind} {name!r}"))
    elif not isinstance(((raw.get("spec") or {}).get("template") or {}).get("spec"), Mapping):
        problems.append(FieldError(f"{path}.spec.template.spec", "required: the JobSet template of the runtime"))
    else:
        into[(kind, namespace, name)] = raw


def dra_object(
    raw: Mapping[str, Any],
    path: str,
    into: list[Mapping[str, Any]],
    templates: list[charges.ClaimTemplate],
    problems: list[FieldError],
    published: list[slices.Slice] | None = None,
) -> None:
    """A DeviceClass, a ResourceClaimTemplate (what its claims charge) or a ResourceSlice (what its
    devices consume), each also made in the cluster as given."""
    meta: Mapping[str, Any] = raw["metadata"] if isinstance(raw.get("metadata"), Mapping) else {}
    name, kind = meta.get("name"), str(raw.get("kind"))
    namespace = meta.get("namespace") or "default" if (raw.get("apiVersion"), kind) == CLAIM_TEMPLATE else None
    if not isinstance(name, str) or not name:
        problems.append(FieldError(f"{path}.metadata.name", f"required: the {kind}'s name"))
        return
    for other in into:
        other_meta = other.get("metadata") or {}
        if other.get("kind") == kind and (other_meta.get("namespace") or "default", other_meta.get("name")) == (
            namespace or "default",
            name,
        ):
            problems.append(FieldError(f"{path}.metadata.name", f"duplicate {kind} {name!r}"))
            return
    try:
        if (raw.get("apiVersion"), kind) == CLAIM_TEMPLATE:
            templates.append(charges.ClaimTemplate.from_object(raw, namespace))
        elif (raw.get("apiVersion"), kind) == RESOURCE_SLICE and published is not None:
            published.append(slices.Slice.from_object(raw))
    except errors.Invalid as exc:
        problems.extend(e.under(path) for e in exc.errors)
        return
    into.append(raw)
