"""Set-aside workloads by class (``queues.cycle.queueing``): a release looks at each class's first only,
and the order workloads are tried in is still queue order."""

from __future__ import annotations

from queues.cycle.queueing import PendingQueues
from queues.model import Workload
from queues.podsets import jobs


def wl(name: str, ts: float, seq: int, priority: int = 0) -> Workload:
    ps = (jobs.PodSet("main", 1, {"cpu": 1000}),)
    return Workload(key=f"ns/{name}", seq=seq, namespace="ns", local_queue="q", priority=priority, pod_sets=ps,
                    created=ts, queue_ts=ts)  # fmt: skip


def test_a_class_set_aside_out_of_order_comes_back_in_queue_order() -> None:
    """Evictions put workloads back with the same queue time, one cycle apart, latest submitted first:
    they join their class out of order, and still come back first-submitted first."""
    q = PendingQueues()
    m0, m1, m2 = wl("m0", 1.0, 0), wl("m1", 1.0, 1), wl("m2", 1.0, 2)
    for w in (m2, m1, m0):
        q.push("cq", w)
        head = q.head("cq")
        assert head is not None
        q.set_aside("cq", head, cls="medium")
    assert q.head("cq") is None
    q.requeue("cq")
    tried = []
    while (head := q.head("cq")) is not None:
        tried.append(head.key)
        q.remove(head)  # admitted: the next of its class takes its place
    assert tried == ["ns/m0", "ns/m1", "ns/m2"]


def test_a_release_puts_back_one_workload_per_class_not_every_one() -> None:
    q = PendingQueues()
    many = [wl(f"w{i}", float(i), i) for i in range(1000)]
    other = wl("other", 0.5, 5000, priority=1)
    for w in many:
        q.push("cq", w)
        q.set_aside("cq", w, cls="big")
    q.push("cq", other)
    q.set_aside("cq", other, cls="small")
    q.requeue("cq")
    state = q.queues["cq"]
    fresh = [w.key for lane in state.lanes.values() for _, w in lane if w.key not in state.inadmissible]
    assert sorted(set(fresh)) == ["ns/other", "ns/w0"]
    assert [w.key for w in q.waiting("cq")][:2] == ["ns/other", "ns/w0"], "positions are unchanged"
    assert len(q.waiting("cq")) == 1001


def test_a_workload_that_leaves_its_class_from_the_middle_is_never_tried() -> None:
    q = PendingQueues()
    a, b, c = wl("a", 1.0, 0), wl("b", 2.0, 1), wl("c", 3.0, 2)
    for w in (a, b, c):
        q.push("cq", w)
        q.set_aside("cq", w, cls="k")
    q.remove(b)  # cancelled while waiting behind a
    q.requeue("cq")
    tried = []
    while (head := q.head("cq")) is not None:
        tried.append(head.key)
        q.remove(head)
    assert tried == ["ns/a", "ns/c"]
