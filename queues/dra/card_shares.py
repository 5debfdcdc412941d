"""What part of a GPU card one unit of a DRA-mapped resource is, read from the devices the
cluster publishes: so the ledger bills claimed devices in GPU-hours without being told.

A ClusterQueue's DRA quota is in logical resources an admin names (``whole-gpus``,
``gpu.memory``), so nothing in the name says what part of a card a unit is. The ResourceSlices
do:

- a mapping **by device** whose DeviceClasses select only MIG partitions of one profile
  (NVIDIA's driver publishes each with its ``profile``, ``1g.18gb``) bills each device as that
  profile's part of a card, as ``nvidia.com/mig-1g.18gb`` is billed
  (``queues.gpus.mig_profiles``: the larger of its compute and memory share, 1/7 here); whole GPUs
  (``type: gpu``) are a card each;
- a mapping by a **counter** (Kueue's partitionable devices: MIG partitions charged by the memory
  they take) bills a unit of the counter as the part of its card it is: one over what a card's
  ``sharedCounters`` hold of it (``memory: 140Gi`` on an H200: 16Gi is 0.11 of a card);
- a mapping by **capacity** (one source: shared GPUs charged by the memory a claim takes) bills a
  unit as one over the dimension a matching device has (``memory: 80Gi``).

Only where every matching device or card agrees: a mapping of several profiles, or of cards of
two sizes, has no one part of a card, and it is billed only where ``TURNSTILE_GPU_FRACTIONS``
says (which always wins; ``docs/dra.md``). What a mapping of NVIDIA's whole-GPU DeviceClass alone
bills (a card per unit) is ``Mappings.card_fractions``, which needs no devices.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction

from queues import quantity
from queues.dra import slices
from queues.dra.mappings import Mappings
from queues.gpus import mig_profiles

MIG_RESOURCE = "nvidia.com/mig-{profile}"  # how the device plugin names a profile: its billing is that


def derived(
    mappings: Mappings,
    classes: Mapping[str, tuple[str, ...]],
    published: Sequence[slices.Device],
    counter_sets: Sequence[slices.CounterSet],
) -> dict[str, Fraction]:
    """Each mapped resource's part of a card per unit, where the published devices (of complete
    pools, ``queues.dra.slices.current``) say it alone; ``classes``: DeviceClass -> its selectors."""
    classes_of: dict[str, list[str]] = {}
    for device_class, resource in mappings.by_class.items():
        classes_of.setdefault(resource, []).append(device_class)
    out: dict[str, Fraction] = {}
    for resource, mapped in sorted(classes_of.items()):
        counter = mappings.counter(resource)
        sources = mappings.capacity(resource)
        if counter is not None:
            totals = [
                c.counters[counter.name]
                for c in counter_sets
                if c.driver == counter.driver and counter.name in c.counters
            ]
            share = _one_over(totals)
        elif len(sources) == 1:
            (source,) = sources
            dimensions = [
                str(d.dimensions[source.name].get("value"))
                for d in _selected(classes, published, mapped)
                if d.driver == source.driver and slices.selects([source.selector], d) and source.name in d.dimensions
            ]
            share = _one_over(dimensions)
        elif not sources:
            share = _same(_device_share(d) for d in _selected(classes, published, mapped))
        else:
            share = None  # (several capacity sources add up units of different dimensions)
        if share is not None:
            out[resource] = share
    return out


def _selected(
    classes: Mapping[str, tuple[str, ...]], published: Sequence[slices.Device], mapped: list[str]
) -> list[slices.Device]:
    """The published devices one of the ``mapped`` DeviceClasses selects (none when one is not known)."""
    if any(c not in classes for c in mapped):
        return []
    return [d for d in published if any(slices.selects(classes[c], d) for c in mapped)]


def _device_share(device: slices.Device) -> Fraction | None:
    """A device's part of its card: a whole GPU's 1, a MIG partition's by its profile."""
    attributes = device.attributes.get(device.driver, {})
    profile = attributes.get("profile")
    if isinstance(profile, str) and profile:
        return mig_profiles.share(MIG_RESOURCE.format(profile=profile))
    return Fraction(1) if attributes.get("type") == "gpu" else None


def _same(shares: Iterable[Fraction | None]) -> Fraction | None:
    """The one share every device has; None when they differ, one is unknown, or there is none."""
    seen = set(shares)
    if len(seen) != 1:
        return None
    (share,) = seen
    return share


def _one_over(totals: Iterable[str]) -> Fraction | None:
    """1 / the one quantity every card or device has of it (a unit's part of it), else None."""
    try:
        amounts = {quantity.parse_milli(t) for t in totals}
    except quantity.QuantityError:
        return None
    if len(amounts) != 1:
        return None
    (milli,) = amounts
    return Fraction(quantity.MILLI, milli) if milli > 0 else None
