"""What the simulated cluster's allocated ResourceClaims hold of its devices, and whether one more
allocation of a device fits: the bookkeeping the kube-scheduler's DRA allocator keeps.

Three kinds of device are used three ways, as the real allocator (``k8s.io/dynamic-resource-
allocation/structured``) uses them:

- a plain device is held by one allocation: once a claim's result names it, it is not free;
- a shared device (``allowMultipleAllocations: true``, KEP-5075 consumable capacity) is held by
  many: each allocation takes part of every capacity dimension (what its request asks for, else
  the dimension's ``requestPolicy.default``, else the whole of it, rounded up by the policy:
  ``queues.dra.capacity``, the same rule the core charges quota by), recorded in the result's
  ``consumedCapacity`` with a ``shareID``, and it fits while no dimension's allocations add up to
  more than its value. A plain device asked for capacity fits when it has at least that much;
- a partitionable device (``consumesCounters``, KEP-4815) takes from its pool's
  ``sharedCounters`` when it is first allocated, and fits only while they hold enough (a MIG
  partition overlapping one in use does not); a counter set its pool does not publish makes it
  unusable.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from admission.sim.server.objects import Obj
from queues import quantity
from queues.dra import capacity, slices

Device = tuple[str, str, str]  # (driver, pool, device name)
CounterKey = tuple[str, str, str, str]  # (driver, pool, counter set, counter)


def ident(device: slices.Device) -> Device:
    return (device.driver, device.pool, device.name)


class Usage:
    """The devices held, the capacity shared devices gave away, the counters partitions took."""

    def __init__(self, counters: dict[CounterKey, int], needs: dict[Device, dict[CounterKey, int]]) -> None:
        self.counters = counters  # (driver, pool, counter set, counter) -> milli-units the pool has
        self.needs = needs  # partitionable device -> what it consumes of them
        self.counted: dict[CounterKey, int] = {}  # what the devices in use consume of them
        self.held: set[Device] = set()  # plain devices, each allocated once
        self.consumed: dict[Device, dict[str, int]] = {}  # shared device -> dimension -> milli-units given

    @classmethod
    def of(cls, published: list[Obj], claims: list[Obj]) -> Usage:
        """The usage the cluster's slices and its claims' allocations make."""
        counters: dict[CounterKey, int] = {}
        needs: dict[Device, dict[CounterKey, int]] = {}
        for slice_ in published:
            spec = slice_.get("spec") or {}
            driver, pool = str(spec.get("driver")), str((spec.get("pool") or {}).get("name"))
            for counter_set in spec.get("sharedCounters") or []:
                for name, value in (counter_set.get("counters") or {}).items():
                    counters[(driver, pool, str(counter_set.get("name")), name)] = _milli(value)
            for device in spec.get("devices") or []:
                need = {
                    (driver, pool, str(entry.get("counterSet")), name): _milli(value)
                    for entry in device.get("consumesCounters") or []
                    for name, value in (entry.get("counters") or {}).items()
                }
                if need:
                    needs[(driver, pool, str(device.get("name")))] = need
        out = cls(counters, needs)
        for claim in claims:
            allocation = (claim.get("status") or {}).get("allocation") or {}
            for r in (allocation.get("devices") or {}).get("results") or []:
                device = (str(r.get("driver")), str(r.get("pool")), str(r.get("device")))
                if r.get("shareID"):
                    given = {str(k): _milli(v) for k, v in (r.get("consumedCapacity") or {}).items()}
                    out.take(device, given, shared=True)
                else:
                    out.take(device, {}, shared=False)
        return out

    def copy(self) -> Usage:
        out = Usage(self.counters, self.needs)
        out.counted = dict(self.counted)
        out.held = set(self.held)
        out.consumed = {d: dict(given) for d, given in self.consumed.items()}
        return out

    def fits(self, device: slices.Device, requests: Mapping[str, Any]) -> dict[str, int] | None:
        """What one more allocation of ``device`` asking ``requests`` (``exactly.capacity.requests``)
        takes of its capacity (empty for a plain device), or None when it does not fit."""
        key = ident(device)
        if key in self.held or (not device.shared and key in self.consumed):
            return None
        if any(name not in device.dimensions for name in requests):
            return None  # (a request for a dimension the device does not have)
        if key not in self.consumed and not self._counters_fit(key):
            return None
        if not device.shared:
            enough = all(
                _milli(asked) <= (capacity.total(device.dimensions[name]) or 0) for name, asked in requests.items()
            )
            return {} if enough else None
        given = self.consumed.get(key, {})
        takes: dict[str, int] = {}
        for name, dimension in device.dimensions.items():
            amount = capacity.taken(dimension, None if name not in requests else str(requests[name]))
            whole = capacity.total(dimension)
            if amount is None or whole is None or given.get(name, 0) + amount > whole:
                return None
            takes[name] = amount
        return takes

    def take(self, device: Device, given: Mapping[str, int], *, shared: bool) -> None:
        """One more allocation of ``device``: held, or ``given`` of its capacity when shared."""
        first = device not in self.held and device not in self.consumed
        if shared:
            mine = self.consumed.setdefault(device, {})
            for name, amount in given.items():
                mine[name] = mine.get(name, 0) + amount
        else:
            self.held.add(device)
        if first:
            for key, v in self.needs.get(device, {}).items():
                self.counted[key] = self.counted.get(key, 0) + v

    def _counters_fit(self, device: Device) -> bool:
        return all(
            key in self.counters and self.counted.get(key, 0) + v <= self.counters[key]
            for key, v in self.needs.get(device, {}).items()
        )


def _milli(value: Any) -> int:
    raw = value.get("value") if isinstance(value, dict) else value
    try:
        return quantity.parse_milli(str(raw))
    except quantity.QuantityError:
        return 0
