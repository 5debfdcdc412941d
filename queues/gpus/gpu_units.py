"""How much of a whole GPU card one unit of a GPU resource is, for billing in card-hours.

A ledger counts resource-hours: a MIG slice ``nvidia.com/mig-1g.10gb`` held for an hour is one
slice-hour, and a time-sliced replica ``nvidia.com/gpu.shared`` one replica-hour. Billed as
GPU-hours, they are fractions of a card (``turnstile usage``'s ``gpuHours``):

- ``nvidia.com/gpu`` (and any other whole-GPU resource, ``amd.com/gpu``...): 1;
- ``nvidia.com/mig-<profile>``: the larger of its compute and memory share of the card it is a
  slice of (``queues.gpus.mig_profiles``: an H200's ``1g.35gb`` is 1/4, its ``3g.71gb`` 1/2, an A30's
  ``1g.6gb`` 1/4); a profile of no card known there is guessed as g / 7, and ``guessed`` says so;
- ``nvidia.com/gpu.shared`` (the GPU operator's time-slicing with ``renameByDefault``): 1 / the
  replicas per card, 4 unless said otherwise.

Overrides (``TURNSTILE_GPU_FRACTIONS``, ``turnstile usage --fraction``) map a resource to a
fraction, ``nvidia.com/mig-1g.6gb=1/4``; a renamed time-sliced resource is given one there, and so
is a DRA mapping's resource (``whole-gpus=1``). Without one, a DRA mapping's part of a card is
what the cluster's devices say (``queues.dra.card_shares``: a MIG profile's part, one over a card's
memory counter...) where they say one thing; a resource counted in bytes is given a card's worth,
``gpu.memory=1/140Gi``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from fractions import Fraction

from queues import quantity
from queues.gpus import mig_profiles
from queues.podsets.pod_resources import is_gpu

SHARED = "nvidia.com/gpu.shared"
# a resource name: an optional DNS prefix and a slash (nvidia.com/mig-1g.10gb), or a name alone (a DRA
# mapping's whole-gpus)
RESOURCE_NAME = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
TIME_SLICING_REPLICAS = 4
_NUMBER = re.compile(r"^\d+(\.\d+)?$")


def parse_fractions(values: Iterable[str]) -> dict[str, Fraction]:
    """``RESOURCE=FRACTION`` items (``nvidia.com/mig-1g.6gb=1/4``, ``example.com/vgpu=0.5``);
    ``ValueError`` naming the item that is not one."""
    out: dict[str, Fraction] = {}
    for value in values:
        resource, sep, raw = value.strip().partition("=")
        fraction = _fraction(raw.strip())
        if not sep or not RESOURCE_NAME.match(resource.strip()) or not 0 < fraction <= 1:
            raise ValueError(
                f"{value.strip()!r}: write RESOURCE=FRACTION of a card, e.g. nvidia.com/mig-1g.6gb=1/4, or "
                "for a resource counted in bytes one card's worth, e.g. gpu.memory=1/140Gi "
                "(a fraction above 0 and at most 1)"
            )
        out[resource.strip()] = fraction
    return out


def _fraction(raw: str) -> Fraction:
    """``1/4``, ``0.5``, or ``1/140Gi`` (one unit is 1/150323855360 of a card: a DRA mapping charged
    by memory, a card per 140Gi); -1 when it is none."""
    top, slash, bottom = raw.partition("/")
    try:
        if slash and not _NUMBER.match(bottom.strip()):
            return Fraction(top.strip()) / Fraction(quantity.parse_milli(bottom.strip()), quantity.MILLI)
        return Fraction(raw)
    except (ValueError, ZeroDivisionError, quantity.QuantityError):
        return Fraction(-1)


def card_fraction(resource: str, overrides: Mapping[str, Fraction] | None = None) -> Fraction | None:
    """The part of a card one unit of ``resource`` is; None for a resource that is no GPU."""
    if overrides and resource in overrides:
        return overrides[resource]
    if (mig := mig_profiles.share(resource) or mig_profiles.compute_share(resource)) is not None:
        return mig
    if resource == SHARED:
        return Fraction(1, TIME_SLICING_REPLICAS)
    return Fraction(1) if is_gpu(resource) else None


def cards(amounts: Iterable[tuple[str, int]], overrides: Mapping[str, Fraction] | None = None) -> float:
    """Whole cards in (resource, milli-units) amounts: a MIG slice or a time-sliced replica as its
    part of one, a resource ``overrides`` names (a DRA mapping's) as it says; what is no GPU counts
    nothing."""
    return sum(v / 1000 * float(f) for r, v in amounts if (f := card_fraction(r, overrides)))


def guessed(resource: str, overrides: Mapping[str, Fraction] | None = None) -> str | None:
    """Why a GPU resource's part of a card is a guess (a MIG profile of no card Turnstile knows,
    billed g / 7), naming the fix; None when it is known or overridden."""
    if (overrides and resource in overrides) or mig_profiles.share(resource) is not None:
        return None
    guess = mig_profiles.compute_share(resource)
    if guess is None:
        return None
    return (
        f"{resource} is not a MIG profile of a card Turnstile knows (A30, A100, H100, H20, H200, B200, "
        f"GB200): billed as {guess} of a card (its compute slices of 7); say its part with "
        f"TURNSTILE_GPU_FRACTIONS or --fraction {resource}=F"
    )
