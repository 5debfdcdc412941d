"""Flavor assignment: which flavor each pod set would use, and whether it fits now.

For every pod set and every resource group it needs, the flavors of the group are tried in
the ClusterQueue's order (Kueue's ``FlavorAssigner``):

1. a flavor is skipped when its taints are not tolerated (by the pod set's tolerations plus
   the flavor's own) or its node labels conflict with the pod set's node selector/affinity;
2. each requested resource is checked against quota: ``FIT`` (fits in what is available now,
   maybe borrowing), ``PREEMPT`` (would fit once lower-ranked work is preempted), ``NO_FIT``;
3. ``flavorFungibility`` decides whether to stop at a flavor that fits only by borrowing or
   preempting, or to look for a better one; otherwise the best mode seen wins, the earliest
   flavor breaking ties.

The result says what to tell the user when it does not fit, per the scenario reasons. Whether a
workload can *ever* fit does not depend on what runs now: when it does not fit now, the same
assignment is made once more against the ClusterQueue's potential (its quota with nothing in
use, plus what it may borrow), and a failure there is ``ExceedsMaxQuota``, however many pod
sets the workload has and whichever of them failed first on current usage.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum

from queues import jobs, quantity, selectors
from queues.model import ClusterQueue, FlavorResource, Snapshot, Usage, Workload


class Mode(IntEnum):
    """How well a workload fits a flavor; ordered, so ``max`` picks the best."""

    NO_FIT = 0
    PREEMPT = 1
    FIT = 2


NO_MATCHING_FLAVOR = "NoMatchingFlavor"
EXCEEDS_MAX_QUOTA = "ExceedsMaxQuota"
WAITING_FOR_QUOTA = "WaitingForQuota"


@dataclass(slots=True)
class Assignment:
    """A proposed admission of one workload into one ClusterQueue."""

    mode: Mode
    flavors: dict[str, dict[str, str]] = field(default_factory=dict)
    usage: Usage = field(default_factory=dict)
    borrowing: bool = False
    needs_preemption: set[FlavorResource] = field(default_factory=set)
    reason: str = WAITING_FOR_QUOTA
    messages: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)  # pod set -> pods, where fewer than asked (partial)

    @property
    def message(self) -> str:
        return "; ".join(dict.fromkeys(self.messages)) or "does not fit"

    def freeze(self) -> Assignment:
        """Fix the message (cached failures are reported many times)."""
        self.messages = [self.message]
        return self


# (cq, workload, fr, total request) -> True if preempting others could make room.
PreemptionOracle = Callable[[ClusterQueue, Workload, FlavorResource, int], bool]


def _fmt(resource: str, milli: int) -> str:
    return quantity.format_milli(milli)


def _fits_quota(
    cq: ClusterQueue, wl: Workload, fr: FlavorResource, value: int, oracle: PreemptionOracle | None, potential: bool
) -> tuple[Mode, bool, str, bool]:
    """Mode for one flavor-resource, whether it borrows, why not, and whether it can never fit.
    With ``potential``, as if nothing were in use."""
    flavor, resource = fr
    available = cq.potential_available(fr) if potential else cq.available(fr)
    if value <= available:
        return Mode.FIT, cq.borrowing(fr, value), "", False
    most = cq.potential_available(fr)
    if value > most:
        msg = (
            f"insufficient quota for {resource} in flavor {flavor}: the workload needs {_fmt(resource, value)}, "
            f"the most this ClusterQueue can ever use is {_fmt(resource, most)}"
        )
        return Mode.NO_FIT, False, msg, True
    msg = (
        f"insufficient unused quota for {resource} in flavor {flavor}, "
        f"{_fmt(resource, value - max(0, available))} more needed"
    )
    pre = cq.spec.preemption
    may_preempt_borrowing = pre.borrow_within_cohort is not None and pre.borrow_within_cohort.policy != "Never"
    if oracle is not None and (value <= cq.nominal(fr) or may_preempt_borrowing) and oracle(cq, wl, fr, value):
        return Mode.PREEMPT, value > cq.nominal(fr), msg, False
    return Mode.NO_FIT, False, msg, False


def _should_try_next(mode: Mode, cq: ClusterQueue, borrows: bool) -> bool:
    fung = cq.spec.flavor_fungibility
    if mode == Mode.PREEMPT and fung.stop_when_preempting:
        return False
    if mode == Mode.FIT and borrows and fung.stop_when_borrowing:
        return False
    return not (mode == Mode.FIT and not borrows)


def assign(
    snapshot: Snapshot,
    cq: ClusterQueue,
    wl: Workload,
    oracle: PreemptionOracle | None,
    counts: Mapping[str, int] | None = None,
) -> Assignment:
    """Choose flavors for every pod set of ``wl`` in ``cq`` against the snapshot's usage; with
    ``counts``, for that many pods of those pod sets (a partial admission, ``queues.partial``)."""
    result = _assign(snapshot, cq, wl, oracle, potential=False, counts=counts)
    if result.mode != Mode.FIT and result.reason == WAITING_FOR_QUOTA:
        ever = _assign(snapshot, cq, wl, None, potential=True, counts=counts)
        if ever.mode == Mode.NO_FIT:
            ever.reason = EXCEEDS_MAX_QUOTA
            return ever
    return result


def _assign(
    snapshot: Snapshot,
    cq: ClusterQueue,
    wl: Workload,
    oracle: PreemptionOracle | None,
    *,
    potential: bool,
    counts: Mapping[str, int] | None = None,
) -> Assignment:
    result = Assignment(mode=Mode.FIT, counts=dict(counts or {}))
    covers_pods = "pods" in cq.group_of
    for ps in jobs.with_counts(wl.pod_sets, counts or {}):
        requests = ps.total()
        if covers_pods:
            requests["pods"] = ps.count * quantity.MILLI
        uncovered = sorted(r for r in requests if r not in cq.group_of)
        if uncovered:
            result.mode = Mode.NO_FIT
            result.reason = NO_MATCHING_FLAVOR
            result.messages.append(
                f"pod set {ps.name} requests {', '.join(uncovered)}, which ClusterQueue {cq.name} does not provide"
            )
            return result
        chosen: dict[str, str] = {}
        for group in cq.groups:
            group_requests = {r: v for r, v in requests.items() if r in group.resources}
            if not group_requests:
                continue
            best: tuple[Mode, str, bool, set[FlavorResource]] | None = None
            compatible = 0
            exceeded = 0
            for flavor_name in group.flavors:
                flavor = snapshot.flavors.get(flavor_name)
                if flavor is None:
                    continue
                taint = selectors.untolerated_taint(flavor.taints, (*ps.tolerations, *flavor.tolerations))
                if taint is not None:
                    result.messages.append(f"pod set {ps.name}: untolerated taint {taint} in flavor {flavor_name}")
                    continue
                if not ps.constraints.matches_flavor(flavor.node_labels, group.label_keys):
                    result.messages.append(f"pod set {ps.name}: flavor {flavor_name} doesn't match node affinity")
                    continue
                compatible += 1
                mode, borrows, preempt_frs = Mode.FIT, False, set()
                for res, value in group_requests.items():
                    fr = (flavor_name, res)
                    m, b, msg, never = _fits_quota(cq, wl, fr, value + result.usage.get(fr, 0), oracle, potential)
                    if msg:
                        result.messages.append(msg)
                    if m == Mode.PREEMPT:
                        preempt_frs.add(fr)
                    mode = min(mode, m)
                    borrows = borrows or b
                    if mode == Mode.NO_FIT:
                        exceeded += int(never)
                        break
                if best is None or mode > best[0]:
                    best = (mode, flavor_name, borrows, preempt_frs)
                if not _should_try_next(mode, cq, borrows):
                    best = (mode, flavor_name, borrows, preempt_frs)
                    break
            if best is None or best[0] == Mode.NO_FIT:
                result.mode = Mode.NO_FIT
                if compatible == 0:
                    result.reason = NO_MATCHING_FLAVOR
                elif exceeded == compatible:
                    result.reason = EXCEEDS_MAX_QUOTA
                return result
            mode, flavor_name, borrows, preempt_frs = best
            result.mode = min(result.mode, mode)
            result.borrowing = result.borrowing or borrows
            result.needs_preemption |= preempt_frs
            for res, value in group_requests.items():
                chosen[res] = flavor_name
                fr = (flavor_name, res)
                result.usage[fr] = result.usage.get(fr, 0) + value
        result.flavors[ps.name] = chosen
    if result.mode == Mode.FIT:
        result.messages.clear()
    return result
