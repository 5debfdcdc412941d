"""Work that finds its term unconfirmed (the lease's renewal is late) waits for the next
confirmation instead of polling (``Term.park``, ``Term.confirm``). Polling was the fault: with
100,000 jobs queued, each retried every 0.1 s while a renewal was late, the enact workers kept
the event loop from running the renewal itself, and the leader deposed itself."""

from __future__ import annotations

import time

from admission.controller.enactor import Enactor
from admission.controller.features.checks import Checks
from admission.controller.term import Term
from admission.controller.watch.jobcache import JobCache
from admission.store.lease import Fence
from queues.cycle.scheduler import Scheduler
from queues.model import Config


def _term(valid_for: float) -> Term:
    term = Term(Fence("scheduler", "me", 1), Scheduler(Config.of([])))
    term.valid_until = time.monotonic() + valid_for
    return term


def test_parked_keys_are_requested_once_each_when_the_lease_is_confirmed() -> None:
    term = _term(-1.0)
    asked: list[str] = []
    term.park(asked.append, "ml/a")
    term.park(asked.append, "ml/b")
    term.park(asked.append, "ml/a")  # (parked twice before a confirmation: asked for once)
    assert asked == [] and not term.valid()

    term.confirm(time.monotonic() + 10.0)
    assert term.valid() and asked == ["ml/a", "ml/b"]
    term.confirm(time.monotonic() + 10.0)
    assert asked == ["ml/a", "ml/b"], "a confirmation asks only for what was parked since the last"


async def test_an_unconfirmed_term_parks_the_job_rather_than_retrying_it_on_a_timer() -> None:
    term = _term(-1.0)
    enactor = Enactor(None, jobs=JobCache(), current_term=lambda: term, workers=1)  # type: ignore[arg-type]

    await enactor.enact("ml/a")  # (with no kube: acting at all would fail)
    queue = enactor.queue
    assert not queue.timers and not queue.failures and not queue.waiting, "no retry is scheduled"
    assert enactor.patches == 0

    term.confirm(time.monotonic() + 10.0)
    assert queue.waiting == {"ml/a"}, "the lease renewed: the job is looked at again"


async def test_an_unconfirmed_term_makes_and_deletes_no_provisioning_request_until_confirmed() -> None:
    term = _term(-1.0)
    asked: list[str] = []
    checks = Checks(None, views={}, current_term=lambda: term, run_infos=lambda _t, _w: [], changed=asked.append)  # type: ignore[arg-type]
    checks.requests["uid-a"] = {"pr-a": {"metadata": {"name": "pr-a", "namespace": "ml"}}}  # (none wanted: deleted)
    checks.queue.request = asked.append  # type: ignore[method-assign]

    await checks.sync("uid-a")  # (with no kube: acting at all would fail)
    assert asked == [] and "pr-a" in checks.requests["uid-a"]

    term.confirm(time.monotonic() + 10.0)
    assert asked == ["uid-a"], "the lease renewed: the job's requests are looked at again"
