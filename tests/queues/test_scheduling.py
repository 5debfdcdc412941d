"""Scheduling decisions with Kueue's semantics, one concept per test group."""

from typing import Any

import pytest

from queues.cycle import flavors, scheduler
from queues.cycle.assignment import Mode
from queues.kueue import codec
from queues.model import Config
from queues.podsets import jobs
from tests.queues.builders import CQ, GPU, admitted, flavor, local_queue, make_workload
from tests.queues.builders import scheduler as make_scheduler


def evictions(decisions: list[scheduler.Decision]) -> list[tuple[str, str, str | None]]:
    return [(d.workload.key, d.detail, d.by) for d in decisions if isinstance(d, scheduler.Evict)]


def admissions(decisions: list[scheduler.Decision]) -> list[str]:
    return [d.workload.key for d in decisions if isinstance(d, scheduler.Admit)]


# ----- flavors -------------------------------------------------------------------------------


def test_flavors_are_tried_in_order_and_respect_quota() -> None:
    s = make_scheduler(
        flavor("a100"), flavor("h100"), CQ("a").group(("a100", {"gpu": 4}), ("h100", {"gpu": 8})), queues={"q": "a"}
    )
    first = make_workload("first").request(gpu=4).submit(s)
    second = make_workload("second").request(gpu=4).submit(s)
    s.schedule()
    assert first.admission and first.admission.flavors == {"main": {GPU: "a100"}}
    assert second.admission and second.admission.flavors == {"main": {GPU: "h100"}}


def test_a_settled_assignment_is_kept_only_while_the_assigner_would_make_it_again() -> None:
    """``Assignment.settled`` (the first compatible flavor, without borrowing) lets a cycle keep a
    head's assignment when another admission changed its quota tree; ``still_fits`` must turn false
    the moment a fresh assignment would choose differently."""
    s = make_scheduler(
        flavor("a100"), flavor("h100"), CQ("a").group(("a100", {"gpu": 4}), ("h100", {"gpu": 8})), queues={"q": "a"}
    )
    wl = make_workload("w").request(gpu=4).submit(s)
    cq = s.snapshot.queues["a"]
    first = flavors.assign(s.snapshot, cq, wl, None)
    assert (first.mode, first.settled, first.flavors) == (Mode.FIT, True, {"main": {GPU: "a100"}})
    assert first.still_fits(cq)
    cq.add_usage({("a100", GPU): 1000}, 1)  # another admission took one a100 meanwhile
    assert not first.still_fits(cq)
    again = flavors.assign(s.snapshot, cq, wl, None)
    assert again.flavors == {"main": {GPU: "h100"}} and not again.settled  # (not the first flavor)
    cq.add_usage({("a100", GPU): 1000}, -1)
    assert first.still_fits(cq)


@pytest.mark.parametrize(
    ("wl", "expected_flavor"),
    [
        (make_workload("plain").request(gpu=1), "a100"),
        (make_workload("wants-h100").request(gpu=1).node_selector(gpu="h100"), "h100"),
        (make_workload("tolerates").request(gpu=1).tolerate("dedicated", "ml"), "tainted"),
    ],
    ids=["first-flavor", "node-selector", "toleration"],
)
def test_node_selectors_and_taints_choose_the_flavor(wl: Any, expected_flavor: str) -> None:
    tainted = flavor("tainted", {"gpu": "t"}, [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}])
    s = make_scheduler(
        tainted,
        flavor("a100", {"gpu": "a100"}),
        flavor("h100", {"gpu": "h100"}),
        CQ("a").group(("tainted", {"gpu": 8}), ("a100", {"gpu": 8}), ("h100", {"gpu": 8})),
        queues={"q": "a"},
    )
    w = wl.submit(s)
    s.schedule()
    assert w.admission is not None and w.admission.flavors["main"][GPU] == expected_flavor


def test_no_compatible_flavor_is_reported() -> None:
    s = make_scheduler(flavor("a100", {"gpu": "a100"}), CQ("a").group(("a100", {"gpu": 8})), queues={"q": "a"})
    w = make_workload("x").request(gpu=1).node_selector(gpu="v100").submit(s)
    s.schedule()
    assert w.admission is None and w.reason == "NoMatchingFlavor"
    assert "flavor a100 doesn't match node affinity" in w.message


def test_uncovered_resource_and_too_big_are_reported() -> None:
    s = make_scheduler(flavor("f"), CQ("a").group(("f", {"gpu": 8})), queues={"q": "a"})
    mig = make_workload("mig").request(**{"nvidia.com/mig-1g.10gb": 1}).submit(s)
    big = make_workload("big").request(gpu=9).submit(s)
    s.schedule()
    assert (mig.reason, big.reason) == ("NoMatchingFlavor", "ExceedsMaxQuota")
    assert "nvidia.com/mig-1g.10gb" in mig.message
    assert "the workload needs 9, the most this ClusterQueue can ever use is 8" in big.message


@pytest.mark.parametrize(
    ("fungibility", "expected"),
    [({}, "a100"), ({"whenCanBorrow": "TryNextFlavor"}, "h100")],
    ids=["borrow-stops-search", "try-next-before-borrowing"],
)
def test_flavor_fungibility_when_can_borrow(fungibility: dict[str, str], expected: str) -> None:
    s = make_scheduler(
        flavor("a100"),
        flavor("h100"),
        CQ("a").cohort("c").fungibility(**fungibility).group(("a100", {"gpu": 0}), ("h100", {"gpu": 4})),
        CQ("lender").cohort("c").group(("a100", {"gpu": 8}), ("h100", {"gpu": 0})),
        queues={"q": "a"},
    )
    w = make_workload("x").request(gpu=2).submit(s)
    s.schedule()
    assert w.admission is not None and w.admission.flavors["main"][GPU] == expected


# ----- cohorts -------------------------------------------------------------------------------


def cohort_pair(a_extra: dict[str, Any] | None = None, b_extra: dict[str, Any] | None = None) -> Any:
    return make_scheduler(
        flavor("f"),
        CQ("a").cohort("c").group(("f", {"gpu": (4, a_extra or {})})),
        CQ("b").cohort("c").group(("f", {"gpu": (4, b_extra or {})})),
        queues={"qa": "a", "qb": "b"},
    )


def test_borrowing_from_the_cohort() -> None:
    s = cohort_pair()
    w = make_workload("x", "qa").request(gpu=8).submit(s)
    s.schedule()
    assert w.admission is not None and w.admission.borrowing


@pytest.mark.parametrize(
    ("a_extra", "b_extra", "fits"),
    [
        ({"borrowingLimit": "3"}, {}, False),
        ({"borrowingLimit": "4"}, {}, True),
        ({}, {"lendingLimit": "3"}, False),
        ({}, {"lendingLimit": "4"}, True),
    ],
    ids=["borrowing-limit-blocks", "borrowing-limit-allows", "lending-limit-blocks", "lending-limit-allows"],
)
def test_borrowing_and_lending_limits(a_extra: dict[str, Any], b_extra: dict[str, Any], fits: bool) -> None:
    s = cohort_pair(a_extra, b_extra)
    w = make_workload("x", "qa").request(gpu=8).submit(s)
    s.schedule()
    assert (w.admission is not None) is fits
    if not fits:
        assert w.reason == "ExceedsMaxQuota"


def test_lending_limit_guarantees_the_lender_its_share() -> None:
    s = cohort_pair(b_extra={"lendingLimit": "2"})
    borrower = make_workload("borrower", "qa").request(gpu=6).submit(s)
    s.schedule()
    owner = make_workload("owner", "qb").request(gpu=2).submit(s)
    s.schedule()
    assert borrower.admission is not None and owner.admission is not None


def test_hierarchical_cohorts_share_through_the_parent() -> None:
    objects = [
        flavor("f"),
        codec.parse(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "Cohort",
                "metadata": {"name": "left"},
                "spec": {"parentName": "root"},
            }
        ),
        codec.parse(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "Cohort",
                "metadata": {"name": "root"},
                "spec": {
                    "resourceGroups": [
                        {
                            "coveredResources": [GPU],
                            "flavors": [{"name": "f", "resources": [{"name": GPU, "nominalQuota": "4"}]}],
                        }
                    ]
                },
            }
        ),
        CQ("a").cohort("left").group(("f", {"gpu": 2})),
    ]
    s = make_scheduler(*objects, queues={"q": "a"})
    fits = make_workload("fits").request(gpu=6).submit(s)
    s.schedule()
    too_much = make_workload("too-much").request(gpu=1).submit(s)
    s.schedule()
    assert fits.admission is not None and fits.admission.borrowing
    assert too_much.admission is None and too_much.reason == "WaitingForQuota"


# ----- preemption ----------------------------------------------------------------------------


def test_within_cluster_queue_lower_priority_is_preempted_minimally() -> None:
    s = make_scheduler(
        flavor("f"), CQ("a").preemption(withinClusterQueue="LowerPriority").group(("f", {"gpu": 8})), queues={"q": "a"}
    )
    low1 = make_workload("low1").priority(1).request(gpu=4).submit(s)
    low2 = make_workload("low2").priority(2).request(gpu=4).submit(s, now=1)
    s.schedule()
    high = make_workload("high").priority(10).request(gpu=4).submit(s, now=2)
    decisions = s.schedule()
    assert evictions(decisions) == [("ns/low1", "InClusterQueue", "ns/high")]  # lowest priority first, only one
    assert high.admission is not None and low2.admission is not None and low1.admission is None


def test_preemption_plan_says_whom_admitting_now_would_evict_without_deciding() -> None:
    s = make_scheduler(
        flavor("f"), CQ("a").preemption(withinClusterQueue="LowerPriority").group(("f", {"gpu": 8})), queues={"q": "a"}
    )
    make_workload("low1").priority(1).request(gpu=4).submit(s)
    make_workload("low2").priority(2).request(gpu=4).submit(s, now=1)
    s.schedule()
    high = make_workload("high").priority(10).request(gpu=4).submit(s, now=2)
    huge = make_workload("huge").priority(10).request(gpu=16).submit(s, now=3)
    assignment, victims = s.preemption_plan(high.key)
    assert assignment is not None and [(t.workload.key, t.reason) for t in victims] == [("ns/low1", "InClusterQueue")]
    assert high.admission is None and s.workloads["ns/low1"].admission is not None  # only a plan: nothing changed
    assignment, victims = s.preemption_plan(huge.key)
    assert assignment is not None and victims == [] and "gpu" in assignment.message
    assert s.preemption_plan("ns/low2") == (None, [])  # admitted: nothing to plan


@pytest.mark.parametrize(
    ("policy", "preempts"),
    [("Never", False), ("LowerPriority", False), ("LowerOrNewerEqualPriority", True)],
    ids=["never", "lower-priority-spares-equal", "newer-equal-priority"],
)
def test_equal_priority_preemption_policy(policy: str, preempts: bool) -> None:
    s = make_scheduler(
        flavor("f"), CQ("a").preemption(withinClusterQueue=policy).group(("f", {"gpu": 4})), queues={"q": "a"}
    )
    make_workload("blocker").priority(10).request(gpu=2).submit(s, now=0)
    s.schedule()
    older = make_workload("older").request(gpu=4).submit(s, now=0)
    newer = make_workload("newer").request(gpu=2).submit(s, now=1)
    s.schedule()  # BestEffortFIFO: newer fits beside the blocker, older does not
    assert newer.admission is not None and older.admission is None
    s.now = 2
    s.finish("ns/blocker")
    decisions = s.schedule()
    assert evictions(decisions) == ([("ns/newer", "InClusterQueue", "ns/older")] if preempts else [])
    assert (older.admission is not None) is preempts
    assert (newer.admission is None) is preempts


@pytest.mark.parametrize(("minimum", "evicted"), [("1", 0), ("0", 2)], ids=["keeps-one-replica", "min-zero"])
def test_batch_work_of_equal_priority_does_not_take_a_service_below_its_minimum(minimum: str, evicted: int) -> None:
    """Turnstile's serving rule: the older batch job may preempt newer equal-priority work, but of a
    service's replicas only those above its turnstile.dev/min-replicas (default 1)."""
    s = make_scheduler(
        flavor("f"),
        CQ("a").preemption(withinClusterQueue="LowerOrNewerEqualPriority").group(("f", {"gpu": 4})),
        queues={"q": "a"},
    )
    make_workload("blocker").priority(10).request(gpu=2).submit(s, now=0)
    s.schedule()
    train = make_workload("train").request(gpu=4).submit(s, now=0)
    service = {"turnstile.dev/service": "deployment-vllm", "turnstile.dev/min-replicas": minimum}
    for name in ("vllm-1", "vllm-2"):
        make_workload(name).labels(**service).request(gpu=1).submit(s, now=1)
    s.schedule()
    assert admitted(s) == {"ns/blocker": "a", "ns/vllm-1": "a", "ns/vllm-2": "a"}
    s.now = 2
    s.finish("ns/blocker")
    decisions = s.schedule()
    assert len(evictions(decisions)) == evicted
    assert (train.admission is not None) is (evicted == 2)
    # higher-priority batch work is not limited by the rule
    urgent = make_workload("urgent").priority(5).request(gpu=4).submit(s, now=3)
    s.now = 3
    decisions = s.schedule()
    assert urgent.admission is not None and {e[0] for e in evictions(decisions)} >= (
        {"ns/vllm-1", "ns/vllm-2"} if evicted == 0 else {"ns/train"}
    )


def test_reclaim_within_cohort_takes_back_lent_quota() -> None:
    s = make_scheduler(
        flavor("f"),
        CQ("a").cohort("c").preemption(reclaimWithinCohort="Any").group(("f", {"gpu": 4})),
        CQ("b").cohort("c").group(("f", {"gpu": 4})),
        queues={"qa": "a", "qb": "b"},
    )
    borrower = make_workload("borrower", "qb").priority(100).request(gpu=8).submit(s)
    s.schedule()
    owner = make_workload("owner", "qa").request(gpu=4).submit(s, now=5)
    decisions = s.schedule()
    assert evictions(decisions) == [("ns/borrower", "InCohortReclamation", "ns/owner")]
    assert owner.admission is not None and borrower.admission is None


def test_reclaim_lower_priority_only_spares_higher() -> None:
    s = make_scheduler(
        flavor("f"),
        CQ("a").cohort("c").preemption(reclaimWithinCohort="LowerPriority").group(("f", {"gpu": 4})),
        CQ("b").cohort("c").group(("f", {"gpu": 4})),
        queues={"qa": "a", "qb": "b"},
    )
    make_workload("borrower", "qb").priority(100).request(gpu=8).submit(s)
    s.schedule()
    owner = make_workload("owner", "qa").priority(1).request(gpu=4).submit(s, now=5)
    assert evictions(s.schedule()) == []
    assert owner.admission is None and owner.reason == "WaitingForQuota"


@pytest.mark.parametrize(
    ("threshold", "expected"),
    [(60, [("ns/victim", "InCohortReclaimWhileBorrowing", "ns/preemptor")]), (40, [])],
    ids=["victim-under-threshold", "victim-above-threshold"],
)
def test_borrow_within_cohort_respects_the_threshold(threshold: int, expected: list[Any]) -> None:
    s = make_scheduler(
        flavor("f"),
        CQ("a")
        .cohort("c")
        .preemption(
            reclaimWithinCohort="Any", borrowWithinCohort={"policy": "LowerPriority", "maxPriorityThreshold": threshold}
        )
        .group(("f", {"gpu": 6})),
        CQ("b").cohort("c").group(("f", {"gpu": 2})),
        queues={"qa": "a", "qb": "b"},
    )
    make_workload("victim", "qb").priority(50).request(gpu=6).submit(s)  # borrows 4 from a
    s.schedule()
    preemptor = make_workload("preemptor", "qa").priority(100).request(gpu=7).submit(s, now=1)  # must borrow 1
    assert evictions(s.schedule()) == expected
    assert (preemptor.admission is not None) is bool(expected)


# ----- queueing strategies -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("strict", "small_admitted"), [(True, False), (False, True)], ids=["StrictFIFO", "BestEffortFIFO"]
)
def test_queueing_strategy_head_blocking(strict: bool, small_admitted: bool) -> None:
    cq = CQ("a").group(("f", {"gpu": 8}))
    if strict:
        cq = cq.strict()
    s = make_scheduler(flavor("f"), cq, queues={"q": "a"})
    make_workload("running").request(gpu=6).submit(s)
    s.schedule()
    big = make_workload("big").request(gpu=4).submit(s, now=1)
    small = make_workload("small").request(gpu=2).submit(s, now=2)
    s.schedule()
    assert big.admission is None
    assert (small.admission is not None) is small_admitted


def test_priority_orders_the_queue() -> None:
    s = make_scheduler(flavor("f"), CQ("a").group(("f", {"gpu": 4})), queues={"q": "a"})
    make_workload("low").priority(1).request(gpu=4).submit(s, now=0)
    make_workload("high").priority(9).request(gpu=4).submit(s, now=1)
    assert admissions(s.schedule()) == ["ns/high"]


def test_a_cycle_admits_everything_that_fits_in_one_queue() -> None:
    s = make_scheduler(flavor("f"), CQ("a").group(("f", {"gpu": 100})), queues={"q": "a"})
    for i in range(50):
        make_workload(f"w{i}").request(gpu=2).submit(s, now=i)
    assert admissions(s.schedule()) == [f"ns/w{i}" for i in range(50)]


# ----- reasons for waiting -------------------------------------------------------------------


def test_reasons_for_queues_that_do_not_exist_or_refuse() -> None:
    cq = CQ("a").group(("f", {"gpu": 8}))
    cq.body["spec"]["namespaceSelector"] = {"matchLabels": {"team": "a"}}
    s = make_scheduler(flavor("f"), cq, local_queue("ns", "dangling", "ghost"), queues={"q": "a"})
    missing_lq = make_workload("a", "nope").request(gpu=1).submit(s)
    missing_cq = make_workload("b", "dangling").request(gpu=1).submit(s)
    wrong_ns = make_workload("c", "q").request(gpu=1).submit(s)
    s.schedule()
    assert missing_lq.reason == "LocalQueueNotFound" and "LocalQueues in ns: dangling, q" in missing_lq.message
    assert missing_cq.reason == "ClusterQueueNotFound"
    assert wrong_ns.reason == "NamespaceNotAllowed"
    s.set_namespaces({"ns": {"team": "a"}})
    s.schedule()
    assert wrong_ns.admission is not None


def test_missing_flavor_makes_the_queue_inactive_until_created() -> None:
    config = Config.of([CQ("a").group(("f", {"gpu": 8})).build(), local_queue("ns", "q", "a")])
    s = scheduler.Scheduler(config)
    w = make_workload("x").request(gpu=1).submit(s)
    s.schedule()
    assert w.reason == "Inactive" and "FlavorNotFound" in w.message
    config.put(flavor("f"))
    s.set_config(config)
    s.schedule()
    assert w.admission is not None


def test_default_local_queue_catches_unlabelled_jobs() -> None:
    s = make_scheduler(flavor("f"), CQ("a").group(("f", {"gpu": 8})), local_queue("ns", "default", "a"))
    builder = make_workload("x").request(gpu=1)
    job = builder.job()
    del job["metadata"]["labels"]
    from queues.podsets import jobs

    wl = s.intake.workload_for(jobs.read_job(job), seq=1, now=0)
    s.submit(wl)
    s.schedule()
    assert wl.local_queue == "default" and wl.admission is not None


def test_hold_and_drain_evicts_and_resume_readmits() -> None:
    cq = CQ("a").group(("f", {"gpu": 8}))
    s = make_scheduler(flavor("f"), cq, queues={"q": "a"})
    w = make_workload("x").request(gpu=1).submit(s)
    s.schedule()
    cq.body["spec"]["stopPolicy"] = "HoldAndDrain"
    config = s.config
    config.put(cq.build())
    drained = s.set_config(config)
    assert [(d.workload.key, d.reason) for d in drained if isinstance(d, scheduler.Evict)] == [
        ("ns/x", "ClusterQueueStopped")
    ]
    s.schedule()
    assert w.admission is None and w.reason == "Inactive"
    cq.body["spec"]["stopPolicy"] = "None"
    config.put(cq.build())
    s.set_config(config)
    s.schedule()
    assert admitted(s) == {"ns/x": "a"}


def test_a_victim_evicted_above_a_failing_head_is_not_lost() -> None:
    """Regression: reclaiming a high-priority borrower pushes it above its queue's failing head in
    the same cycle; setting that head aside must not drop the victim from the queue."""
    s = make_scheduler(
        flavor("f"),
        CQ("a").cohort("c").preemption(reclaimWithinCohort="Any").group(("f", {"gpu": 4})),
        CQ("b").cohort("c").group(("f", {"gpu": 4})),
        queues={"qa": "a", "qb": "b"},
    )
    victim = make_workload("victim", "qb").priority(10).request(gpu=8).submit(s, now=0)
    s.schedule()
    reclaimer = make_workload("reclaimer", "qa").request(gpu=4).submit(s, now=2)
    head = make_workload("head", "qb").request(gpu=5).submit(s, now=2)
    decisions = s.schedule()
    assert evictions(decisions) == [("ns/victim", "InCohortReclamation", "ns/reclaimer")]
    assert reclaimer.admission is not None and head.admission is None
    assert victim in s.pending.waiting("b")  # still queued, not dropped
    s.now = 3
    s.finish("ns/reclaimer")
    s.schedule()
    assert victim.admission is not None


@pytest.mark.parametrize(("policy", "evicted"), [("Hold", False), ("HoldAndDrain", True)], ids=["Hold", "HoldAndDrain"])
def test_local_queue_stop_policies(policy: str, evicted: bool) -> None:
    s = make_scheduler(flavor("f"), CQ("a").group(("f", {"gpu": 8})), queues={"q": "a", "other": "a"})
    running = make_workload("running").request(gpu=1).submit(s)
    s.schedule()
    config = s.config
    config.put(
        codec.parse(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "LocalQueue",
                "metadata": {"name": "q", "namespace": "ns"},
                "spec": {"clusterQueue": "a", "stopPolicy": policy},
            }
        )
    )
    drained = s.set_config(config)
    assert [d.workload.key for d in drained] == (["ns/running"] if evicted else [])
    held = make_workload("held").request(gpu=1).submit(s, now=1)
    other = make_workload("other", "other").request(gpu=1).submit(s, now=1)
    s.schedule()
    assert held.admission is None and held.reason == "Inactive" and "LocalQueue ns/q is stopped" in held.message
    assert other.admission is not None  # the ClusterQueue still admits from its other LocalQueues
    assert (running.admission is None) is evicted


def test_an_admission_the_caller_could_not_enact_is_undone() -> None:
    s = make_scheduler(flavor("f"), CQ("a").group(("f", {"gpu": 4})), queues={"q": "a"})
    first = make_workload("first").request(gpu=4).submit(s)
    second = make_workload("second").request(gpu=4).submit(s, now=1)
    assert admissions(s.schedule()) == ["ns/first"]
    s.forget_admission(first)  # e.g. the job vanished before it could be unsuspended
    assert first.admission is None and s.snapshot.queues["a"].usage[("f", GPU)] == 0
    assert admissions(s.schedule()) == ["ns/first"]  # it keeps its place ahead of second
    assert second.admission is None


# ----- slices ---------------------------------------------------------------------------------


def test_a_backlog_decided_in_slices_gives_the_same_decisions_as_at_once() -> None:
    def backlog() -> scheduler.Scheduler:
        s = make_scheduler(
            flavor("a100"),
            CQ("a").group(("a100", {"gpu": 30})),
            CQ("b").group(("a100", {"gpu": 12})),
            queues={"qa": "a", "qb": "b"},
        )
        for i in range(40):
            make_workload(f"a-{i}", queue="qa").request(gpu=1 + i % 3).submit(s)
            make_workload(f"b-{i}", queue="qb").request(gpu=1).submit(s)
        return s

    whole = backlog()
    at_once = admissions(whole.schedule())
    sliced = backlog()
    slices = []
    while decided := sliced.schedule(max_decisions=5):
        slices.append(admissions(decided))
    assert len(slices) > 3 and all(len(part) >= 5 for part in slices[:-1])
    assert [key for part in slices for key in part] == at_once
    assert len(at_once) == 12 + 15  # b: 12 of 1 GPU; a: 30 GPUs as 1, 2, 3, 1, 2, 3, ... (5 x 6 GPUs)


def _pytorchjob(name: str, master_gpus: int, workers: int, worker_gpus: int) -> dict[str, Any]:
    def replica(count: int, gpus: int) -> dict[str, Any]:
        container = {"name": "c", "image": "x", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}
        return {"replicas": count, "template": {"spec": {"containers": [container]}}}

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": "ns", "labels": {jobs.QUEUE_LABEL: "q"}},
        "spec": {"pytorchReplicaSpecs": {"Master": replica(1, master_gpus), "Worker": replica(workers, worker_gpus)}},
    }


@pytest.mark.parametrize("running_gpus", [0, 6], ids=["nothing-running", "first-pod-set-short-now"])
def test_pod_sets_that_can_never_fit_together_exceed_max_quota_whatever_runs(running_gpus: int) -> None:
    """The reason must not depend on what runs now: with 6 of 8 GPUs in use the master (4) fails
    on current usage first, yet the job (12 GPUs) can never fit: ExceedsMaxQuota, as a single pod set."""
    s = make_scheduler(flavor("f"), CQ("a").group(("f", {"gpu": 8})), queues={"q": "a"})
    if running_gpus:
        make_workload("running").request(gpu=running_gpus).submit(s)
        s.schedule()
    wl = s.intake.workload_for(jobs.read_job(_pytorchjob("big", 4, 2, 4)), seq=99, now=0.0)
    s.submit(wl)
    s.schedule()
    assert wl.admission is None
    assert wl.reason == "ExceedsMaxQuota", wl.message
    assert "needs 12" in wl.message and "can ever use is 8" in wl.message


def test_a_multi_pod_set_message_names_each_pod_set() -> None:
    """Kueue names the pod set in each message ("couldn't assign flavors to pod set worker: ..."):
    a PyTorchJob's two messages must not read as the same one twice."""
    s = make_scheduler(flavor("f"), CQ("a").group(("f", {"gpu": 8})), queues={"q": "a"})
    make_workload("running").request(gpu=6).submit(s)
    s.schedule()
    wl = s.intake.workload_for(jobs.read_job(_pytorchjob("two", 2, 1, 2)), seq=99, now=0.0)
    s.submit(wl)
    s.schedule()
    assert wl.admission is None and wl.reason == "WaitingForQuota", wl.message
    assert wl.message.startswith("pod set worker: insufficient unused quota"), wl.message
