"""What a replica is built from: its options (``Options``) and its optional features (``Features``).

The kernel (``admission.controller.controller``) takes both; the wiring (``admission.app.wiring``)
makes them. They live apart from the kernel so that a reader finds every knob and every feature a
replica can have on one page, and so that the kernel names features only through this record.
"""

from __future__ import annotations

from dataclasses import dataclass

from admission.controller.capability import Capability
from admission.controller.features.budgets import BudgetKeeper
from admission.controller.features.card_shares import CardShares
from admission.controller.features.checks import Checks
from admission.controller.features.gpu_health import GpuHealth
from admission.controller.features.placement import Placement
from admission.controller.features.pod_waits import PodWaits
from admission.controller.features.reclaim import Reclaimer
from admission.controller.objects.declared import Declared
from admission.controller.objects.workload_projection import Projection
from admission.kube.informer import Informer
from admission.store import workloads as store


@dataclass(frozen=True, slots=True)
class Options:
    identity: str  # this replica, as named in the lease
    lease_ttl: float = 15.0  # seconds a leader may go without renewing before another takes over
    workers: int = 16  # jobs patched in parallel
    debounce: float = 0.002  # seconds events are coalesced into one step
    resync: float = 60.0  # seconds between full reconciliations (a safety net; events do the work)
    # decisions committed per step: a backlog (a quota raise on 1,000 queues admits 50,000) is
    # committed and enacted in slices, so the first jobs start at once and the work overlaps
    step_decisions: int = 1000
    ledger_labels: tuple[str, ...] = store.LEDGER_LABELS  # job labels recorded on the usage ledger
    # wall seconds per second of the policy's durations: backoffs, a victim's settling, fair sharing's
    # half-lives (engine cluster runs scenario time scaled)
    backoff_scale: float = 1.0


@dataclass(slots=True)
class Features:
    """The optional features a replica runs, as the wiring (``admission.app.wiring``) built them.

    The kernel reaches them through ``capabilities`` alone, but for placement's node inventory
    (the enactor and a new term place pods by it); the rest are here for the metrics, the
    dashboard and the tests to read."""

    capabilities: list[Capability]  # in the order each step asks them
    placement: Placement  # nodes and pods by topology, the ungater (its inventory feeds the enactor)
    checks: Checks  # admission checks (ProvisioningRequests)
    projection: Projection  # one workloads.kueue.x-k8s.io object per queued job
    declared: Declared  # queues declared as Kubernetes objects
    reclaimer: Reclaimer  # idle-GPU reclaim (its probe and counters are the replica's)
    budgets: BudgetKeeper  # GPU-hour budgets
    pod_waits: PodWaits  # why an admitted job's pods wait
    gpu_health: GpuHealth  # GPUs reporting a fatal Xid
    card_shares: CardShares  # GPU resources' parts of a card (GPU-hours of DRA claims)

    def optional_informers(self) -> tuple[Informer, ...]:
        """The informers only some clusters serve (ProvisioningRequests, Workloads, Kueue's queues)."""
        return tuple(i for capability in self.capabilities for i in capability.optional_informers())
