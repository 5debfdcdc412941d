"""A card's part each GPU resource is: MIG slices by their geometry (the larger of compute and
memory share), time-sliced replicas, overrides, and a guess that says it is one."""

from __future__ import annotations

from fractions import Fraction

import pytest

from queues.gpus import gpu_units, mig_profiles

# A real H200's profiles (nvidia-smi mig -lgip): how many of each fit on one card
H200_INSTANCES = {"1g.18gb": 7, "1g.35gb": 4, "2g.35gb": 3, "3g.71gb": 2, "4g.71gb": 1, "7g.141gb": 1}


@pytest.mark.parametrize(
    ("resource", "part"),
    [
        ("nvidia.com/mig-1g.18gb", Fraction(1, 7)),  # one compute slice of 7, one memory slice of 8
        ("nvidia.com/mig-1g.35gb", Fraction(1, 4)),  # two memory slices: four fit, a quarter (not 1/7)
        ("nvidia.com/mig-2g.35gb", Fraction(2, 7)),
        ("nvidia.com/mig-3g.71gb", Fraction(1, 2)),  # half the memory: two fit, half a card (not 3/7)
        ("nvidia.com/mig-4g.71gb", Fraction(4, 7)),
        ("nvidia.com/mig-7g.141gb", Fraction(1)),
        ("nvidia.com/mig-1g.18gb.me", Fraction(1, 7)),  # the device plugin's spelling of 1g.18gb+me
        ("nvidia.com/mig-1g.23gb-me", Fraction(1, 7)),  # Blackwell's
        ("nvidia.com/mig-1g.6gb", Fraction(1, 4)),  # an A30 has four slices of each
        ("nvidia.com/mig-2g.12gb", Fraction(1, 2)),
        ("nvidia.com/mig-1g.10gb", Fraction(1, 7)),  # A100-80GB / H100-80GB (an A100-40GB overrides)
        ("nvidia.com/mig-1g.5gb", Fraction(1, 7)),
        ("nvidia.com/mig-3g.20gb", Fraction(1, 2)),
        ("nvidia.com/mig-1g.24gb", Fraction(1, 4)),  # H100-94GB / H20
        ("nvidia.com/mig-3g.47gb", Fraction(1, 2)),
        ("nvidia.com/mig-1g.45gb", Fraction(1, 4)),  # B200
        ("nvidia.com/mig-7g.186gb", Fraction(1)),  # GB200
        ("nvidia.com/gpu", Fraction(1)),
        ("nvidia.com/gpu.shared", Fraction(1, 4)),
        ("cpu", None),
    ],
)
def test_a_units_part_of_a_card(resource: str, part: Fraction | None) -> None:
    assert gpu_units.card_fraction(resource) == part
    assert gpu_units.guessed(resource) is None


def test_every_h200_profile_is_at_least_one_over_how_many_fit() -> None:
    """A slice keeps at least its share of what the card can hold of it: never billed below 1/n when n fit."""
    for profile, fit in H200_INSTANCES.items():
        part = gpu_units.card_fraction(f"nvidia.com/mig-{profile}")
        assert part is not None and Fraction(1, fit) >= part >= Fraction(1, fit + 1), profile


def test_every_card_in_the_table_sums_to_one_card_at_most() -> None:
    for card in mig_profiles.CARDS:
        for profile, _ in card.profiles:
            share = card.share(profile)
            assert share is not None and 0 < share <= 1, (card.name, profile)
        assert card.share(card.profiles[-1][0]) == 1, card.name  # its largest profile is the whole card


def test_an_unknown_profile_is_guessed_as_its_compute_slices_and_says_so() -> None:
    resource = "nvidia.com/mig-2g.30gb"
    assert gpu_units.card_fraction(resource) == Fraction(2, 7)
    why = gpu_units.guessed(resource)
    assert why is not None and resource in why and "2/7" in why and "TURNSTILE_GPU_FRACTIONS" in why
    overrides = {resource: Fraction(1, 3)}
    assert gpu_units.card_fraction(resource, overrides) == Fraction(1, 3)
    assert gpu_units.guessed(resource, overrides) is None
    assert gpu_units.card_fraction("nvidia.com/mig-1g.35gb", {"nvidia.com/mig-1g.35gb": Fraction(1, 7)}) == Fraction(
        1, 7
    )


def test_cards_use_the_geometry() -> None:
    """Two 1g.35gb slices and one 3g.71gb of an H200 held: a whole card."""
    assert gpu_units.cards([("nvidia.com/mig-1g.35gb", 2000), ("nvidia.com/mig-3g.71gb", 1000), ("cpu", 4000)]) == 1.0
