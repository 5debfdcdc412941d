"""A DRA-mapped resource's part of a card, read off the published devices
(``queues.dra.card_shares``): what GPU-hours bill without ``TURNSTILE_GPU_FRACTIONS``."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from queues.dra import charges, mappings, slices
from queues.gpus import gpu_units

GI = 2**30
MIG = {"mig.nvidia.com": ("device.attributes['gpu.nvidia.com'].type == 'mig'",)}
ONE_PROFILE = {"mig-1g.nvidia.com": ("device.attributes['gpu.nvidia.com'].profile == '1g.18gb'",)}
WHOLE = {"gpu.nvidia.com": ("device.attributes['gpu.nvidia.com'].type == 'gpu'",)}


def card(node: str, memory: str, *partitions: tuple[str, str], whole: int = 0) -> slices.Slice:
    """A node's H200-like card: its memory counter and ``partitions`` (name, profile) consuming it."""
    devices: list[dict[str, Any]] = [
        {
            "name": name,
            "attributes": {"type": {"string": "mig"}, "profile": {"string": profile}},
            "consumesCounters": [{"counterSet": "gpu-0", "counters": {"memory": {"value": "16Gi"}}}],
        }
        for name, profile in partitions
    ]
    devices += [{"name": f"gpu-{i}", "attributes": {"type": {"string": "gpu"}}} for i in range(whole)]
    return slices.Slice.from_object(
        {
            "metadata": {"name": node},
            "spec": {
                "driver": "gpu.nvidia.com",
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "sharedCounters": [{"name": "gpu-0", "counters": {"memory": {"value": memory}}}],
                "devices": devices,
            },
        }
    )


def fractions(
    raw: list[dict[str, Any]], classes: dict[str, tuple[str, ...]], *cluster: slices.Slice
) -> dict[str, Fraction]:
    return charges.Devices.of(mappings.parse(raw), [], classes, cluster).card_fractions()


def by_counter(name: str = "gpu.memory") -> list[dict[str, Any]]:
    source = {
        "counter": {"name": "memory", "driver": "gpu.nvidia.com", "deviceSelector": {"cel": {"expression": "true"}}}
    }
    return [{"name": name, "deviceClassNames": ["mig.nvidia.com"], "sources": [source]}]


def test_a_mapping_of_one_mig_profile_is_billed_as_that_profile_is() -> None:
    """An H200's ``1g.18gb`` is a seventh of the card, as ``nvidia.com/mig-1g.18gb`` is billed."""
    h200 = card("n1", "140Gi", ("p0", "1g.18gb"), ("p1", "1g.18gb"), ("p2", "3g.71gb"))
    got = fractions([{"name": "mig-1g", "deviceClassNames": ["mig-1g.nvidia.com"]}], ONE_PROFILE, h200)
    assert got == {"mig-1g": Fraction(1, 7)} == {"mig-1g": gpu_units.card_fraction("nvidia.com/mig-1g.18gb")}


def test_a_mapping_of_several_profiles_has_no_one_part_of_a_card() -> None:
    h200 = card("n1", "140Gi", ("p0", "1g.18gb"), ("p2", "3g.71gb"))
    assert fractions([{"name": "mig-devices", "deviceClassNames": ["mig.nvidia.com"]}], MIG, h200) == {}


def test_whole_gpus_are_a_card_each_whatever_their_class_is_called() -> None:
    cards = card("n1", "80Gi", whole=4)
    got = fractions(
        [{"name": "gpus", "deviceClassNames": ["h100.example.com"]}],
        {"h100.example.com": WHOLE["gpu.nvidia.com"]},
        cards,
    )
    assert got == {"gpus": Fraction(1)}


def test_a_counter_unit_is_one_over_what_a_card_holds_of_it() -> None:
    """Partitions charged by memory: 16Gi of an H200's 140Gi is 16/140 of a card."""
    got = fractions(by_counter(), MIG, card("n1", "140Gi", ("p0", "1g.18gb")), card("n2", "140Gi", ("p0", "1g.18gb")))
    assert got == {"gpu.memory": Fraction(1, 140 * GI)}
    assert gpu_units.cards([("gpu.memory", 16 * GI * 1000)], got) == 16 / 140


def test_cards_of_two_sizes_have_no_one_part_for_a_unit() -> None:
    assert (
        fractions(by_counter(), MIG, card("n1", "140Gi", ("p0", "1g.18gb")), card("n2", "80Gi", ("p0", "1g.10gb")))
        == {}
    )


def test_a_capacity_unit_is_one_over_the_dimension_a_shared_device_has() -> None:
    shared = slices.Slice.from_object(
        {
            "metadata": {"name": "ts"},
            "spec": {
                "driver": "gpu.nvidia.com",
                "nodeName": "ts",
                "pool": {"name": "ts", "generation": 1, "resourceSliceCount": 1},
                "devices": [
                    {"name": f"gpu-{i}", "allowMultipleAllocations": True, "capacity": {"memory": {"value": "80Gi"}}}
                    for i in range(2)
                ],
            },
        }
    )
    source = {
        "capacity": {"name": "memory", "driver": "gpu.nvidia.com", "deviceSelector": {"cel": {"expression": "true"}}}
    }
    raw = [{"name": "gpu.memory", "deviceClassNames": ["shared.nvidia.com"], "sources": [source]}]
    assert fractions(raw, {"shared.nvidia.com": ("true",)}, shared) == {"gpu.memory": Fraction(1, 80 * GI)}


def test_nothing_published_says_nothing_and_the_whole_gpu_class_is_a_card_anyway() -> None:
    assert fractions(by_counter(), MIG) == {}
    assert fractions([{"name": "whole-gpus", "deviceClassNames": ["gpu.nvidia.com"]}], {}) == {
        "whole-gpus": Fraction(1)
    }
