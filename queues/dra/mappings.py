"""Which logical resource each DeviceClass's devices are charged as: Kueue's
``resources.deviceClassMappings``, read from ``TURNSTILE_DEVICE_CLASS_MAPPINGS`` or a scenario's
``deviceClassMappings:``.

Kueue's rules hold: a mapping's name is a resource name a ClusterQueue can give quota for; a
DeviceClass belongs to at most one mapping (one device, one charge). Fields Turnstile does not
implement yet are refused by name rather than ignored.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from queues import errors
from queues.errors import FieldError

# a qualified name: an optional DNS subdomain prefix and a slash, then a DNS label (Kueue's validation)
_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
QUALIFIED = re.compile(rf"^({_LABEL}(\.{_LABEL})*/)?{_LABEL}$")
SUBDOMAIN = re.compile(rf"^{_LABEL}(\.{_LABEL})*$")  # a DeviceClass's name, as any object's
FIELDS = {"name", "deviceClassNames"}
NOT_YET = {
    "sources": "charging by counters or capacity (partitionable and shared devices) is not implemented yet; "
    "remove sources to charge one unit per device claimed",
}
SETTING = "TURNSTILE_DEVICE_CLASS_MAPPINGS"
# the DeviceClasses whose devices are whole GPU cards (NVIDIA's DRA driver): a resource mapped from
# these alone is billed a card per unit on the GPU-hour ledger
WHOLE_GPU_CLASSES = frozenset({"gpu.nvidia.com"})


@dataclass(frozen=True, slots=True)
class Mappings:
    """DeviceClass name -> the logical resource its devices are charged as."""

    by_class: Mapping[str, str] = field(default_factory=dict)

    def lookup(self, device_class: str) -> str | None:
        return self.by_class.get(device_class)

    def card_fractions(self) -> dict[str, Fraction]:
        """The resources whose units are whole GPU cards (mapped from whole-GPU DeviceClasses
        alone): a card per unit on the ledger. Others (MIG partitions, other devices) are billed
        only where ``TURNSTILE_GPU_FRACTIONS`` says what part of a card they are."""
        grouped: dict[str, set[str]] = {}
        for device_class, name in self.by_class.items():
            grouped.setdefault(name, set()).add(device_class)
        return {name: Fraction(1) for name, classes in grouped.items() if classes <= WHOLE_GPU_CLASSES}

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
    if problems:
        raise errors.Invalid(problems)
    return Mappings(by_class)
