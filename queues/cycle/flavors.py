"""Flavor assignment: which flavor each pod set would use, and whether it fits now.

For every pod set and every resource group it needs, the flavors of the group are tried in
the ClusterQueue's order (Kueue's ``FlavorAssigner``):

1. a flavor is skipped when its taints are not tolerated (by the pod set's tolerations plus
   the flavor's own) or its node labels conflict with the pod set's node selector/affinity,
   looking only at the label keys that flavor itself sets (Kueue >= v0.19);
2. each requested resource (a zero request too, when the ClusterQueue covers it) is checked
   against quota, as a *mode* and a *borrowing level*: ``FIT`` (fits in what is available now),
   ``RECLAIM`` (fits once other ClusterQueues' borrowed work is preempted), ``PREEMPT`` (fits once
   work is preempted by priority), ``NO_FIT``; the level is how far up the cohort tree it
   borrows (0: not at all; Kueue's ``FindHeightOfLowestSubtreeThatFits``);
3. a flavor's mode is its worst resource's; ``flavorFungibility`` says whether to stop at it
   (``whenCanBorrow``/``whenCanPreempt``: ``TryNextFlavor`` looks further when it borrows or
   preempts) and, among the flavors seen, which is best: by mode, then level (the default and
   ``BorrowingOverPreemption``), or by level, then mode (``PreemptionOverBorrowing``); the
   earliest flavor wins a tie.

The result says what to tell the user when it does not fit, per the scenario reasons. Whether a
workload can *ever* fit does not depend on what runs now: when it does not fit now, the same
assignment is made once more against the ClusterQueue's potential (its quota with nothing in
use, plus what it may borrow), and a failure there is ``ExceedsMaxQuota``, however many pod
sets the workload has and whichever of them failed first on current usage. A workload that may
run partially (``job-min-parallelism``) is ``ExceedsMaxQuota`` only if its smallest admission is too.
"""

from __future__ import annotations

from collections.abc import Mapping

from queues import quantity, selectors
from queues.cycle import tas
from queues.cycle.assignment import (
    EXCEEDS_MAX_QUOTA,
    NO_MATCHING_FLAVOR,
    WAITING_FOR_QUOTA,
    Assignment,
    Mode,
    PreemptionOracle,
)
from queues.model import ClusterQueue, FlavorResource, Snapshot, Workload
from queues.podsets import jobs, partial


def _fmt(resource: str, milli: int) -> str:
    return quantity.format_milli(milli)


def _fits_quota(
    cq: ClusterQueue,
    wl: Workload,
    fr: FlavorResource,
    value: int,
    oracle: PreemptionOracle | None,
    potential: bool,
    fair: bool = False,
) -> tuple[Mode, int, str, bool]:
    """Mode and borrowing level for one flavor-resource, why not, and whether it can never fit
    (Kueue's ``fitsResourceQuota``). With ``potential``, as if nothing were in use."""
    flavor, resource = fr
    available = cq.potential_available(fr) if potential else cq.available(fr)
    level, may_reclaim_below = cq.borrow_height(fr, value, empty=potential)
    if value <= available:
        return Mode.FIT, level, "", False
    most = cq.potential_available(fr)
    if value > most:
        msg = (
            f"insufficient quota for {resource} in flavor {flavor}: the workload needs {_fmt(resource, value)}, "
            f"the most this ClusterQueue can ever use is {_fmt(resource, most)}"
        )
        return Mode.NO_FIT, 0, msg, True
    msg = (
        f"insufficient unused quota for {resource} in flavor {flavor}, "
        f"{_fmt(resource, value - max(0, available))} more needed"
    )
    pre = cq.spec.preemption
    may_preempt_borrowing = (pre.borrow_within_cohort is not None and pre.borrow_within_cohort.policy != "Never") or (
        fair and pre.reclaim_within_cohort != "Never"  # (Kueue's canPreemptWhileBorrowing)
    )
    # only a workload within its nominal quota after preemption (or one reclaiming below, or one
    # that may preempt while borrowing) may preempt at all: within its own queue too (Kueue's rule)
    may_preempt = value <= cq.nominal(fr) or may_reclaim_below or may_preempt_borrowing
    if oracle is not None and may_preempt:
        mode, level = oracle(cq, wl, fr, value)
        return (mode if mode.preempts else Mode.NO_CANDIDATES), level, msg, False
    return Mode.NO_FIT, 0, msg, False


def _on(ps: jobs.PodSet, flavor: str, requests: dict[str, int]) -> dict[str, int]:
    """``requests`` (a pod set's, of one resource group) as charged on ``flavor``: less where its
    nodes serve only some alternatives of a prioritized list (``queues.dra.alternatives``)."""
    narrowed = ps.by_flavor.get(flavor)
    if not narrowed:
        return requests
    return {r: ps.on(flavor, r) if r in narrowed else v for r, v in requests.items()}


def _preferred(a: tuple[Mode, int], b: tuple[Mode, int] | None, preference: str | None) -> bool:
    """Whether (mode, level) ``a`` is a better flavor than ``b`` (Kueue's ``isPreferred``): by mode,
    then by borrowing level; with ``PreemptionOverBorrowing``, by level first."""
    if a[0] == Mode.NO_FIT:
        return False
    if b is None or b[0] == Mode.NO_FIT:
        return True
    if (a[0] == Mode.NO_CANDIDATES) != (b[0] == Mode.NO_CANDIDATES):  # (not admissible in this attempt)
        return b[0] == Mode.NO_CANDIDATES
    if preference == "PreemptionOverBorrowing" and a[1] != b[1]:
        return a[1] < b[1]
    if a[0] != b[0]:
        return a[0] > b[0]
    return a[1] < b[1]


def _should_try_next(mode: Mode, level: int, cq: ClusterQueue) -> bool:
    """Kueue's ``shouldTryNextFlavor``: look further unless this flavor fits without borrowing, or
    the fungibility policy says to stop at what it needs (borrowing, preempting)."""
    fung = cq.spec.flavor_fungibility
    if mode in (Mode.NO_FIT, Mode.NO_CANDIDATES):
        return True
    if mode.preempts and not fung.stop_when_preempting:
        return True
    return level > 0 and not fung.stop_when_borrowing


def assign(
    snapshot: Snapshot,
    cq: ClusterQueue,
    wl: Workload,
    oracle: PreemptionOracle | None,
    counts: Mapping[str, int] | None = None,
) -> Assignment:
    """Choose flavors for every pod set of ``wl`` in ``cq`` against the snapshot's usage; with
    ``counts``, for that many pods of those pod sets (a partial admission, ``queues.podsets.partial``)."""
    result = _assign(snapshot, cq, wl, oracle, potential=False, counts=counts)
    smallest = partial.smallest(wl.pod_sets) if counts is None else {}
    if result.mode != Mode.FIT and result.reason == WAITING_FOR_QUOTA:
        ever = _assign(snapshot, cq, wl, None, potential=True, counts=counts)
        if ever.mode == Mode.NO_FIT and not (smallest and _ever_fits(snapshot, cq, wl, smallest)):
            ever.reason = EXCEEDS_MAX_QUOTA
            return ever
    elif result.reason == EXCEEDS_MAX_QUOTA and smallest and _ever_fits(snapshot, cq, wl, smallest):
        # larger than the queue whole, but it may run partially (``queues.podsets.partial`` finds how many):
        # what it waits for is its smallest admission's quota
        result.reason = WAITING_FOR_QUOTA
        now = _assign(snapshot, cq, wl, oracle, potential=False, counts=smallest)
        if now.mode != Mode.FIT:
            result.messages = now.messages
    return result


def _ever_fits(snapshot: Snapshot, cq: ClusterQueue, wl: Workload, counts: Mapping[str, int]) -> bool:
    return _assign(snapshot, cq, wl, None, potential=True, counts=counts).mode != Mode.NO_FIT


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
    fair = snapshot.fair_sharing is not None
    # (see ``Assignment.settled``; a partial admission is searched afresh: preemption may now find more)
    settled = not potential and not counts and not tas.uses_topology(snapshot, cq)
    covers_pods = "pods" in cq.group_of
    for ps in jobs.with_counts(wl.pod_sets, counts or {}):
        requests = ps.total()
        for res, value in ps.requests.items():  # a zero request still gets a flavor where the queue covers it
            if not value and res in cq.group_of:
                requests.setdefault(res, 0)
        if covers_pods:
            requests["pods"] = ps.count * quantity.MILLI
        uncovered = sorted(r for r in requests if r not in cq.group_of)
        if uncovered and snapshot.ignore_undeclared:  # (quotaCheckStrategy IgnoreUndeclared: not checked)
            requests = {r: v for r, v in requests.items() if r in cq.group_of}
        elif uncovered:
            result.mode = Mode.NO_FIT
            result.reason = NO_MATCHING_FLAVOR
            result.messages.append(
                f"pod set {ps.name} requests {', '.join(uncovered)}, which ClusterQueue {cq.name} does not provide; "
                "give it quota for them, or leave what it does not cover out of the quota check "
                "(quotaCheckStrategy IgnoreUndeclared: TURNSTILE_QUOTA_CHECK_STRATEGY)"
            )
            return result
        chosen: dict[str, str] = {}
        for group in cq.groups:
            group_requests = {r: v for r, v in requests.items() if r in group.resources}
            if not group_requests:
                continue
            best: tuple[tuple[Mode, int], str, set[FlavorResource]] | None = None
            compatible = 0
            exceeded = 0
            preference = cq.spec.flavor_fungibility.preference
            for flavor_name in group.flavors:
                flavor = snapshot.flavors.get(flavor_name)
                if flavor is None:
                    continue
                taint = selectors.untolerated_taint(flavor.taints, (*ps.tolerations, *flavor.tolerations))
                if taint is not None:
                    result.messages.append(f"pod set {ps.name}: untolerated taint {taint} in flavor {flavor_name}")
                    continue
                if not ps.constraints.matches_flavor(flavor.node_labels, frozenset(flavor.node_labels)):
                    result.messages.append(f"pod set {ps.name}: flavor {flavor_name} doesn't match node affinity")
                    continue
                mismatch = tas.flavor_mismatch(cq, ps, flavor)
                if mismatch is not None:
                    result.messages.append(f"pod set {ps.name}: {mismatch}")
                    continue
                compatible += 1
                mode, level, preempt_frs = Mode.FIT, 0, set()
                for res, value in _on(ps, flavor_name, group_requests).items():
                    if not value:
                        continue  # (nothing to fit; the flavor is the one its other resources get)
                    fr = (flavor_name, res)
                    total = value + result.usage.get(fr, 0)
                    m, lv, msg, never = _fits_quota(cq, wl, fr, total, oracle, potential, fair)
                    if msg:  # (naming the pod set where there are several, as Kueue's message does)
                        result.messages.append(f"pod set {ps.name}: {msg}" if len(wl.pod_sets) > 1 else msg)
                    if m.preempts:
                        preempt_frs.add(fr)
                    if _preferred((mode, level), (m, lv), preference):  # this flavor is as good as its worst
                        mode, level = m, lv
                    if mode == Mode.NO_FIT:
                        exceeded += int(never)
                        break
                if not _should_try_next(mode, level, cq):
                    best = ((mode, level), flavor_name, preempt_frs)
                    settled = settled and compatible == 1 and (mode, level) == (Mode.FIT, 0)
                    break
                settled = False
                if _preferred((mode, level), best[0] if best else None, preference):
                    best = ((mode, level), flavor_name, preempt_frs)
            if best is None or best[0][0] == Mode.NO_FIT:
                result.mode = Mode.NO_FIT
                if compatible == 0:
                    result.reason = NO_MATCHING_FLAVOR
                elif exceeded == compatible:
                    result.reason = EXCEEDS_MAX_QUOTA
                return result
            (mode, level), flavor_name, preempt_frs = best
            result.mode = min(result.mode, mode)
            result.borrow_level = max(result.borrow_level, level)
            result.borrowing = result.borrow_level > 0
            result.needs_preemption |= preempt_frs
            for res, value in _on(ps, flavor_name, group_requests).items():
                chosen[res] = flavor_name
                fr = (flavor_name, res)
                if value:
                    result.usage[fr] = result.usage.get(fr, 0) + value
        result.flavors[ps.name] = chosen
    if result.mode == Mode.FIT:
        result.messages.clear()
        result.settled = settled
        if not potential:
            tas.place(snapshot, cq, wl, result, preempt=oracle is not None)
    return result


def fits_after(
    snapshot: Snapshot, cq: ClusterQueue, wl: Workload, assignment: Assignment, victims: list[Workload]
) -> bool:
    """Whether ``wl`` is placed once ``victims`` are gone (always, where no TAS flavor decides)."""
    if not tas.uses_topology(snapshot, cq):
        return True
    for victim in victims:
        snapshot.remove_workload(victim)
    try:
        return assign(snapshot, cq, wl, None, assignment.counts).mode == Mode.FIT
    finally:
        for victim in victims:
            snapshot.add_workload(victim)
