"""Kueue's flavor assignment where Turnstile used to differ (issue 18): one table test per rule,
each the smallest case that shows it, with what Kueue's FlavorAssigner decides.

- a flavor's node selector is matched on that flavor's own label keys (Kueue >= v0.19);
- a zero request of a covered resource still gets a flavor (and one the queue does not cover is
  no reason to refuse);
- a cycle's entries are ordered by how far up the cohort tree they borrow, then priority;
- flavors are compared by mode (fit > reclaim > preempt), then borrowing level, unless
  ``flavorFungibility.preference: PreemptionOverBorrowing`` puts the level first;
- a head that needs preemption but may preempt nothing holds its capacity for the cycle;
- only a workload within its nominal quota after preemption may preempt, in its own queue too,
  unless ``borrowWithinCohort`` (or fair sharing's reclaim) lets it preempt while borrowing.
"""

from __future__ import annotations

from typing import Any

import pytest

from queues.cycle.assignment import Mode
from queues.cycle.scheduler import Evict
from queues.kueue import codec, validation
from tests.queues.builders import CQ, GPU, flavor, make_workload
from tests.queues.builders import scheduler as make_scheduler


def cohort(name: str, gpus: int, parent: str | None = None) -> Any:
    spec: dict[str, Any] = {
        "resourceGroups": [
            {
                "coveredResources": [GPU],
                "flavors": [{"name": "f", "resources": [{"name": GPU, "nominalQuota": str(gpus)}]}],
            }
        ]
    }
    if parent:
        spec["parentName"] = parent
    return codec.parse(
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Cohort", "metadata": {"name": name}, "spec": spec}
    )


def test_a_flavors_node_selector_is_matched_on_its_own_label_keys() -> None:
    s = make_scheduler(
        flavor("zone-a", {"topology.kubernetes.io/zone": "a"}),
        flavor("h100", {"gpu": "h100"}),
        CQ("q").group(("zone-a", {"gpu": 8}), ("h100", {"gpu": 8})),
        queues={"q": "q"},
    )
    wl = make_workload("wants-h100").request(gpu=1).node_selector(gpu="h100").submit(s)
    s.schedule()
    # zone-a sets no "gpu" label: Kueue ignores that key for it (the union of the group's keys did not)
    assert wl.admission is not None and wl.admission.flavors["main"][GPU] == "zone-a"


def test_a_zero_request_of_a_covered_resource_gets_a_flavor() -> None:
    s = make_scheduler(flavor("f"), CQ("q").group(("f", {"cpu": 8, "gpu": 8})), queues={"q": "q"})
    wl = make_workload("cpu-only").request(cpu=1, gpu=0).submit(s)
    other = make_workload("odd").request(cpu=1, **{"example.com/widget": 0}).submit(s)
    s.schedule()
    assert wl.admission is not None and wl.admission.flavors == {"main": {"cpu": "f", GPU: "f"}}
    assert (GPU, "f") not in {(r, f) for f, r in wl.admission.usage}, "no quota held for nothing"
    assert other.admission is not None, "an uncovered resource requested at 0 is no reason to refuse"


def test_entries_that_borrow_less_far_go_first_whatever_their_priority() -> None:
    s = make_scheduler(
        flavor("f"),
        cohort("root", 4),
        cohort("team", 4, parent="root"),
        CQ("a").cohort("team").group(("f", {"gpu": 0})),
        CQ("b").cohort("team").group(("f", {"gpu": 0})),
        queues={"a": "a", "b": "b"},
    )
    far = make_workload("far", queue="a").request(gpu=8).priority(100).submit(s)  # needs the root's 4 too: level 2
    near = make_workload("near", queue="b").request(gpu=4).submit(s)  # fits in team's 4: level 1
    s.schedule()
    assert near.admission is not None and far.admission is None


def test_fit_by_borrowing_beats_preempting_by_default_and_the_preference_can_turn_it() -> None:
    for preference, expected in ((None, "borrow-here"), ("BorrowingOverPreemption", "borrow-here"),
                                 ("PreemptionOverBorrowing", "preempt-here")):  # fmt: skip
        s = make_scheduler(
            flavor("borrow-here"),
            flavor("preempt-here"),
            _queue(preference),
            CQ("lender").cohort("c").group(("borrow-here", {"gpu": 4}), ("preempt-here", {"gpu": 0})),
            queues={"q": "q"},
        )
        low = make_workload("low").request(gpu=4).submit(s)  # on preempt-here (the only fit without borrowing)
        s.schedule()
        assert low.admission is not None and low.admission.flavors["main"][GPU] == "preempt-here"
        high = make_workload("high").request(gpu=4).priority(10).submit(s)
        decisions = s.schedule()
        assert high.admission is not None and high.admission.flavors["main"][GPU] == expected, preference
        evicted = [d.workload.key for d in decisions if isinstance(d, Evict)]
        # preempted, low comes back at once on the flavor it can borrow
        assert evicted == (["ns/low"] if expected == "preempt-here" else []), preference


def _queue(preference: str | None) -> CQ:
    cq = CQ("q").cohort("c").group(("preempt-here", {"gpu": 4}), ("borrow-here", {"gpu": 0}))
    cq.preemption(withinClusterQueue="LowerPriority")
    kw = {"whenCanBorrow": "TryNextFlavor", "whenCanPreempt": "TryNextFlavor"}
    return cq.fungibility(**kw, **({"preference": preference} if preference else {}))


def test_reclaiming_from_another_queue_beats_preempting_by_priority() -> None:
    """Flavor x: only by evicting the queue's own lower-priority work; flavor y: only by reclaiming what
    another queue borrowed. Kueue ranks reclaim above priority preemption; the first flavor no longer
    wins the tie."""
    q = CQ("q").cohort("c").group(("x", {"gpu": 4}), ("y", {"gpu": 4}))
    q.preemption(withinClusterQueue="LowerPriority", reclaimWithinCohort="Any")
    q.fungibility(whenCanPreempt="TryNextFlavor")
    other = CQ("other").cohort("c").group(("x", {"gpu": 0}), ("y", {"gpu": 0}))
    s = make_scheduler(flavor("x"), flavor("y"), q, other, queues={"q": "q", "other": "other"})
    own = make_workload("own", queue="q").request(gpu=4).submit(s)  # takes x
    borrowed = make_workload("borrowed", queue="other").request(gpu=4).submit(s)  # borrows y from q
    s.schedule()
    assert own.admission is not None and own.admission.flavors["main"][GPU] == "x"
    assert borrowed.admission is not None and borrowed.admission.flavors["main"][GPU] == "y"
    plan, _ = s.preemption_plan(make_workload("new", queue="q").request(gpu=4).priority(10).submit(s).key)
    assert plan is not None and plan.mode == Mode.RECLAIM and plan.flavors["main"][GPU] == "y"
    s.schedule()
    assert borrowed.admission is None and own.admission is not None


@pytest.mark.parametrize(
    ("borrow_within_cohort", "preempts"),
    [(None, False), ({"policy": "LowerPriority", "maxPriorityThreshold": 100}, True)],
)
def test_a_workload_that_would_still_borrow_preempts_only_with_borrow_within_cohort(
    borrow_within_cohort: dict[str, Any] | None, preempts: bool
) -> None:
    """a: 4 GPUs of its own, 4 more lendable by b. low (4) runs in a borrowing 4 of b's too; high
    asks 6: even with low gone it would borrow 2, so (Kueue's fitsResourceQuota) it may not preempt
    low in its own queue unless borrowWithinCohort says it may preempt while borrowing."""
    pre: dict[str, Any] = {"withinClusterQueue": "LowerPriority"}
    if borrow_within_cohort:
        pre |= {"borrowWithinCohort": borrow_within_cohort, "reclaimWithinCohort": "Any"}
    s = make_scheduler(
        flavor("f"),
        CQ("a").cohort("c").preemption(**pre).group(("f", {"gpu": 4})),
        CQ("b").cohort("c").group(("f", {"gpu": 4})),
        queues={"a": "a", "b": "b"},
    )
    low = make_workload("low", queue="a").request(gpu=4).submit(s)
    other = make_workload("other", queue="a").request(gpu=4).submit(s)
    s.schedule()
    assert low.admission is not None and other.admission is not None  # a: 8 of 8 (4 borrowed)
    high = make_workload("high", queue="a").request(gpu=6).priority(200).submit(s, now=1.0)
    decided = s.schedule()
    evicted = {d.workload.key for d in decided if isinstance(d, Evict)}
    assert bool(evicted) is preempts, (evicted, high.message)
    if not preempts:
        assert high.admission is None and high.reason == "WaitingForQuota", high.message


def test_a_blocked_head_holds_its_capacity_against_borrowers() -> None:
    """Queue a (reclaimWithinCohort Never) lent 6 of its 8 GPUs; its head needs 4 and may not reclaim:
    it finds nothing to preempt. Kueue reserves what it would use for the rest of the cycle, so b's
    borrower cannot take a's last 2 free GPUs in that cycle. StrictFIFO keeps the head at the front,
    so the capacity stays held; BestEffortFIFO sets it aside and the borrower gets in a cycle later."""
    for strict, borrower_admitted in ((True, False), (False, True)):
        a = CQ("a").cohort("c").group(("f", {"gpu": 8})).preemption(reclaimWithinCohort="Never")
        if strict:
            a.strict()
        b = CQ("b").cohort("c").group(("f", {"gpu": 0}))
        s = make_scheduler(flavor("f"), a, b, queues={"a": "a", "b": "b"})
        lent = make_workload("lent", queue="b").request(gpu=6).submit(s)
        s.schedule()
        assert lent.admission is not None
        head = make_workload("head", queue="a").request(gpu=4).submit(s)
        borrower = make_workload("borrower", queue="b").request(gpu=2).submit(s)
        s.schedule()
        assert head.admission is None and head.reason == "WaitingForQuota"
        assert (borrower.admission is not None) == borrower_admitted, strict
        assert s.snapshot.queues["a"].usage.get(("f", GPU), 0) == 0, "the hold ends with the cycle"


def test_a_strict_fifo_head_holds_against_borrowers_that_come_later() -> None:
    """Kueue requeues a StrictFIFO head at once, so it is in every cycle and holds its quota in each:
    a borrower from another queue that arrives after the head was blocked waits too, and is told why."""
    a = CQ("a").cohort("c").group(("f", {"gpu": 8})).preemption(reclaimWithinCohort="Never").strict()
    b = CQ("b").cohort("c").group(("f", {"gpu": 0}))
    s = make_scheduler(flavor("f"), a, b, queues={"a": "a", "b": "b"})
    lent = make_workload("lent", queue="b").request(gpu=6).submit(s)
    s.schedule()
    head = make_workload("head", queue="a").request(gpu=4).submit(s, now=60)
    s.schedule()
    assert head.admission is None
    borrower = make_workload("borrower", queue="b").request(gpu=2).submit(s, now=120)
    s.schedule()
    assert borrower.admission is None
    assert borrower.reason == "WaitingForQuota" and "held by the head of ClusterQueue a" in borrower.message
    s.now = 600
    s.finish(lent.key)
    s.schedule()
    assert head.admission is not None and borrower.admission is not None


def test_fields_accepted_but_not_acted_on_are_named_never_ignored() -> None:
    from queues.kueue import validation

    prc = codec.parse({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ProvisioningRequestConfig",
                     "metadata": {"name": "p"}, "spec": {"provisioningClassName": "check-capacity.autoscaling.x-k8s.io",
                                                         "podSetUpdates": {"nodeSelector": []},
                                                         "podSetMergePolicy": "IdenticalPodTemplates"}})  # fmt: skip
    check = codec.parse({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "AdmissionCheck", "metadata": {"name": "c"},
                       "spec": {"controllerName": "kueue.x-k8s.io/provisioning-request", "retryDelayMinutes": 15}})  # fmt: skip
    assert [e.path for e in validation.unused_fields(prc)] == ["spec.podSetUpdates", "spec.podSetMergePolicy"]
    assert [e.path for e in validation.unused_fields(check)] == ["spec.retryDelayMinutes"]
    assert all("accepted but not used" in e.message for e in validation.unused_fields(prc))


def test_a_misspelled_metadata_field_is_refused_naming_it() -> None:
    import pytest

    from queues import errors

    with pytest.raises(errors.Invalid) as refused:
        codec.parse({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                   "metadata": {"name": "q", "namespace": "ns", "lables": {"team": "a"}},
                   "spec": {"clusterQueue": "cq"}})  # fmt: skip
    assert [str(e) for e in refused.value.errors] == [
        "metadata.lables: unknown field; check the spelling against Kueue's API"
    ]
    kept = codec.parse({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                      "metadata": {"name": "f", "finalizers": ["kueue.x-k8s.io/resource-in-use"], "uid": "u1"}})  # fmt: skip
    assert kept.metadata.finalizers == ["kueue.x-k8s.io/resource-in-use"], (
        "client-owned fields kept, server-owned dropped"
    )


def test_a_zero_request_does_not_change_a_pods_role_hash() -> None:
    """Pod groups recorded by earlier versions keep their roles: the hash leaves zero requests out."""
    from queues.podsets import pods

    def pod(requests: dict[str, str]) -> dict[str, Any]:
        return {"spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": requests}}]}}

    assert pods.role_hash(pod({"cpu": "1", GPU: "0"})) == pods.role_hash(pod({"cpu": "1"}))


def test_every_problem_of_an_object_is_said_in_one_run() -> None:
    """A field the schema refuses no longer hides the rules that need the whole object: the bad
    strategy and the negative quota are both reported, not one after the other is fixed."""
    import pytest

    from queues import errors

    bad = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "cq", "lables": {}},
           "spec": {"queueingStrategy": "Wrong", "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
               {"name": "f", "resources": [{"name": "cpu", "nominalQuota": "-1"}]}]}]}}  # fmt: skip
    with pytest.raises(errors.Invalid) as refused:
        codec.parse(bad)
    paths = [e.path for e in refused.value.errors]
    assert paths == [
        "metadata.lables",
        "spec.queueingStrategy",
        "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota",
    ], refused.value.errors


@pytest.mark.parametrize(
    ("quotas", "warned"),
    [
        ({"nominalQuota": "8"}, []),
        ({"nominalQuota": "500m"}, ["nominalQuota"]),
        ({"nominalQuota": "1m", "borrowingLimit": "2.5"}, ["nominalQuota", "borrowingLimit"]),
    ],
    ids=["whole", "half-a-gpu", "milli-and-fraction"],
)
def test_a_fractional_gpu_quota_is_warned_about(quotas: dict[str, str], warned: list[str]) -> None:
    """Pods ask for whole GPUs: a fraction of one in a quota is never used, and is said so (CPU may be fractional)."""
    cq = codec.parse(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": "frac"},
            "spec": {
                "cohortName": "c",
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "nvidia.com/gpu"],
                        "flavors": [
                            {
                                "name": "a100",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": "1500m"},
                                    {"name": "nvidia.com/gpu", **quotas},
                                ],
                            }
                        ],
                    }
                ],
            },
        }
    )
    found = validation.unused_fields(cq)
    prefix = "spec.resourceGroups[0].flavors[0].resources[1]."
    assert [e.path for e in found] == [prefix + w for w in warned]
    assert all("is not a whole number" in e.message for e in found)
