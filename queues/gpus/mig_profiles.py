"""The MIG geometry of NVIDIA's cards: how much of a card each GPU-instance profile takes.

A MIG slice is billed as the part of a card it keeps from others, and that is not g / 7: a card
has 7 compute slices and 8 memory slices (an A30 4 and 4), and a profile takes some of each. An
H200's ``1g.35gb`` has one compute slice but two memory slices, so only four fit on a card: it is
a quarter of the card, not a seventh; its ``3g.71gb`` takes half the memory, so two fit, and it is
half a card, not 3/7. A profile's part of a card is the larger of its compute share and its
memory share (NVIDIA's MIG user guide, "Supported MIG Profiles"; ``nvidia-smi mig -lgip`` on a
real H200 agrees, ``shared/data/h200-mig-profiles.txt``).

The NVIDIA device plugin advertises a profile as ``nvidia.com/mig-<profile>``, turning the media
extension's ``+me`` into ``.me`` (``nvidia.com/mig-1g.18gb.me``; Blackwell also ``-me``); a
profile with media extensions takes the same slices as the one without.

One profile name has two geometries: ``1g.10gb`` is an eighth of an A100-80GB's or H100-80GB's
memory (a seventh of the card) but a quarter of an A100-40GB's (a quarter of the card). The 80 GB
cards' reading is taken; an A100-40GB install says ``nvidia.com/mig-1g.10gb=1/4`` in
``TURNSTILE_GPU_FRACTIONS`` (``docs/gpu-efficiency.md``). A profile of no card here is billed
g / 7, and ``queues.gpus.gpu_units`` says so (``guessed``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

# nvidia.com/mig-<g>g.<memory>gb, with the media extension spelled .me or -me (or +me as nvidia-smi prints it)
RESOURCE = re.compile(r"^nvidia\.com/mig-(?P<profile>(?P<g>\d+)g\.\d+gb)(?:[.+-]me|\.gfx)?$")
ANY_MIG = re.compile(r"^nvidia\.com/mig-(?P<g>\d+)g\.")


@dataclass(frozen=True, slots=True)
class Card:
    """One card model's MIG geometry: its compute and memory slices and each profile's share of them."""

    name: str
    compute_slices: int
    memory_slices: int
    profiles: tuple[tuple[str, int], ...]  # (profile, memory slices it takes); its compute slices are its "<g>g"

    def share(self, profile: str) -> Fraction | None:
        for name, memory in self.profiles:
            if name == profile:
                compute = int(profile.partition("g.")[0])
                return max(Fraction(compute, self.compute_slices), Fraction(memory, self.memory_slices))
        return None


def _seven(name: str, small: int, large: int, half: int, whole: int) -> Card:
    """The 7-compute, 8-memory-slice shape every MIG card since the A100 has: 1g with one memory
    slice, 1g and 2g with two, 3g and 4g with four, 7g with all eight (sizes in GB as named)."""
    return Card(
        name,
        7,
        8,
        (
            (f"1g.{small}gb", 1),
            (f"1g.{large}gb", 2),
            (f"2g.{large}gb", 2),
            (f"3g.{half}gb", 4),
            (f"4g.{half}gb", 4),
            (f"7g.{whole}gb", 8),
        ),
    )


CARDS: tuple[Card, ...] = (
    # the 80 GB cards first: where a profile name means two geometries, the first card's wins
    _seven("A100-80GB", 10, 20, 40, 80),
    _seven("H100-80GB", 10, 20, 40, 80),
    _seven("A100-40GB", 5, 10, 20, 40),
    _seven("H100-94GB", 12, 24, 47, 94),
    _seven("H100-96GB (GH200)", 12, 24, 48, 96),
    _seven("H20", 12, 24, 48, 96),
    _seven("H200", 18, 35, 71, 141),
    _seven("B200", 23, 45, 90, 180),
    _seven("GB200", 23, 47, 93, 186),
    Card("A30", 4, 4, (("1g.6gb", 1), ("2g.12gb", 2), ("4g.24gb", 4))),
)


def _table() -> dict[str, Fraction]:
    out: dict[str, Fraction] = {}
    for card in CARDS:
        for profile, _ in card.profiles:
            share = card.share(profile)
            if share is not None:
                out.setdefault(profile, share)
    return out


SHARES = _table()


USABLE = 0.88  # GiB usable per GB in a profile's name, conservatively (an H200 1g.18gb holds 16.0 GiB)


def usable_gib(profile: str) -> float:
    """The GPU memory a profile gives, in GiB, from its name (``1g.18gb`` -> 15.8), conservatively
    below what ``nvidia-smi mig -lgip`` shows (16.0 GiB on an H200)."""
    gb = profile.partition(".")[2].removesuffix("gb")
    return float(gb) * USABLE if gb.isdigit() else 0.0


def share(resource: str) -> Fraction | None:
    """The part of a card one unit of a MIG resource is, from the table; None for a resource that
    is not a MIG profile of a card known here."""
    match = RESOURCE.match(resource)
    return None if match is None else SHARES.get(match.group("profile"))


def compute_share(resource: str) -> Fraction | None:
    """g / 7 for any ``nvidia.com/mig-<g>g.*`` resource: the guess for a profile of no known card."""
    match = ANY_MIG.match(resource)
    return None if match is None else Fraction(int(match.group("g")), 7)
