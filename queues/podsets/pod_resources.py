"""What one pod asks for: its effective request as the kube-scheduler computes it (the sum of its
containers plus restartable sidecar init containers, or the largest init container if larger,
plus the pod overhead; a container's limits stand in for requests it does not set), the API
server's rules for container resources, which resources are GPUs, and the devices it claims
through Dynamic Resource Allocation (``spec.resourceClaims``: ``queues.dra`` charges them).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from queues import quantity
from queues.errors import FieldError

Requests = dict[str, int]  # resource name -> milli-units


@dataclass(frozen=True, slots=True)
class PodClaim:
    """One entry of a pod's ``spec.resourceClaims``: a claim made per pod from a
    ResourceClaimTemplate (``template``), or an existing ResourceClaim shared by name (``claim``)."""

    name: str
    template: str | None = None
    claim: str | None = None

    def to_dict(self) -> dict[str, str]:
        out = {"name": self.name}
        if self.template is not None:
            out["resourceClaimTemplateName"] = self.template
        if self.claim is not None:
            out["resourceClaimName"] = self.claim
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> PodClaim:
        return cls(str(raw["name"]), raw.get("resourceClaimTemplateName"), raw.get("resourceClaimName"))


def pod_claims(pod_spec: Mapping[str, Any], path: str, problems: list[FieldError]) -> tuple[PodClaim, ...]:
    """The pod's ``spec.resourceClaims``, with the API server's rules: each has a unique name and
    exactly one of ``resourceClaimName`` and ``resourceClaimTemplateName``."""
    raw = pod_spec.get("resourceClaims")
    if raw is None:
        return ()
    if not isinstance(raw, list):
        problems.append(FieldError(f"{path}.resourceClaims", "must be a list of {name, resourceClaimTemplateName}"))
        return ()
    out: list[PodClaim] = []
    for i, entry in enumerate(raw):
        where = f"{path}.resourceClaims[{i}]"
        if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str) or not entry["name"]:
            problems.append(FieldError(f"{where}.name", "required: the claim's name, as its containers name it"))
            continue
        template, claim = entry.get("resourceClaimTemplateName"), entry.get("resourceClaimName")
        if (template is None) == (claim is None) or not isinstance(template or claim, str):
            problems.append(
                FieldError(where, "must have exactly one of resourceClaimName or resourceClaimTemplateName (a string)")
            )
            continue
        if any(c.name == entry["name"] for c in out):
            problems.append(FieldError(f"{where}.name", f"Duplicate value: {entry['name']!r}"))
            continue
        out.append(PodClaim(sys.intern(entry["name"]), template, claim))
    return tuple(out)


def _container_requests(container: Any, path: str, problems: list[FieldError]) -> Requests:
    if not isinstance(container, Mapping):
        problems.append(FieldError(path, "must be a container"))
        return {}
    resources = container.get("resources") or {}
    if not isinstance(resources, Mapping):
        problems.append(FieldError(f"{path}.resources", "must be a mapping with requests and limits"))
        return {}
    out: Requests = {}
    for section in ("limits", "requests"):  # requests win over limits
        values = resources.get(section) or {}
        if not isinstance(values, Mapping):
            problems.append(FieldError(f"{path}.resources.{section}", "must be a map of resource quantities"))
            continue
        for res, raw in values.items():
            try:
                milli = quantity.parse_milli(raw)
            except quantity.QuantityError as exc:
                problems.append(FieldError(f"{path}.resources.{section}.{res}", str(exc)))
                continue
            if milli < 0:
                problems.append(FieldError(f"{path}.resources.{section}.{res}", "must not be negative"))
                continue
            if section == "limits" and milli % quantity.MILLI and _is_extended(str(res)):
                problems.append(FieldError(f"{path}.resources.{section}.{res}", "must be a whole number"))
            out[sys.intern(str(res))] = milli
    return out


def resource_rules(resources: Any, path: str) -> list[FieldError]:
    """The API server's rules for one container's resources (``ValidateResourceRequirements``):
    quantities are >= 0; an extended resource (``nvidia.com/gpu``: not overcommitable) is a whole
    number, needs a limit, and a request must equal it."""
    out: list[FieldError] = []
    if not isinstance(resources, Mapping):
        return out
    parsed: dict[str, dict[str, int]] = {}
    for section in ("limits", "requests"):
        values = resources.get(section) or {}
        if not isinstance(values, Mapping):
            continue
        for res, raw in values.items():
            where = f"{path}.{section}.{res}"
            try:
                milli = quantity.parse_milli(raw)
            except quantity.QuantityError as exc:
                out.append(FieldError(where, str(exc)))
                continue
            if milli < 0:
                out.append(FieldError(where, "must be greater than or equal to 0"))
            elif _is_extended(str(res)) and milli % quantity.MILLI:
                out.append(FieldError(where, "must be an integer"))
            parsed.setdefault(section, {})[str(res)] = milli
    limits, requests = parsed.get("limits", {}), parsed.get("requests", {})
    for res, milli in requests.items():
        if not _is_extended(res):
            if res in limits and milli > limits[res]:
                limit = quantity.format_milli(limits[res])
                out.append(FieldError(f"{path}.requests", f"must be less than or equal to {res} limit of {limit}"))
        elif res not in limits:
            out.append(FieldError(f"{path}.limits", f"Limit must be set for non overcommitable resources ({res})"))
        elif milli != limits[res]:
            limit = quantity.format_milli(limits[res])
            out.append(FieldError(f"{path}.requests", f"must be equal to {res} limit of {limit}"))
    return out


def pod_problems(pod_spec: Mapping[str, Any], path: str = "spec") -> list[FieldError]:
    """The same rules for a Pod's own spec."""
    out: list[FieldError] = []
    for section in ("containers", "initContainers"):
        for i, c in enumerate(pod_spec.get(section) or []):
            if isinstance(c, Mapping):
                out.extend(resource_rules(c.get("resources"), f"{path}.{section}[{i}].resources"))
    return out


def is_gpu(resource: str) -> bool:
    """A whole GPU or part of one (a MIG slice, a time-sliced replica): what GPU-hours and the GPU
    warnings count (``queues.gpus.gpu_units`` says how much of a card each is)."""
    return resource in ("nvidia.com/gpu", "nvidia.com/gpu.shared", "amd.com/gpu") or resource.startswith(
        "nvidia.com/mig-"
    )


def _is_extended(resource: str) -> bool:
    return "/" in resource and not resource.startswith("kubernetes.io/")


def _add(into: Requests, other: Mapping[str, int]) -> None:
    for res, v in other.items():
        into[res] = into.get(res, 0) + v


def pod_requests(pod_spec: Mapping[str, Any], path: str, problems: list[FieldError]) -> Requests:
    """The effective request of one pod, as the kube-scheduler computes it."""
    containers = pod_spec.get("containers")
    if not isinstance(containers, list) or not containers:
        problems.append(FieldError(f"{path}.containers", "required: at least one container"))
        return {}
    total: Requests = {}
    for i, c in enumerate(containers):
        _add(total, _container_requests(c, f"{path}.containers[{i}]", problems))
    sidecars: Requests = {}
    init_peak: Requests = {}
    for i, c in enumerate(pod_spec.get("initContainers") or []):
        req = _container_requests(c, f"{path}.initContainers[{i}]", problems)
        if isinstance(c, Mapping) and c.get("restartPolicy") == "Always":
            _add(sidecars, req)
            continue
        for res, v in req.items():
            init_peak[res] = max(init_peak.get(res, 0), v + sidecars.get(res, 0))
    _add(total, sidecars)
    for res, v in init_peak.items():
        total[res] = max(total.get(res, 0), v)
    overhead = pod_spec.get("overhead") or {}
    if isinstance(overhead, Mapping):
        for res, raw in overhead.items():
            try:
                total[str(res)] = total.get(str(res), 0) + quantity.parse_milli(raw)
            except quantity.QuantityError as exc:
                problems.append(FieldError(f"{path}.overhead.{res}", str(exc)))
    return total  # (a zero request stays: the queue still assigns it a flavor, as Kueue's)
