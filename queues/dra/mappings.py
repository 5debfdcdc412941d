"""Which logical resource each DeviceClass's devices are charged as: Kueue's
``resources.deviceClassMappings``, read from ``TURNSTILE_DEVICE_CLASS_MAPPINGS`` or a scenario's
``deviceClassMappings:``.

Kueue's rules hold: a mapping's name is a resource name a ClusterQueue can give quota for; a
DeviceClass belongs to at most one mapping (one device, one charge). A mapping may charge by a
counter its devices consume instead of by device (``sources: [{counter: {name, driver,
deviceSelector}}]``, Kueue's partitionable devices: MIG partitions charged by the memory of their
card they take, ``queues.dra.charges``); capacity sources are refused by name, not ignored.
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
FIELDS = {"name", "deviceClassNames", "sources"}
NOT_YET: dict[str, str] = {}
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
class Mappings:
    """DeviceClass name -> the logical resource its devices are charged as (and, for a resource
    charged by a counter, its source)."""

    by_class: Mapping[str, str] = field(default_factory=dict)
    counters: Mapping[str, CounterSource] = field(default_factory=dict)  # resource -> its counter source

    def lookup(self, device_class: str) -> str | None:
        return self.by_class.get(device_class)

    def counter(self, resource: str) -> CounterSource | None:
        return self.counters.get(resource)

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
            if classes <= WHOLE_GPU_CLASSES and name not in self.counters
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
    names: set[str] = set()
    for i, entry in enumerate(raw):
        where = f"{path}[{i}]"
        if not isinstance(entry, Mapping):
            problems.append(FieldError(where, "must be a mapping {name, deviceClassNames: [...]}"))
            continue
        for key in entry:
            if key in NOT_YET:
                problems.append(FieldError(f"{where}.{key}", NOT_YET[str(key)]))
            elif key not in FIELDS:
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
        source = _source(entry.get("sources"), f"{where}.sources", problems)
        if source is not None:
            counters[name] = source
    if problems:
        raise errors.Invalid(problems)
    return Mappings(by_class, counters)


def _source(raw: Any, where: str, problems: list[FieldError]) -> CounterSource | None:
    """A mapping's ``sources``: at most one counter source (Kueue's rule); capacity sources refused."""
    if raw is None:
        return None
    if not isinstance(raw, list) or len(raw) != 1 or not isinstance(raw[0], Mapping):
        problems.append(FieldError(where, "must be a list of one source: [{counter: {name, driver, deviceSelector}}]"))
        return None
    entry = raw[0]
    if "capacity" in entry:
        problems.append(
            FieldError(
                f"{where}[0].capacity",
                "charging by consumable capacity (shared devices) is not implemented yet; remove it to charge "
                "one unit per device, or use a counter source",
            )
        )
        return None
    counter = entry.get("counter")
    if not isinstance(counter, Mapping) or set(entry) != {"counter"}:
        problems.append(
            FieldError(f"{where}[0]", "must be {counter: {name, driver, deviceSelector: {cel: {expression}}}}")
        )
        return None
    at = f"{where}[0].counter"
    name, driver = counter.get("name"), counter.get("driver")
    selector = ((counter.get("deviceSelector") or {}).get("cel") or {}).get("expression")
    before = len(problems)
    if not isinstance(name, str) or not name:
        problems.append(FieldError(f"{at}.name", "required: the counter the devices consume (memory)"))
    if not isinstance(driver, str) or not driver or len(driver) > 63:
        problems.append(
            FieldError(f"{at}.driver", "required: the DRA driver publishing the devices (at most 63 characters)")
        )
    if not isinstance(selector, str) or not selector:
        problems.append(FieldError(f"{at}.deviceSelector.cel.expression", "required: which devices are counted"))
    elif (error := slices.compile_error(selector)) is not None:
        problems.append(FieldError(f"{at}.deviceSelector.cel.expression", f"does not compile: {error}"))
    if len(problems) > before:
        return None
    return CounterSource(str(name), str(driver), str(selector))
