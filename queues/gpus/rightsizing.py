"""Right-sizing: which measured GPU work would have fitted a smaller MIG slice the install offers.

Why measured, not estimated: a model's weights and KV cache say what a job *might* need; the
GPU's framebuffer (dcgm-exporter's ``DCGM_FI_DEV_FB_USED``) says what it *did* need. The leader
keeps each run's peak GPU memory (of its busiest GPU), the card's size and its mean utilisation
on the ledger (``admission.controller.features.metering``); this module turns one workload's figures into a
verdict, the same one for ``turnstile rightsize``, ``describe workload``, the dashboard and
engine core's summary:

    peaked at 9.1 GiB of 141 GiB, 31 % busy: a 1g.18gb slice would do; 6/7 of a card freed

The rule, deliberately conservative:

- **memory decides**: a MIG profile fits when what it gives (``mig_profiles.usable_gib``: the GB
  in its name times 0.88, below what ``nvidia-smi`` shows) holds the peak with ``HEADROOM`` (10 %)
  to spare; of the profiles that fit, the one taking the least of a card (its billed share,
  ``gpu_units.card_fraction``), then the least memory; it must take less than what the job held;
- **utilisation guards**: a GPU busy more than ``MAX_BUSY`` (half the time) is not told to shrink:
  engine activity is the share of time any SM works, not the share of SMs, so a busy job on a
  seventh of the SMs would run slower; below it, memory decides;
- **only what the install offers**: the candidates are the ``nvidia.com/mig-*`` resources some
  ClusterQueue covers and, for work on whole GPUs that no slice holds, the whole-GPU flavors
  whose ``nodeLabels`` say their GPU's memory (``nvidia.com/gpu.memory``, MiB, as NVIDIA's GPU
  feature discovery labels nodes) and whose GPU is smaller than the one the work ran on (a
  slice of the same card is preferred: it leaves the rest of the card to others); an install
  offering neither gets no suggestion (the line still says what the job used);
- **never without data**: a workload with no memory measured has no verdict at all; one whose
  utilisation was not measured is judged by memory and the line says "busy not measured".

The GPU-hours saved are the card-hours held times the part of each card that would have been
freed (1 - the slice's share / the share held); moved to a smaller GPU, all of the larger
card's hours are freed (as many hours of the smaller card are used instead).

Engine core keeps the same ledger from a scenario's ``gpuMemoryUsed`` and ``utilization`` traces
(``MemoryLedger``): each run's held card-hours, peak, mean and busy share, judged the same way
in ``summary.rightsize``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from queues.efficiency import Trace
from queues.gpus import gpu_units, mig_profiles
from queues.kueue import api

HEADROOM = 1.1  # a slice must hold the peak and a tenth more
MAX_BUSY = 0.5  # busier than this, a GPU is not told to shrink
MIB_PER_GIB = 1024.0
WHOLE_USABLE = 0.95  # of a whole GPU's memory, what work can use (the driver and ECC keep the rest)
GPU = "nvidia.com/gpu"
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"  # a node's MiB per GPU (NVIDIA's GPU feature discovery)
DEFAULT_MEMORY_MIB = 81920  # a GPU whose node does not say: an A100-80GB's


@dataclass(frozen=True, slots=True)
class Measured:
    """One workload's use of one GPU resource over a window, as the ledger measured it."""

    resource: str  # what it held: nvidia.com/gpu, nvidia.com/mig-3g.71gb, ...
    card_hours: float  # card-hours held (units x hours x each unit's part of a card)
    peak_mib: float | None  # peak GPU memory of its busiest GPU, MiB (None: not measured)
    total_mib: float | None  # that GPU's memory (used + free), MiB
    busy: float | None  # mean utilisation over the measured time (None: not measured)
    mean_mib: float | None = None  # mean GPU memory of its busiest GPU, MiB


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a workload's figures say: the line, and the slice that would do (None: none)."""

    line: str
    profile: str | None = None  # the resource suggested: nvidia.com/mig-1g.18gb, or nvidia.com/gpu of ``flavor``
    freed: Fraction = Fraction(0)  # of each card held, the part the suggestion would have freed
    saved_hours: float = 0.0  # card-hours that would have been freed
    flavor: str | None = None  # a smaller whole GPU's flavor, when that is the suggestion

    @property
    def suggests(self) -> bool:
        return self.profile is not None


@dataclass(frozen=True, slots=True)
class Step:
    """One step of a ``ladder``: work peaking at most ``top`` MiB fits ``resource`` (of ``flavor``,
    a whole GPU of ``card_mib``, for work that ran on a larger one), freeing ``freed`` of each
    card held."""

    top: float
    resource: str
    freed: Fraction
    flavor: str | None = None
    card_mib: float | None = None

    def fits(self, peak_mib: float, total_mib: float | None) -> bool:
        if peak_mib > self.top:
            return False
        return self.card_mib is None or (total_mib is not None and total_mib > self.card_mib)


@dataclass(frozen=True, slots=True)
class Offers:
    """What the install offers to move work to: MIG resources, and whole-GPU flavors' memory."""

    mig: tuple[str, ...] = ()
    cards: Mapping[str, float] = field(default_factory=dict)  # flavor -> its GPU's memory, MiB

    def __bool__(self) -> bool:
        return bool(self.mig or self.cards)


def offered(config_cluster_queues: Iterable[api.ClusterQueue], flavors: Mapping[str, api.ResourceFlavor]) -> Offers:
    """The install's ``Offers``, from its ClusterQueues and ResourceFlavors."""
    queues = list(config_cluster_queues)
    return Offers(offered_in(queues), cards_offered(queues, flavors))


def offered_in(cluster_queues: Iterable[api.ClusterQueue]) -> tuple[str, ...]:
    """The MIG resources the ClusterQueues cover (sorted, once each): the slices a job could be
    told to use."""
    covered = {r for cq in cluster_queues for group in cq.spec.resource_groups for r in group.covered_resources}
    return tuple(sorted(r for r in covered if mig_profiles.RESOURCE.match(r)))


def cards_offered(
    cluster_queues: Iterable[api.ClusterQueue], flavors: Mapping[str, api.ResourceFlavor]
) -> dict[str, float]:
    """Flavor -> its GPU's memory (MiB) for the flavors some ClusterQueue offers ``nvidia.com/gpu``
    of whose ``nodeLabels`` say it (``nvidia.com/gpu.memory``): the whole GPUs a job could be
    told to use instead of a larger one."""
    out: dict[str, float] = {}
    for cq in cluster_queues:
        for group in cq.spec.resource_groups:
            for fq in group.flavors:
                flavor = flavors.get(fq.name)
                raw = flavor.spec.node_labels.get(GPU_MEMORY_LABEL) if flavor is not None else None
                if raw is None or not any(r.name == GPU for r in fq.resources):
                    continue
                try:
                    out[fq.name] = float(raw)
                except ValueError:
                    continue
    return out


def verdict(
    measured: Measured,
    offers: Iterable[str],
    overrides: Mapping[str, Fraction] | None = None,
    cards: Mapping[str, float] | None = None,
) -> Verdict | None:
    """The verdict on ``measured`` given the MIG resources the install ``offers`` and its
    whole-GPU flavors' memory (``cards``); None when its memory was not measured or it holds no
    GPU (never a suggestion without data)."""
    held = gpu_units.card_fraction(measured.resource, overrides)
    if held is None or measured.peak_mib is None:
        return None
    used = describe_use(measured)
    if measured.busy is not None and measured.busy > MAX_BUSY:
        return Verdict(f"{used}: kept as it is (busier than {MAX_BUSY:.0%} of the time, it needs its SMs)")
    steps = ladder(measured.resource, offers, overrides, cards)
    step = next((s for s in steps if s.fits(measured.peak_mib, measured.total_mib)), None)
    if step is None:
        return Verdict(f"{used}: nothing smaller the install offers holds it")
    saved = measured.card_hours * float(step.freed)
    if step.flavor is not None and step.card_mib is not None:
        card = f" of {gib(measured.total_mib)} GiB" if measured.total_mib else ""
        line = f"{used}: a GPU of flavor {step.flavor} ({gib(step.card_mib)} GiB) would do; the whole card{card} freed"
        return Verdict(line, step.resource, step.freed, saved, step.flavor)
    name = mig_profiles.RESOURCE.match(step.resource)
    shown = name.group("profile") if name is not None else step.resource
    line = f"{used}: a {shown} slice would do; {part_of_card(held * step.freed)} of a card freed"
    return Verdict(line, step.resource, step.freed, saved)


def describe_use(measured: Measured) -> str:
    """``peaked at 9.1 GiB of 141 GiB, 31 % busy`` (what is not known is said so)."""
    assert measured.peak_mib is not None
    peak = f"peaked at {gib(measured.peak_mib)} GiB"
    if measured.total_mib:
        peak += f" of {gib(measured.total_mib)} GiB"
    busy = "busy not measured" if measured.busy is None else f"{round(measured.busy * 100)} % busy"
    return f"{peak}, {busy}"


def gib(mib: float) -> str:
    """MiB as GiB to a tenth, without a trailing .0 (9.1, 141)."""
    return f"{mib / MIB_PER_GIB:.1f}".removesuffix(".0")


def part_of_card(part: Fraction) -> str:
    """A part of a card as a fraction where it reads as one (6/7, 3/4), else a percentage."""
    if part.denominator <= 8:
        return f"{part.numerator}/{part.denominator}" if part != 1 else "all"
    return f"{float(part):.0%}"


def ladder(
    resource: str,
    offers: Iterable[str],
    overrides: Mapping[str, Fraction] | None = None,
    cards: Mapping[str, float] | None = None,
) -> list[Step]:
    """For work holding ``resource``: the ``Step``s a peak is matched against, in order (the first
    that ``fits`` is the suggestion; none: nothing smaller is offered). First the offered MIG
    slices taking less of a card than ``resource``, ascending by the peak they hold: the slice for
    a peak is, of those holding it with ``HEADROOM``, the one taking least of a card, then least
    memory. Then, for work on whole GPUs, the whole-GPU flavors (``cards``), smallest first, each
    only for work that ran on a larger GPU (``verdict``, and ``store.rightsizing``'s query)."""
    held = gpu_units.card_fraction(resource, overrides)
    if held is None:
        return []
    candidates = []
    for offer in offers:
        match = mig_profiles.RESOURCE.match(offer)
        share = gpu_units.card_fraction(offer, overrides)
        if match is not None and share is not None and share < held:
            usable = mig_profiles.usable_gib(match.group("profile"))
            candidates.append((usable * MIB_PER_GIB / HEADROOM, share, usable, offer))
    out = []
    for top in sorted({c[0] for c in candidates}):
        _, share, _, offer = min((c for c in candidates if c[0] >= top), key=lambda c: (c[1], c[2], c[3]))
        out.append(Step(top, offer, 1 - share / held))
    if resource == GPU:
        for flavor, mib in sorted((cards or {}).items(), key=lambda fc: (fc[1], fc[0])):
            out.append(Step(mib * WHOLE_USABLE / HEADROOM, GPU, Fraction(1), flavor, mib))
    return out


def card_memory_mib(resource: str, node_labels: Mapping[str, str]) -> float:
    """One GPU's (or MIG slice's) memory in MiB: a slice's from its profile
    (``mig_profiles.usable_gib``), a whole GPU's from its node's ``nvidia.com/gpu.memory`` label,
    else ``DEFAULT_MEMORY_MIB``."""
    match = mig_profiles.RESOURCE.match(resource)
    if match is not None:
        return mig_profiles.usable_gib(match.group("profile")) * MIB_PER_GIB
    try:
        return float(node_labels.get(GPU_MEMORY_LABEL, DEFAULT_MEMORY_MIB))
    except ValueError:
        return float(DEFAULT_MEMORY_MIB)


@dataclass(slots=True)
class _Use:
    """One workload's runs on one GPU resource, summed as the ledger sums its rows."""

    cluster_queue: str
    card_seconds: float = 0.0
    peak: float = 0.0
    total: float | None = None
    busy_seconds: float = 0.0
    measured_seconds: float = 0.0
    mib_seconds: float = 0.0
    memory_seconds: float = 0.0


class MemoryLedger:
    """Engine core's GPU memory ledger: what the controller's ledger would hold for runs whose
    ``gpuMemoryUsed`` the scenario gives (``card_memory(flavor, resource)``: a GPU's size)."""

    def __init__(
        self,
        memory: Mapping[str, Trace],
        utilization: Mapping[str, Trace],
        offers: Offers,
        card_memory: Callable[[str, str], float],
    ) -> None:
        self.memory, self.utilization, self.offers = memory, utilization, offers
        self.card_memory = card_memory
        self.runs: dict[str, tuple[float, str, dict[tuple[str, str], int]]] = {}  # key -> (start, CQ, usage)
        self.uses: dict[tuple[str, str], _Use] = {}  # (workload, resource) -> its runs

    def started(self, key: str, now: float, cluster_queue: str, usage: Mapping[tuple[str, str], int]) -> None:
        if key in self.memory:
            self.runs[key] = (now, cluster_queue, dict(usage))

    def stopped(self, key: str, now: float) -> None:
        run = self.runs.pop(key, None)
        if run is None:
            return
        start, cluster_queue, usage = run
        ran = now - start
        if ran <= 0:
            return
        memory, busy = self.memory[key], self.utilization.get(key)
        for (flavor, resource), milli in usage.items():
            share = gpu_units.card_fraction(resource)
            if share is None or milli <= 0:
                continue
            use = self.uses.setdefault((key, resource), _Use(cluster_queue))
            use.card_seconds += milli / 1000 * float(share) * ran
            use.peak = max(use.peak, memory.peak(0.0, ran))
            use.total = max(use.total or 0.0, self.card_memory(flavor, resource))
            use.mib_seconds += memory.mean(0.0, ran) * ran
            use.memory_seconds += ran
            if busy is not None:
                use.busy_seconds += busy.mean(0.0, ran) * ran
                use.measured_seconds += ran

    def summary(self, now: float) -> dict[str, object]:
        """``summary.rightsize``: each measured workload's verdict, most saved first, and the totals
        (runs still going are counted up to ``now``)."""
        for key in list(self.runs):
            _, cq, usage = self.runs[key]
            self.stopped(key, now)
            self.runs[key] = (now, cq, usage)
        rows: list[dict[str, object]] = []
        for (key, resource), use in sorted(self.uses.items()):
            hours = use.card_seconds / 3600
            measured = Measured(
                resource,
                hours,
                use.peak,
                use.total,
                use.busy_seconds / use.measured_seconds if use.measured_seconds else None,
                use.mib_seconds / use.memory_seconds if use.memory_seconds else None,
            )
            v = verdict(measured, self.offers.mig, cards=self.offers.cards)
            if v is None:
                continue
            rows.append(
                {
                    "workload": key,
                    "clusterQueue": use.cluster_queue,
                    "resource": resource,
                    "gpuHours": round(hours, 4),
                    "peakGiB": round(use.peak / MIB_PER_GIB, 2),
                    "suggestion": v.profile,
                    "suggestedFlavor": v.flavor,
                    "gpuHoursSaved": round(v.saved_hours, 4),
                    "message": v.line,
                }
            )
        return {
            "offered": list(self.offers.mig),
            "offeredFlavors": dict(self.offers.cards),
            "gpuHours": round(sum(float(str(r["gpuHours"])) for r in rows), 4),
            "gpuHoursSaved": round(sum(float(str(r["gpuHoursSaved"])) for r in rows), 4),
            "workloads": rows,
        }
