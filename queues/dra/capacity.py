"""Consumable capacity (KEP-5075): what one allocation of a shared device takes of it.

A device published with ``allowMultipleAllocations: true`` (a time-sliced or MPS GPU) serves
several claims at once; each takes part of its ``capacity`` dimensions (``memory: 80Gi``): what
its request asks for (``exactly.capacity.requests``), else the dimension's
``requestPolicy.default``, else the whole dimension, rounded up by the policy (to the next of its
``validValues``, or into ``validRange``: at least ``min``, ``min + n * step``, at most ``max``).
What cannot be rounded within the policy cannot be allocated on that device.

Kueue's capacity sources charge quota what one allocation takes (``queues.dra.charges``), and the
simulated allocator takes the same from the device (``admission.sim.operators.dra``), so quota and
allocation agree on every rounding.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from queues import quantity


def _milli(value: Any) -> int | None:
    try:
        return quantity.parse_milli(str(value))
    except quantity.QuantityError:
        return None


def taken(dimension: Mapping[str, Any], requested: str | None) -> int | None:
    """The milli-units one allocation takes of a capacity ``dimension`` (a device's ``{value,
    requestPolicy}``) when its request asks for ``requested`` (None: the policy's default, else the
    whole value), or None when the policy allows no such amount (or a quantity is malformed)."""
    policy = dimension.get("requestPolicy")
    policy = policy if isinstance(policy, Mapping) else None
    if requested is not None:
        base = _milli(requested)
    elif policy is not None and policy.get("default") is not None:
        base = _milli(policy["default"])
    else:
        base = _milli(dimension.get("value"))
    if base is None:
        return None
    return rounded(base, policy)


def rounded(base: int, policy: Mapping[str, Any] | None) -> int | None:
    """``base`` rounded up by a ``CapacityRequestPolicy`` (None: no valid amount is at least it)."""
    if policy is None:
        return base
    values = policy.get("validValues")
    if values:
        allowed = sorted(v for v in (_milli(x) for x in values) if v is not None)
        return next((v for v in allowed if v >= base), None)
    bounds = policy.get("validRange")
    if not isinstance(bounds, Mapping):
        return base
    low = _milli(bounds["min"]) if bounds.get("min") is not None else None
    step = _milli(bounds["step"]) if bounds.get("step") is not None else None
    high = _milli(bounds["max"]) if bounds.get("max") is not None else None
    value = base if low is None else max(base, low)
    if low is not None and step:
        offset = value - low
        if offset % step:
            value = low + (offset // step + 1) * step
    if high is not None and value > high:
        return None
    return value


def total(dimension: Mapping[str, Any]) -> int | None:
    """A capacity dimension's whole value (milli-units)."""
    return _milli(dimension.get("value"))
