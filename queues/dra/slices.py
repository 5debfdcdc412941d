"""What DRA drivers publish, as quota needs it: the devices of ResourceSlices, and which of them a
claim's selectors match.

A ResourceSlice lists devices of one driver's pool on a node (or for all nodes); a pool may span
several slices (``resourceSliceCount``), and only a pool's latest generation counts, all of its
slices present (an incomplete pool is being rewritten: its devices are left out, as Kueue does).
A partitionable device (a MIG partition) says what it consumes of its card's shared counters
(``consumesCounters``: ``memory: 9856Mi``...): what counter-based quota charges
(``queues.dra.charges``); a shared device (``allowMultipleAllocations``) says how much of each
capacity dimension an allocation may take (``requestPolicy``): what capacity-based quota charges
(``queues.dra.capacity``).

Selectors are CEL expressions over ``device`` (``device.driver``, ``device.attributes[domain]
.name``, ``device.capacity[domain].name``), evaluated with cel-python as the kube-scheduler
evaluates them (an unqualified attribute name is in its driver's domain). Not evaluated here:
the Kubernetes CEL library's ``quantity()`` and ``semver()`` (an expression using them selects
nothing). The simulated cluster's allocator uses the same matching
(``admission.sim.operators.dra``).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import celpy
from celpy.adapter import json_to_cel

from queues import errors
from queues.errors import FieldError


@dataclass(frozen=True, slots=True)
class Device:
    """One device of a ResourceSlice."""

    driver: str
    pool: str
    name: str
    node: str | None  # None: the slice is for all nodes
    attributes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # domain -> name -> value
    capacity: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # domain -> name -> quantity
    consumes: Mapping[str, str] = field(default_factory=dict)  # counter name -> quantity (consumesCounters)
    shared: bool = False  # allowMultipleAllocations: claims share it, each taking part of its capacity
    dimensions: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # capacity name -> {value, requestPolicy}

    @classmethod
    def of(cls, driver: str, pool: str, node: str | None, raw: Mapping[str, Any]) -> Device:
        attributes: dict[str, dict[str, Any]] = {}
        for name, value in (raw.get("attributes") or {}).items():
            domain, _, short = str(name).rpartition("/")
            unwrapped = next(iter(value.values())) if isinstance(value, Mapping) and value else value
            attributes.setdefault(domain or driver, {})[short] = unwrapped
        capacity: dict[str, dict[str, Any]] = {}
        dimensions: dict[str, Mapping[str, Any]] = {}
        for name, value in (raw.get("capacity") or {}).items():
            dimensions[str(name)] = value if isinstance(value, Mapping) else {"value": value}
            domain, _, short = str(name).rpartition("/")
            capacity.setdefault(domain or driver, {})[short] = (
                value.get("value") if isinstance(value, Mapping) else value
            )
        consumes: dict[str, str] = {}
        for entry in raw.get("consumesCounters") or []:
            for counter, value in ((entry or {}).get("counters") or {}).items():
                amount = value.get("value") if isinstance(value, Mapping) else value
                consumes[str(counter)] = str(amount)
        return cls(
            driver,
            pool,
            str(raw.get("name")),
            node,
            attributes,
            capacity,
            consumes,
            bool(raw.get("allowMultipleAllocations")),
            dimensions,
        )

    def cel(self) -> dict[str, Any]:
        """The device as a selector's ``device`` variable."""
        return {
            "driver": self.driver,
            "attributes": {d: dict(v) for d, v in self.attributes.items()},
            "capacity": {d: dict(v) for d, v in self.capacity.items()},
            "allowMultipleAllocations": self.shared,  # (with the DRAConsumableCapacity gate, as on a real cluster)
        }


@dataclass(frozen=True, slots=True)
class CounterSet:
    """One of a ResourceSlice's ``sharedCounters``: what a card holds that its partitions consume
    (``memory: 140Gi``); what a node offers of a counter-charged resource (``queues.dra.node_capacity``)."""

    driver: str
    pool: str
    node: str | None
    name: str
    counters: Mapping[str, str]  # counter name -> quantity


@dataclass(frozen=True, slots=True)
class Slice:
    """A ResourceSlice: a pool's devices (or part of them), of one driver."""

    name: str
    driver: str
    pool: str
    generation: int
    count: int  # the pool's resourceSliceCount
    devices: tuple[Device, ...]
    counter_sets: tuple[CounterSet, ...] = ()

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> Slice:
        """A ``resource.k8s.io/v1`` ResourceSlice, or ``errors.Invalid`` naming the field."""
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
        assert isinstance(meta, Mapping)
        spec = obj.get("spec") if isinstance(obj.get("spec"), Mapping) else {}
        assert isinstance(spec, Mapping)
        pool = spec.get("pool") if isinstance(spec.get("pool"), Mapping) else {}
        assert isinstance(pool, Mapping)
        problems: list[FieldError] = []
        if not isinstance(spec.get("driver"), str) or not spec["driver"]:
            problems.append(FieldError("spec.driver", "required: the driver that publishes these devices"))
        if not isinstance(pool.get("name"), str) or not pool["name"]:
            problems.append(FieldError("spec.pool.name", "required: the pool the devices belong to"))
        devices = spec.get("devices") or []
        if not isinstance(devices, list) or not all(isinstance(d, Mapping) and d.get("name") for d in devices):
            problems.append(FieldError("spec.devices", "must be a list of devices, each with a name"))
        if problems:
            raise errors.Invalid(problems, subject=f"ResourceSlice {meta.get('name') or '?'}")
        driver, pool_name = str(spec["driver"]), str(pool["name"])
        node = spec.get("nodeName") if isinstance(spec.get("nodeName"), str) else None
        counter_sets = tuple(
            CounterSet(
                driver,
                pool_name,
                node,
                str(entry.get("name")),
                {
                    str(counter): str(value.get("value") if isinstance(value, Mapping) else value)
                    for counter, value in (entry.get("counters") or {}).items()
                },
            )
            for entry in spec.get("sharedCounters") or []
            if isinstance(entry, Mapping)
        )
        return cls(
            str(meta.get("name") or f"{driver}-{pool_name}"),
            driver,
            pool_name,
            int(pool.get("generation") or 0),
            int(pool.get("resourceSliceCount") or 1),
            tuple(Device.of(driver, pool_name, node, d) for d in devices),
            counter_sets,
        )


def _newest(slices: Iterable[Slice]) -> list[tuple[list[Slice], bool]]:
    """Each pool's slices of its latest generation (by driver and pool), and whether all are present."""
    pools: dict[tuple[str, str], list[Slice]] = {}
    for s in slices:
        pools.setdefault((s.driver, s.pool), []).append(s)
    out: list[tuple[list[Slice], bool]] = []
    for key in sorted(pools):
        latest = max(s.generation for s in pools[key])
        newest = sorted((s for s in pools[key] if s.generation == latest), key=lambda s: s.name)
        out.append((newest, len(newest) >= max(s.count for s in newest)))
    return out


def current(slices: Iterable[Slice]) -> tuple[Slice, ...]:
    """The slices of every complete pool at its latest generation (what counts)."""
    return tuple(s for newest, whole in _newest(slices) if whole for s in newest)


def rewriting(slices: Iterable[Slice]) -> bool:
    """Whether a pool is being rewritten (its newest generation's slices not all present): its devices
    are left out of ``current``, so what a node has is not known whole."""
    return any(not whole for _, whole in _newest(slices))


def published(slices: Iterable[Slice]) -> tuple[Device, ...]:
    """The devices of every complete pool at its latest generation."""
    return tuple(d for s in current(slices) for d in s.devices)


@functools.lru_cache(maxsize=512)
def _program(expression: str) -> Any:
    env = celpy.Environment()
    return env.program(env.compile(expression))


def selects(expressions: Iterable[str], device: Device) -> bool:
    """Whether every CEL expression selects ``device`` (one that cannot be compiled or evaluated
    selects nothing)."""
    bound: dict[str, Any] | None = None
    for expression in expressions:
        if bound is None:
            bound = {"device": json_to_cel(device.cel())}
        try:
            result = _program(expression).evaluate(bound)
        except Exception:  # (celpy's parse and evaluation errors)
            return False
        if isinstance(result, Exception) or not bool(result):
            return False
    return True


def compile_error(expression: str) -> str | None:
    """Why ``expression`` does not compile (None: it does): a configuration's selectors are checked
    when it is read."""
    try:
        _program(expression)
    except Exception as exc:
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return None


def expressions(selectors: Any) -> tuple[str, ...]:
    """The CEL expressions of a list of DRA ``DeviceSelector``s (``[{cel: {expression}}]``): a
    DeviceClass's, or a device request's."""
    return tuple(
        str(s["cel"]["expression"])
        for s in selectors or []
        if isinstance(s, Mapping) and isinstance(s.get("cel"), Mapping) and s["cel"].get("expression")
    )


def class_selectors(obj: Mapping[str, Any]) -> tuple[str, ...]:
    """A DeviceClass's CEL selectors' expressions (every device it offers matches them all)."""
    spec = obj.get("spec") if isinstance(obj.get("spec"), Mapping) else {}
    assert isinstance(spec, Mapping)
    return expressions(spec.get("selectors"))
