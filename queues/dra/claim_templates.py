"""What a ResourceClaimTemplate asks for, read as quota needs it: its device requests.

A pod's claim is made from a template (``spec.spec.devices.requests[]``), so the template says
what each pod will be allocated. A request asks for ``exactly`` one DeviceClass's devices
(``count`` of them, or ``All``; CEL ``selectors``; ``capacity.requests`` of a shared device), or
for the first of a prioritized list of alternatives that can be allocated (``firstAvailable``:
"one H100, else two A100s"), each alternative a subrequest of the same shape. ``queues.dra.charges``
charges them; this module only reads them, refusing a malformed template with the field that is
wrong, as the API server would (``errors.Invalid``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from queues import errors, quantity
from queues.dra import slices
from queues.errors import FieldError

API_VERSION = "resource.k8s.io/v1"
MAX_ALTERNATIVES = 8  # the API server's limit on a request's firstAvailable subrequests


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    """One entry of a claim's ``spec.devices.requests``, or one alternative of its
    ``firstAvailable`` list (named ``<request>/<subrequest>``, as an allocation result names it)."""

    name: str
    device_class: str | None  # exactly.deviceClassName (None with firstAvailable)
    count: int = 1
    all_devices: bool = False  # allocationMode: All
    admin_access: bool = False
    selectors: tuple[str, ...] = ()  # its CEL selectors' expressions
    capacity: tuple[tuple[str, str], ...] = ()  # exactly.capacity.requests: dimension -> quantity
    alternatives: tuple[DeviceRequest, ...] = ()  # firstAvailable: the subrequests, in order

    @property
    def first_available(self) -> bool:
        """A prioritized list: the allocator takes the first alternative it can satisfy."""
        return bool(self.alternatives)


@dataclass(frozen=True, slots=True)
class ClaimTemplate:
    """A ResourceClaimTemplate: the device requests each pod's claim is made with."""

    namespace: str
    name: str
    requests: tuple[DeviceRequest, ...]

    @classmethod
    def from_object(cls, obj: Mapping[str, Any], namespace: str | None = None) -> ClaimTemplate:
        """A ``resource.k8s.io/v1`` ResourceClaimTemplate, or ``errors.Invalid`` naming the field."""
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
        assert isinstance(meta, Mapping)
        name = meta.get("name")
        problems: list[FieldError] = []
        if not isinstance(name, str) or not name:
            problems.append(FieldError("metadata.name", "required: the template's name, as pods name it"))
        spec = obj.get("spec")
        claim_spec = spec.get("spec") if isinstance(spec, Mapping) else None
        devices = claim_spec.get("devices") if isinstance(claim_spec, Mapping) else None
        raw = devices.get("requests") if isinstance(devices, Mapping) else None
        requests: list[DeviceRequest] = []
        if raw is not None and not isinstance(raw, list):
            problems.append(FieldError("spec.spec.devices.requests", "must be a list of device requests"))
        for i, entry in enumerate(raw or []):
            request = _request(entry, f"spec.spec.devices.requests[{i}]", problems)
            if request is not None:
                requests.append(request)
        if problems:
            raise errors.Invalid(problems, subject=f"ResourceClaimTemplate {name or '?'}")
        return cls(str(namespace or meta.get("namespace") or "default"), str(name), tuple(requests))


def _request(entry: Any, where: str, problems: list[FieldError]) -> DeviceRequest | None:
    if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
        problems.append(FieldError(f"{where}.name", "required: each device request has a name"))
        return None
    listed = entry.get("firstAvailable")
    if listed is not None and entry.get("exactly") is not None:
        problems.append(FieldError(where, "exactly one of exactly and firstAvailable may be set, not both"))
        return None
    if listed is not None:
        return _prioritized(entry["name"], listed, f"{where}.firstAvailable", problems)
    exactly = entry.get("exactly")
    if not isinstance(exactly, Mapping):
        problems.append(
            FieldError(f"{where}.exactly.deviceClassName", "required: the DeviceClass of the devices asked for")
        )
        return None
    request = _devices(entry["name"], exactly, f"{where}.exactly", problems)
    return None if request is None else dataclasses.replace(request, admin_access=bool(exactly.get("adminAccess")))


def _prioritized(name: str, listed: Any, where: str, problems: list[FieldError]) -> DeviceRequest | None:
    """A ``firstAvailable`` list: each subrequest read as an ``exactly`` request of its own."""
    if not isinstance(listed, list) or not 1 <= len(listed) <= MAX_ALTERNATIVES:
        problems.append(FieldError(where, f"must be a list of 1 to {MAX_ALTERNATIVES} subrequests, tried in order"))
        return None
    alternatives: list[DeviceRequest] = []
    seen: set[str] = set()
    for k, sub in enumerate(listed):
        at = f"{where}[{k}]"
        if not isinstance(sub, Mapping) or not isinstance(sub.get("name"), str) or not sub["name"]:
            problems.append(FieldError(f"{at}.name", "required: each subrequest has a name"))
            continue
        if sub["name"] in seen:
            problems.append(FieldError(f"{at}.name", f"duplicate subrequest name {sub['name']!r}"))
            continue
        seen.add(sub["name"])
        alternative = _devices(f"{name}/{sub['name']}", sub, at, problems)
        if alternative is not None:
            alternatives.append(alternative)
    if len(alternatives) != len(listed):
        return None
    return DeviceRequest(name, None, count=0, alternatives=tuple(alternatives))


def _devices(name: str, fields: Mapping[str, Any], where: str, problems: list[FieldError]) -> DeviceRequest | None:
    """The fields an ``exactly`` request and a ``firstAvailable`` subrequest share."""
    if not isinstance(fields.get("deviceClassName"), str):
        problems.append(FieldError(f"{where}.deviceClassName", "required: the DeviceClass of the devices asked for"))
        return None
    mode = fields.get("allocationMode") or "ExactCount"
    if mode not in ("ExactCount", "All"):
        problems.append(FieldError(f"{where}.allocationMode", f"must be ExactCount or All, not {mode!r}"))
        return None
    count = fields.get("count", 1)
    if mode == "ExactCount" and (not isinstance(count, int) or isinstance(count, bool) or count < 1):
        problems.append(FieldError(f"{where}.count", f"must be a whole number of devices >= 1, not {count!r}"))
        return None
    return DeviceRequest(
        name,
        fields["deviceClassName"],
        count=int(count) if mode == "ExactCount" else 0,
        all_devices=mode == "All",
        selectors=slices.expressions(fields.get("selectors")),
        capacity=_capacity_requests(fields.get("capacity"), f"{where}.capacity.requests", problems),
    )


def _capacity_requests(raw: Any, where: str, problems: list[FieldError]) -> tuple[tuple[str, str], ...]:
    """``capacity.requests``: how much of a shared device's capacity dimensions it asks for."""
    requests = raw.get("requests") if isinstance(raw, Mapping) else None
    if not requests:
        return ()
    out: list[tuple[str, str]] = []
    for name, value in requests.items() if isinstance(requests, Mapping) else ():
        try:
            quantity.parse_milli(str(value))
        except quantity.QuantityError:
            problems.append(FieldError(f"{where}.{name}", f"must be a quantity (40Gi), not {value!r}"))
            continue
        out.append((str(name), str(value)))
    return tuple(sorted(out))
