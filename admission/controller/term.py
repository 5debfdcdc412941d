"""One leadership term: the scheduler's state while this replica holds the lease.

A term starts from PostgreSQL (the truth): the configuration, every unfinished workload and
its admission. It keeps the scheduling core (``queues.cycle.scheduler.Scheduler``) in step with the
store, maps workloads to their rows and jobs, and tracks quota trees where an evicted job
still runs (``stopping``): no admission in such a tree starts until those pods are gone.
When the term ends (the lease is lost, the process stops) all of it is dropped; the next
term rebuilds it from the store and the cluster.

The scheduler's workloads are what the core *assumes* (design principle 4): a step applies its
decisions in memory at once and commits them afterwards. What may touch the cluster is only what
PostgreSQL holds: ``committed`` keeps, per workload holding quota, a copy taken when its state
was last committed (``settle``), and the enactor and the admission checks act on that
(``held``), never on an assumption a failing commit could still take back.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from admission.policy import Policy
from admission.store import activity, database, fair_usage, lease
from admission.store import workloads as store
from queues import model
from queues.cycle.scheduler import Decision, Scheduler
from queues.cycle.usage_history import AdmissionFairSharing
from queues.kueue.fair_sharing_config import FairSharing
from queues.model import Workload
from queues.placement.inventory import Inventory
from queues.placement.topology import COMPACT


def now_ms() -> float:
    """Wall time in whole milliseconds, so it survives a round trip through timestamptz exactly."""
    return round(time.time() * 1000) / 1000


def timestamp(t: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(t, dt.UTC)


def admission_token(wl: Workload) -> str | None:
    """Names one admission of a workload; written on the job it started (``turnstile.dev/admission``).

    None while the workload holds no quota, or holds it with admission checks still to pass:
    its job must not run yet."""
    if wl.admission is None or wl.admitted_at is None or wl.checks:
        return None
    return f"{wl.admission.cluster_queue}/{round(wl.admitted_at * 1000)}"


@dataclass(slots=True)
class Row:
    id: int
    uid: str
    key: str


@dataclass(slots=True)
class Term:
    fence: lease.Fence
    scheduler: Scheduler
    rows: dict[str, Row] = field(default_factory=dict)  # job uid -> row
    by_key: dict[str, Row] = field(default_factory=dict)  # workload key -> row
    stopping: dict[str, str] = field(default_factory=dict)  # pending workload whose job still runs -> its tree
    blocked: dict[str, str] = field(default_factory=dict)  # admitted workload waiting on a stopping tree -> tree
    announce: set[str] = field(default_factory=set)  # preemptors whose Admitted Event waits for their job to start
    valid_until: float = 0.0  # monotonic deadline of the lease as last renewed (``confirm``)
    # work that found the lease unconfirmed: (how to request it, its key), requested again at ``confirm``
    parked: dict[tuple[Callable[[str], None], str], None] = field(default_factory=dict)
    owed: list[Decision] = field(default_factory=list)  # evictions the stored state asks for (HoldAndDrain)
    taken: list[activity.Request] = field(default_factory=list)  # stop/resume requests applied, not yet committed
    committed: dict[str, Workload] = field(default_factory=dict)  # workload key -> as last committed, if it holds quota
    # told the key whenever what ``held`` or ``by_key`` says of it may have changed (``settle``, ``forget``):
    # what follows every held workload looks only at those, not at all of them each step
    listeners: list[Callable[[str], None]] = field(default_factory=list)
    _flavors: tuple[model.Config | None, dict[str, model.Flavor]] = (None, {})

    @classmethod
    async def from_store(
        cls,
        sessions: async_sessionmaker[AsyncSession],
        fence: lease.Fence,
        policy: Policy,
        namespaces: dict[str, dict[str, str]],
        *,
        scale: float,
        inventory: Callable[[model.Config], Inventory | None],
    ) -> Term:
        """A term rebuilt from PostgreSQL: the snapshot and fair sharing's histories (the setting
        recorded too, for ``describe``), with the policy's half-lives in wall seconds (``scale``,
        as the backoffs). Raises the database's errors (``database.ERRORS``)."""
        async with database.transaction(sessions) as session:
            snapshot = await store.load_snapshot(session)
            fair = policy.fair_sharing
            keeps = policy.admission_fair_sharing or (fair is not None and fair.usage_half_life)
            history = await fair_usage.load(session) if keeps else {}
            ignore = policy.transformations.ignore_undeclared
            await fair_usage.put_setting(session, policy.fair_sharing, fence=fence, ignore_undeclared=ignore)
        afs = policy.admission_fair_sharing
        if fair is not None and scale != 1.0:
            fair = dataclasses.replace(fair, usage_half_life=fair.usage_half_life * scale)
        if afs is not None and scale != 1.0:
            afs = dataclasses.replace(
                afs, half_life=afs.half_life * scale, sampling_interval=afs.sampling_interval * scale
            )
        term = cls.start(
            fence,
            snapshot,
            dict(namespaces),
            fair,
            admission_fair_sharing=afs,
            history=history,
            inventory=inventory(snapshot.config),
            packing=policy.topology_packing,
            ignore_undeclared=policy.transformations.ignore_undeclared,  # (Kueue's quotaCheckStrategy)
        )
        term.scheduler.block_admission = policy.pods_ready.block_admission
        return term

    @classmethod
    def start(
        cls,
        fence: lease.Fence,
        snapshot: store.StoreSnapshot,
        namespaces: dict[str, dict[str, str]],
        fair_sharing: FairSharing | None = None,
        *,
        admission_fair_sharing: AdmissionFairSharing | None = None,
        history: Mapping[str, tuple[Mapping[str, float], float]] | None = None,
        inventory: Inventory | None = None,
        packing: str = COMPACT,
        ignore_undeclared: bool = False,
    ) -> Term:
        scheduler = Scheduler(
            snapshot.config,
            namespaces=namespaces,
            fair_sharing=fair_sharing,
            admission_fair_sharing=admission_fair_sharing,
            inventory=inventory,
            packing=packing,
            ignore_undeclared=ignore_undeclared,
        )
        scheduler.now = now_ms()
        for key, (consumed, at) in (history or {}).items():  # fair sharing's histories, as stored
            kept = scheduler.usage if "/" in key else scheduler.queue_usage  # LocalQueue / ClusterQueue
            if kept is not None:
                kept.restore(key, consumed, at)
        term = cls(fence, scheduler)
        for wl in snapshot.workloads:
            term.remember(Row(snapshot.ids[wl.key], snapshot.uids[wl.key], wl.key))
        term.owed = scheduler.restore(snapshot.workloads)
        for wl in snapshot.workloads:
            term.settle(wl.key)  # the store's state is committed by definition
        return term

    def settle(self, key: str) -> None:
        """``key``'s state in the scheduler is now the store's: the enactor may act on it."""
        wl = self.scheduler.workloads.get(key)
        if wl is not None and wl.admission is not None:
            self.committed[key] = copy.copy(wl)
        else:
            self.committed.pop(key, None)
        for listener in self.listeners:
            listener(key)

    def held(self, key: str) -> Workload | None:
        """``key`` as last committed, if it holds quota there (None: it holds none)."""
        return self.committed.get(key)

    def remember(self, row: Row) -> None:
        self.rows[row.uid] = row
        self.by_key[row.key] = row

    def forget(self, uid: str) -> Row | None:
        row = self.rows.pop(uid, None)
        if row is not None and self.by_key.get(row.key) is row:
            del self.by_key[row.key]
            for listener in self.listeners:
                listener(row.key)
        return row

    def tree_of(self, wl: Workload) -> str | None:
        name = wl.admission.cluster_queue if wl.admission is not None else wl.cluster_queue
        cq = self.scheduler.snapshot.queues.get(name) if name else None
        return cq.tree_key if cq is not None else None

    def valid(self) -> bool:
        return time.monotonic() < self.valid_until

    def park(self, request: Callable[[str], None], key: str) -> None:
        """Handle ``key`` again (``request(key)``) once the lease is next confirmed. Work that finds
        the term unconfirmed waits for that rather than polling: 100,000 jobs retried every 0.1 s
        while a renewal is late would keep the event loop from renewing it. If the lease is lost
        instead, the next term looks at every job anyway."""
        self.parked[(request, key)] = None

    def confirm(self, until: float) -> None:
        """The lease was renewed: the term acts until ``until`` (monotonic); what was parked is requested."""
        self.valid_until = until
        parked, self.parked = self.parked, {}
        for request, key in parked:
            request(key)

    def flavors(self) -> dict[str, model.Flavor]:
        """The configuration's flavors as the core models them (cached per configuration)."""
        config = self.scheduler.config
        if self._flavors[0] is not config:
            self._flavors = (config, {name: model.Flavor.from_api(rf) for name, rf in config.flavors.items()})
        return self._flavors[1]
