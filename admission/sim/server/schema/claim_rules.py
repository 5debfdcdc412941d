"""What the API server refuses in a ResourceClaim's or ResourceClaimTemplate's device requests
beyond their schema (Kubernetes' ``pkg/apis/resource/validation``): each request sets exactly one
of ``exactly`` and ``firstAvailable``; a prioritized list has 1 to 8 subrequests; request and
subrequest names are unique; a count is above zero.

The core reads templates with the same rules (``queues.dra.claim_templates``), so a template the
simulated server accepts is one the controller can charge, as on a real cluster.
"""

from __future__ import annotations

from typing import Any

from queues.dra.claim_templates import MAX_ALTERNATIVES

BOTH = "exactly one of `exactly` or `firstAvailable` is required, but multiple fields are set"
NEITHER = "exactly one of `exactly` or `firstAvailable` is required"


def problems(kind: str, obj: Any) -> list[tuple[str, str]]:
    """(field, message) for each rule ``obj`` (a ResourceClaim or ResourceClaimTemplate) breaks."""
    spec = obj.get("spec") if isinstance(obj, dict) else None
    if kind == "ResourceClaimTemplate":
        where, spec = "spec.spec.devices.requests", (spec or {}).get("spec") if isinstance(spec, dict) else None
    elif kind == "ResourceClaim":
        where = "spec.devices.requests"
    else:
        return []
    devices = spec.get("devices") if isinstance(spec, dict) else None
    requests = devices.get("requests") if isinstance(devices, dict) else None
    out: list[tuple[str, str]] = []
    out.extend(_duplicates(requests, where))
    for i, request in enumerate(requests if isinstance(requests, list) else []):
        if not isinstance(request, dict):
            continue
        at = f"{where}[{i}]"
        exactly, listed = request.get("exactly"), request.get("firstAvailable")
        if exactly is not None and listed:
            out.append((at, f"Invalid value: null: {BOTH}"))
        elif exactly is None and not listed:
            out.append((at, f"Required value: {NEITHER}"))
        if isinstance(exactly, dict):
            out.extend(_count(exactly, f"{at}.exactly"))
        if isinstance(listed, list):
            if len(listed) > MAX_ALTERNATIVES:
                out.append(
                    (f"{at}.firstAvailable", f"Too many: {len(listed)}: must have at most {MAX_ALTERNATIVES} items")
                )
            out.extend(_duplicates(listed, f"{at}.firstAvailable"))
            for k, sub in enumerate(listed):
                if isinstance(sub, dict):
                    out.extend(_count(sub, f"{at}.firstAvailable[{k}]"))
    return out


def _duplicates(entries: Any, where: str) -> list[tuple[str, str]]:
    seen: set[str] = set()
    out = []
    for i, entry in enumerate(entries if isinstance(entries, list) else []):
        name = entry.get("name") if isinstance(entry, dict) else None
        if isinstance(name, str) and name in seen:
            out.append((f"{where}[{i}].name", f'Duplicate value: "{name}"'))
        elif isinstance(name, str):
            seen.add(name)
    return out


def _count(fields: dict[str, Any], at: str) -> list[tuple[str, str]]:
    count = fields.get("count")
    if (fields.get("allocationMode") or "ExactCount") == "ExactCount" and isinstance(count, int) and count < 1:
        return [(f"{at}.count", f"Invalid value: {count}: must be greater than zero")]
    return []
