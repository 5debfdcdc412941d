"""GPU-hours of devices claimed through DRA: each mapped resource's part of a card, as the
cluster's devices say, for everything that bills in GPU-hours.

The core reads a DRA-mapped resource's part of a card off the ResourceSlices
(``queues.dra.card_shares``: a MIG profile's part, one over a card's memory counter...). Every
replica watches the slices (``DeviceCatalog``), so ``fractions()`` is current on each: the
dashboard (any replica), GPU-hour budgets and idle reclaim (the leader) bill with it, under the
operator's ``TURNSTILE_GPU_FRACTIONS`` (which always wins). The leader also records them in
PostgreSQL in its step's fenced transaction whenever they change (``admission.store.card_fractions``),
so ``turnstile usage`` and ``turnstile budget``, which read only the database, bill the same.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from fractions import Fraction
from typing import TYPE_CHECKING

from admission.controller.capability import NOW, Capability, StepContext
from admission.store import card_fractions
from queues.dra.charges import Devices

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession

    from admission.controller.term import Term


class CardShares(Capability):
    def __init__(self, devices: Callable[[], Devices], overrides: Mapping[str, Fraction]) -> None:
        self.devices = devices  # the cluster's DRA objects as this replica watches them
        self.overrides = dict(overrides)  # TURNSTILE_GPU_FRACTIONS and the mappings of whole GPUs
        self._recorded: dict[str, Fraction] | None = None  # what this term last recorded (None: nothing yet)
        self._writing: dict[str, Fraction] | None = None

    def fractions(self) -> dict[str, Fraction]:
        """Each GPU resource's part of a card where its name does not say it: the devices', then the
        operator's over them."""
        return {**self.devices().card_fractions(), **self.overrides}

    def term_began(self, term: Term) -> None:
        self._recorded = self._writing = None  # (a new term records them again: another replica may have led since)

    def commit_due(self) -> float | None:
        return NOW if self.devices().card_fractions() != self._recorded else None

    async def write_in_commit(self, session: AsyncSession, step: StepContext) -> None:
        derived = self.devices().card_fractions()
        if derived != self._recorded:
            await card_fractions.put(session, derived, fence=step.term.fence)
            self._writing = derived

    def committed(self, step: StepContext) -> Collection[str]:
        if self._writing is not None:
            self._recorded, self._writing = self._writing, None
        return ()
