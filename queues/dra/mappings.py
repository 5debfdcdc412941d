"""Which logical resource each DeviceClass's devices are charged as: Kueue's
``resources.deviceClassMappings``, read from ``TURNSTILE_DEVICE_CLASS_MAPPINGS`` or a scenario's
``deviceClassMappings:``.

Kueue's rules hold: a mapping's name is a resource name a ClusterQueue can give quota for; a
DeviceClass belongs to at most one mapping (one device, one charge). A mapping may charge by a
counter its devices consume instead of by device (``sources: [{counter: {name, driver,
deviceSelector}}]``, Kueue's partitionable devices: MIG partitions charged by the memory of their
card they take, ``queues.dra.charges``), or by what it takes of shared devices' capacity
(``sources: [{capacity: {name, driver, deviceSelector}}, ...]``, Kueue's consumable capacity:
time-sliced GPUs charged by the memory each claim may use, ``queues.dra.capacity``). Kueue's
rules for sources hold too: exactly one kind per entry, at most one counter source, counter and
capacity sources never mixed in one mapping.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from queues import errors
from queues.dra import slices
from queues.errors import FieldError

# a qualified name: an optional DNS subdomain prefix and a slash, then a DNS label (Kueue's validation)
_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
QUALIFIED = re.compile(rf"^({_LABEL}(\.{_LABEL})*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
SUBDOMAIN = re.compile(rf"^{_LABEL}(\.{_LABEL})*$")  # a DeviceClass's name, as any object's
LABEL = re.compile(rf"^{_LABEL}$")
# a DRA QualifiedName (a capacity dimension): an optional DNS subdomain and a slash, then a C identifier
QUALIFIED_NAME = re.compile(rf"^({_LABEL}(\.{_LABEL})*/)?[A-Za-z_][A-Za-z0-9_]{{0,62}}$")
FIELDS = {"name", "deviceClassNames", "sources"}
SETTING = "TURNSTILE_DEVICE_CLASS_MAPPINGS"
# the DeviceClasses whose devices are whole GPU cards (NVIDIA's DRA driver): a resource mapped from
# these alone is billed a card per unit on the GPU-hour ledger
WHOLE_GPU_CLASSES = frozenset({"gpu.nvidia.com"})


@dataclass(frozen=True, slots=True)
class CounterSource:
    """Charge by a counter the matched devices consume (``consumesCounters``), not by device."""

    name: str  # the counter (memory)
    driver: str  # the driver whose ResourceSlices publish the devices
    selector: str  # deviceSelector.cel.expression: which devices count


@dataclass(frozen=True, slots=True)
class CapacitySource:
    """Charge by what an allocation takes of a shared device's capacity dimension, not by device."""

    name: str  # the capacity dimension, as the devices name it (memory, gpu.example.com/memory)
    driver: str
    selector: str


@dataclass(frozen=True, slots=True)
class Mappings:
    """DeviceClass name -> the logical resource its devices are charged as (and, for a resource
    charged by a counter, its source)."""

    by_class: Mapping[str, str] = field(default_factory=dict)
    counters: Mapping[str, CounterSource] = field(default_factory=dict)  # resource -> its counter source
    capacities: Mapping[str, tuple[CapacitySource, ...]] = field(default_factory=dict)  # resource -> its sources

    def lookup(self, device_class: str) -> str | None:
        return self.by_class.get(device_class)

    def counter(self, resource: str) -> CounterSource | None:
        return self.counters.get(resource)

    def capacity(self, resource: str) -> tuple[CapacitySource, ...]:
        return self.capacities.get(resource, ())

    def reads_slices(self) -> bool:
        """Whether a charge depends on the cluster's ResourceSlices: with any mapping, a request's
        own CEL selectors are checked against the devices (and sources read what they consume)."""
        return bool(self.by_class)

    def card_fractions(self) -> dict[str, Fraction]:
        """The resources whose units are whole GPU cards (mapped from whole-GPU DeviceClasses
        alone): a card per unit on the ledger. Others (MIG partitions, other devices) are billed
        only where ``TURNSTILE_GPU_FRACTIONS`` says what part of a card they are."""
        grouped: dict[str, set[str]] = {}
        for device_class, name in self.by_class.items():
            grouped.setdefault(name, set()).add(device_class)
        return {
            name: Fraction(1)
            for name, classes in grouped.items()
            if classes <= WHOLE_GPU_CLASSES and name not in self.counters and name not in self.capacities
        }

    def to_list(self) -> list[dict[str, Any]]:
        """Kueue's shape again: one mapping per logical resource, its DeviceClasses sorted."""
        grouped: dict[str, list[str]] = {}
        for device_class, name in self.by_class.items():
            grouped.setdefault(name, []).append(device_class)
        return [{"name": n, "deviceClassNames": sorted(dcs)} for n, dcs in sorted(grouped.items())]


NONE = Mappings()


def parse(raw: Any, path: str = "deviceClassMappings") -> Mappings:
    """Kueue's ``deviceClassMappings`` list, or ``errors.Invalid`` naming every problem's field."""
    if raw is None:
        return NONE
    if not isinstance(raw, list):
        raise errors.Invalid([FieldError(path, "must be a list of {name, deviceClassNames: [...]}")])
    problems: list[FieldError] = []
    by_class: dict[str, str] = {}
    counters: dict[str, CounterSource] = {}
    capacities: dict[str, tuple[CapacitySource, ...]] = {}
    names: set[str] = set()
    for i, entry in enumerate(raw):
        where = f"{path}[{i}]"
        if not isinstance(entry, Mapping):
            problems.append(FieldError(where, "must be a mapping {name, deviceClassNames: [...]}"))
            continue
        for key in entry:
            if key not in FIELDS:
                problems.append(
                    FieldError(f"{where}.{key}", f"unknown field; a mapping has {', '.join(sorted(FIELDS))}")
                )
        name = entry.get("name")
        if not isinstance(name, str) or not QUALIFIED.match(name) or len(name) > 253:
            problems.append(
                FieldError(
                    f"{where}.name", f"must be a resource name (an optional DNS prefix and a label), not {name!r}"
                )
            )
            continue
        if name in names:
            problems.append(
                FieldError(f"{where}.name", f"Duplicate value: {name!r}; list its DeviceClasses in one mapping")
            )
            continue
        names.add(name)
        classes = entry.get("deviceClassNames")
        if not isinstance(classes, list) or not classes:
            problems.append(FieldError(f"{where}.deviceClassNames", "required: the DeviceClasses charged as " + name))
            continue
        for j, dc in enumerate(classes):
            at = f"{where}.deviceClassNames[{j}]"
            if not isinstance(dc, str) or not SUBDOMAIN.match(dc) or len(dc) > 253:
                problems.append(FieldError(at, f"must be a DeviceClass name, not {dc!r}"))
            elif dc in by_class:
                problems.append(
                    FieldError(
                        at, f"DeviceClass {dc} is already charged as {by_class[dc]}: a DeviceClass maps to one resource"
                    )
                )
            else:
                by_class[dc] = name
        sources = _sources(entry.get("sources"), f"{where}.sources", problems)
        if isinstance(sources, CounterSource):
            counters[name] = sources
        elif sources:
            capacities[name] = sources
    if problems:
        raise errors.Invalid(problems)
    return Mappings(by_class, counters, capacities)


def _sources(raw: Any, where: str, problems: list[FieldError]) -> CounterSource | tuple[CapacitySource, ...]:
    """A mapping's ``sources``: one counter source, or capacity sources (Kueue's rules)."""
    if raw is None:
        return ()
    shape = "[{counter: {name, driver, deviceSelector}}] or [{capacity: {name, driver, deviceSelector}}, ...]"
    if not isinstance(raw, list) or not raw:
        problems.append(FieldError(where, f"must be a list of one source or more: {shape}"))
        return ()
    counters: list[CounterSource] = []
    capacities: list[CapacitySource] = []
    for i, entry in enumerate(raw):
        at = f"{where}[{i}]"
        kinds = [k for k in ("counter", "capacity") if isinstance(entry, Mapping) and k in entry]
        if not isinstance(entry, Mapping) or len(kinds) != 1 or set(entry) != set(kinds):
            problems.append(FieldError(at, f"exactly one source type must be set per entry: {shape}"))
            continue
        source = _source(kinds[0], entry[kinds[0]], f"{at}.{kinds[0]}", problems)
        if isinstance(source, CounterSource):
            counters.append(source)
        elif source is not None:
            capacities.append(source)
    if len(counters) > 1:
        problems.append(FieldError(where, "at most one counter source per mapping (Kueue's rule)"))
    if counters and capacities:
        problems.append(FieldError(where, "cannot mix counter and capacity sources in the same mapping"))
    return counters[0] if counters else tuple(capacities)


def _source(kind: str, raw: Any, at: str, problems: list[FieldError]) -> CounterSource | CapacitySource | None:
    """One ``{counter: ...}`` or ``{capacity: ...}``: a name, a driver, a compiling device selector."""
    if not isinstance(raw, Mapping):
        problems.append(FieldError(at, "must be {name, driver, deviceSelector: {cel: {expression}}}"))
        return None
    name, driver = raw.get("name"), raw.get("driver")
    selector = ((raw.get("deviceSelector") or {}).get("cel") or {}).get("expression")
    before = len(problems)
    if kind == "counter" and (not isinstance(name, str) or not LABEL.match(name) or len(name) > 63):
        problems.append(
            FieldError(f"{at}.name", f"must be the counter the devices consume (a DNS label), not {name!r}")
        )
    if kind == "capacity" and (not isinstance(name, str) or not QUALIFIED_NAME.match(name)):
        problems.append(
            FieldError(
                f"{at}.name",
                "must be the capacity dimension the devices publish (an optional DNS domain, a slash and a C "
                f"identifier, as memory or gpu.example.com/memory), not {name!r}",
            )
        )
    for key in set(raw) - {"name", "driver", "deviceSelector"}:
        problems.append(FieldError(f"{at}.{key}", "unknown field; a source has name, driver, deviceSelector"))
    if not isinstance(driver, str) or not SUBDOMAIN.match(driver) or len(driver) > 63:
        problems.append(
            FieldError(f"{at}.driver", "required: the DRA driver publishing the devices (a DNS subdomain, at most 63)")
        )
    if not isinstance(selector, str) or not selector:
        problems.append(FieldError(f"{at}.deviceSelector.cel.expression", "required: which devices are counted"))
    elif (error := slices.compile_error(selector)) is not None:
        problems.append(FieldError(f"{at}.deviceSelector.cel.expression", f"does not compile: {error}"))
    if len(problems) > before:
        return None
    made = CounterSource if kind == "counter" else CapacitySource
    return made(str(name), str(driver), str(selector))
