"""Partial admission (``queues.podsets.partial``): the most pods that fit, down to the job's minimum, as Kueue's."""

from __future__ import annotations

import pytest

from queues import model
from queues.cycle.scheduler import Scheduler
from queues.podsets import jobs, partial
from tests.queues.builders import CQ, GPU, flavor, make_workload
from tests.queues.builders import scheduler as make_scheduler


def one_queue(gpus: int, **preemption: str) -> Scheduler:
    cq = CQ("a").group(("a100", {"gpu": gpus}))
    if preemption:
        cq = cq.preemption(**preemption)
    return make_scheduler(flavor("a100"), cq, queues={"q": "a"})


def test_admits_the_largest_count_that_fits_and_holds_only_its_quota() -> None:
    s = one_queue(8)
    make_workload("running").request(gpu=1).count(5).submit(s)
    s.schedule()
    wl = make_workload("elastic").request(gpu=1).count(6).min_count(2).submit(s)
    s.schedule()
    assert wl.admission is not None and wl.admission.counts == {"main": 3}
    assert wl.admission.usage == {("a100", GPU): 3000}
    assert [ps.count for ps in wl.running_pod_sets] == [3] and wl.pod_sets[0].count == 6, "the job's own count kept"


def test_a_job_that_fits_whole_is_admitted_whole() -> None:
    s = one_queue(8)
    wl = make_workload("elastic").request(gpu=1).count(6).min_count(2).submit(s)
    s.schedule()
    assert wl.admission is not None and wl.admission.counts == {}


def test_below_the_minimum_it_waits_and_says_why_for_the_whole_job() -> None:
    s = one_queue(8)
    make_workload("running").request(gpu=1).count(7).submit(s)
    s.schedule()
    wl = make_workload("elastic").request(gpu=1).count(6).min_count(2).submit(s)
    s.schedule()
    assert wl.admission is None and wl.reason == "WaitingForQuota"
    assert "5 more needed" in wl.message, "the reason is the whole job's, as Kueue reports it"


def test_a_job_larger_than_the_queue_runs_partially_instead_of_waiting_forever() -> None:
    s = one_queue(8)
    wl = make_workload("big").request(gpu=1).count(20).min_count(4).submit(s)
    s.schedule()
    assert wl.admission is not None and wl.admission.counts == {"main": 8}


def test_preempting_for_the_whole_job_comes_before_shrinking_it() -> None:
    """Kueue tries the full count with preemption first; only without candidates does it shrink."""
    s = one_queue(8, withinClusterQueue="LowerPriority")
    low = make_workload("low").request(gpu=1).count(4).submit(s)
    s.schedule()
    high = make_workload("high").request(gpu=1).count(8).min_count(2).priority(100).submit(s)
    decisions = s.schedule()
    assert low.admission is None and any(getattr(d, "by", None) == high.key for d in decisions)
    assert high.admission is not None and high.admission.counts == {}


def test_shrinking_may_also_preempt() -> None:
    """No full-count candidates (too few to preempt), but a smaller count fits by preempting."""
    s = one_queue(8, withinClusterQueue="LowerPriority")
    make_workload("peer").request(gpu=1).count(4).priority(100).submit(s)
    low = make_workload("low").request(gpu=1).count(4).submit(s)
    s.schedule()
    high = make_workload("high").request(gpu=1).count(8).min_count(2).priority(100).submit(s)
    s.schedule()
    assert low.admission is None
    assert high.admission is not None and high.admission.counts == {"main": 4}


def test_counts_are_taken_from_the_last_pod_set_first() -> None:
    a = jobs.PodSet("a", 4, {}, min_count=1)
    b = jobs.PodSet("b", 5, {}, min_count=3)
    assert partial.counts_for([a, b], 1) == {"b": 4}
    assert partial.counts_for([a, b], 3) == {"b": 3, "a": 3}
    assert partial.search([a, b], lambda counts: counts if sum(counts.values()) <= 5 else None) == {"b": 3, "a": 2}
    assert partial.search([a, b], lambda counts: None) is None
    assert not partial.reducible([jobs.PodSet("c", 2, {})])


@pytest.mark.parametrize(
    ("now", "evicted"),
    [(6, False), (8, True), (2, True)],
    ids=["as-admitted", "parallelism-raised", "parallelism-lowered"],
)
def test_a_running_job_whose_pods_changed_is_requeued_as_it_now_is(now: int, evicted: bool) -> None:
    """Kueue's NoMatchingWorkload: what was admitted (6 of 10 pods, partially) is what the job runs;
    other pods release the quota and queue it with its new pod sets."""
    s = make_scheduler(flavor("a100"), CQ("a").group(("a100", {"gpu": 6})), queues={"q": "a"})
    wl = make_workload("sweep").request(gpu=1).count(10).min_count(2).submit(s)
    s.schedule()
    assert wl.admission is not None and wl.admission.counts == {"main": 6}
    running = jobs.read_job(make_workload("sweep").request(gpu=1).count(now).job())
    decision = s.retries.job_changed(wl.key, running.pod_sets, model.shape_of(running.pod_sets))
    assert (decision is not None) == evicted
    if decision is None:
        assert wl.admission is not None
        return
    assert (decision.reason, decision.detail) == ("NoMatchingWorkload", "JobChanged")
    assert wl.admission is None and [ps.count for ps in wl.pod_sets] == [now]
    s.schedule()
    if now <= 6:  # queued again as it now is: it fits
        assert wl.admission is not None and wl.admission.usage == {("a100", GPU): now * 1000}


def test_a_job_larger_than_its_queue_that_may_run_partially_is_not_told_never() -> None:
    """Kueue's sample-job-partial-admission (parallelism 20, min 5, a 9-CPU queue): while the queue is
    busy it waits for quota, not ExceedsMaxQuota; below its minimum ever, it is told so."""
    s = make_scheduler(flavor("f"), CQ("a").group(("f", {"cpu": 9})), queues={"q": "a"})
    make_workload("busy").request(cpu=6).submit(s)
    s.schedule()
    wl = make_workload("sample").request(cpu=1).count(20).min_count(5).submit(s)
    s.schedule()
    assert wl.admission is None and wl.reason == "WaitingForQuota", (wl.reason, wl.message)
    too_big = make_workload("huge").request(cpu=1).count(20).min_count(10).submit(s)
    s.schedule()
    assert too_big.reason == "ExceedsMaxQuota", (too_big.reason, too_big.message)
