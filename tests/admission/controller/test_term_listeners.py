"""A term tells its listeners every key whose committed state may have changed (``Term.listeners``):
the meter looks only at those each step instead of at every running workload, so a change that
went untold would leave a run open for good. Every way ``held`` or ``by_key`` changes is here."""

from __future__ import annotations

from admission.controller.term import Row, Term
from admission.store.lease import Fence
from queues.cycle.scheduler import Scheduler
from queues.model import Admission, Config, Workload


def _term() -> tuple[Term, list[str]]:
    term = Term(Fence("scheduler", "me", 1), Scheduler(Config.of([])))
    told: list[str] = []
    term.listeners.append(told.append)
    return term, told


def test_settling_a_key_is_told_whether_it_now_holds_quota_or_not() -> None:
    term, told = _term()
    wl = Workload("ml/a", 1, "ml", "q", 0, (), created=0.0, queue_ts=0.0)
    term.scheduler.workloads[wl.key] = wl
    term.settle(wl.key)  # holds nothing
    wl.admission = Admission("cq", {}, {}, borrowing=False)
    term.settle(wl.key)  # admitted
    assert term.held(wl.key) is not None
    wl.admission = None
    term.settle(wl.key)  # released
    assert told == ["ml/a", "ml/a", "ml/a"] and term.held(wl.key) is None


def test_forgetting_a_row_is_told_once_and_only_for_the_row_that_was_its_keys() -> None:
    term, told = _term()
    term.remember(Row(1, "uid-1", "ml/a"))
    term.remember(Row(2, "uid-2", "ml/a"))  # (the key's newer row: the older no longer stands for it)
    assert term.forget("uid-1") is not None and told == []
    assert term.forget("uid-2") is not None and told == ["ml/a"]
    assert term.forget("uid-2") is None and told == ["ml/a"]
