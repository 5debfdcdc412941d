"""A workload stopped and resumed by a person (Kueue's ``spec.active``), in the pure core."""

from __future__ import annotations

from queues.cycle.decisions import DEACTIVATED, Evict
from queues.model import Config
from tests.queues.builders import CQ, admitted, flavor, local_queue, make_workload
from tests.queues.builders import scheduler as make_scheduler


def test_a_stopped_workload_frees_its_quota_and_waits_until_resumed_in_line_from_its_stop() -> None:
    s = make_scheduler(flavor("f"), CQ("a").group(("f", {"gpu": 8})), queues={"q": "a"})
    first = make_workload("first").request(gpu=8).submit(s, now=0.0)
    s.schedule()
    waiting = make_workload("waiting").request(gpu=8).submit(s, now=1.0)
    assert admitted(s) == {first.key: "a"}

    s.now = 2.0
    evict = s.retries.deactivate(first.key, "stopped by alice")
    assert isinstance(evict, Evict) and (evict.reason, evict.workload) == (DEACTIVATED, first)
    assert evict.released is not None and evict.released.cluster_queue == "a"
    assert s.retries.deactivate(first.key) is None, "stopping it again changes nothing"
    s.schedule()
    assert admitted(s) == {waiting.key: "a"}, "the quota it gave back goes to the next in line"
    assert (first.reason, first.active) == ("Inactive", False) and "stopped by alice" in first.message

    s.finish(waiting.key)
    s.schedule()
    assert admitted(s) == {}, "a stopped workload is never admitted"

    assert s.retries.activate(first.key) and not s.retries.activate(first.key)
    s.schedule()
    assert admitted(s) == {first.key: "a"}


def test_stopping_a_waiting_workload_takes_it_out_of_its_queue_and_resuming_forgets_its_retries() -> None:
    s = make_scheduler(flavor("f"), CQ("a").group(("f", {"gpu": 4})), queues={"q": "a"})
    blocker = make_workload("blocker").request(gpu=4).submit(s, now=0.0)
    s.schedule()
    early = make_workload("early").request(gpu=4).submit(s, now=1.0)
    late = make_workload("late").request(gpu=4).submit(s, now=2.0)
    early.retries = 3

    s.now = 3.0
    assert s.retries.deactivate(early.key) is None  # (it held no quota: nothing to evict)
    assert early.key not in s.pending.where and early.key in s.intake.parked
    s.finish(blocker.key)
    s.now = 4.0
    assert s.retries.activate(early.key) and early.retries == 0
    s.schedule()
    # Resumed, it is back in line as of its stop (3.0): after late, which queued at 2.0.
    assert admitted(s) == {late.key: "a"}
    assert early.queue_ts == 3.0 and early.admission is None


def test_a_workload_whose_queue_is_missing_can_be_stopped_and_stays_out_when_the_queue_appears() -> None:
    objects = [flavor("f"), CQ("a").group(("f", {"gpu": 8})).build(), local_queue("ns", "q", "a")]
    s = make_scheduler(*objects)
    lost = make_workload("lost", queue="nowhere").request(gpu=1).submit(s)
    assert lost.reason == "LocalQueueNotFound"
    s.retries.deactivate(lost.key)
    assert lost.reason == "Inactive"
    s.set_config(Config.of([*objects, local_queue("ns", "nowhere", "a")]))
    s.schedule()
    assert admitted(s) == {} and lost.reason == "Inactive"
    s.retries.activate(lost.key)
    s.schedule()
    assert admitted(s) == {lost.key: "a"}


def test_a_workload_whose_object_was_deleted_is_requeued_if_it_held_quota_and_keeps_its_place_if_not() -> None:
    s = make_scheduler(flavor("f"), CQ("a").group(("f", {"gpu": 8})), queues={"q": "a"})
    held = make_workload("held").request(gpu=8).submit(s, now=0.0)
    s.schedule()
    waiting = make_workload("waiting").request(gpu=8).submit(s, now=1.0)
    assert s.retries.workload_lost(waiting.key) is None and waiting.queue_ts == 1.0, "a waiting one keeps its place"
    s.now = 2.0
    evict = s.retries.workload_lost(held.key)
    assert evict is not None and (evict.reason, evict.detail) == ("NoMatchingWorkload", "WorkloadDeleted")
    s.schedule()
    assert admitted(s) == {waiting.key: "a"}, "queued again behind what waited"
