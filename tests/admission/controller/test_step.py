"""The leader's step (``admission.controller.step``) on its own: real PostgreSQL, no cluster, and a
clock the test sets. Jobs are put in the replica's job cache as its informers would; a step stores
them, asks its capabilities, schedules, commits in one fenced transaction, hands the enactor what
it touched and tells every capability, in that order. The whole-world tests show the same through
a simulated cluster and a running controller; this shows the kernel's order and what it commits,
without waiting on anything."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Collection, Sequence
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from admission.controller import step as step_module
from admission.controller.capability import STAMPS_WAIT, Capability, StepContext, Stepped
from admission.controller.enactor import Enactor
from admission.controller.events import EventPoster
from admission.controller.monitoring.metrics import Metrics
from admission.controller.report import Reporter
from admission.controller.step import StepOptions, Steps
from admission.controller.term import Term
from admission.controller.watch.changes import Changes
from admission.controller.watch.jobcache import JobCache
from admission.jobs import batch
from admission.policy import DEFAULT_POLICY
from admission.store import config as config_store
from admission.store import database, lease, tables
from queues.cycle.decisions import Decision
from tests.queues.builders import CQ, flavor, local_queue

START = 1_800_000_000.0  # the test's clock (Unix seconds)


class Recorder(Capability):
    """A capability that writes down when the step called it and what it was told."""

    def __init__(self, calls: list[str]) -> None:
        self.calls = calls
        self.outcome: Stepped | None = None
        self.now: float | None = None

    def decide(self, step: StepContext) -> Sequence[Decision]:
        self.calls.append("decide")
        self.now = step.now
        return ()

    def committed(self, step: StepContext) -> Collection[str]:
        self.calls.append("committed")
        return ()

    def stepped(self, step: StepContext, outcome: Stepped) -> None:
        self.calls.append("stepped")
        self.outcome = outcome

    async def record(self, step: StepContext) -> None:
        self.calls.append("record")


def _job(name: str, gpus: int) -> dict[str, Any]:
    container = {"name": "c", "image": "x", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "resourceVersion": "1",
            "creationTimestamp": "2027-01-15T08:00:00Z",
            "labels": {"kueue.x-k8s.io/queue-name": "q"},
        },
        "spec": {
            "parallelism": 1,
            "completions": 1,
            "suspend": True,
            "template": {"spec": {"containers": [container]}},
        },
    }


async def _leader(sessions: async_sessionmaker[AsyncSession], holder: str = "me") -> lease.Fence:
    async with database.transaction(sessions) as session:
        fence = await lease.acquire(session, holder=holder, ttl=dt.timedelta(seconds=15))
    assert fence is not None
    return fence


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    now = [START]
    monkeypatch.setattr(step_module, "now_ms", lambda: now[0])
    return now


async def _world(sessions: async_sessionmaker[AsyncSession], calls: list[str]) -> tuple[Steps, Term, Recorder]:
    async with database.transaction(sessions) as session:
        queues = [flavor("a100"), CQ("cq").group(("a100", {"gpu": 8})).build(), local_queue("ns", "q", "cq")]
        await config_store.apply(session, queues, actor="test")
    term = await Term.from_store(
        sessions, await _leader(sessions), DEFAULT_POLICY, {"ns": {}}, scale=1.0, inventory=lambda config: None
    )
    jobs, changes = JobCache(), Changes()
    for name in ("first", "second", "third"):
        assert jobs.observe(batch.JOB, "ADDED", _job(name, 4))
        changes.jobs[f"uid-{name}"] = None
    replica = SimpleNamespace(term=term)
    metrics = Metrics(replica)  # (read at a scrape; none here)
    events = EventPoster(None, instance="test")  # type: ignore[arg-type]  # (not started: nothing is posted)
    enactor = Enactor(None, jobs=jobs, current_term=lambda: term, workers=1)  # type: ignore[arg-type]
    recorder = Recorder(calls)
    steps = Steps(
        changes=changes,
        jobs=jobs,
        namespaces={"ns": {}},
        sessions=sessions,
        options=StepOptions(step_decisions=1000, ledger_labels=(), backoff_scale=1.0),
        metrics=metrics,
        reporter=Reporter(metrics, events, enactor.view),
        events=events,
        enactor=enactor,
        capabilities=[recorder],
    )
    return steps, term, recorder


async def test_a_step_stores_new_jobs_admits_what_fits_and_commits_it_before_anything_acts(
    sessions: async_sessionmaker[AsyncSession], clock: list[float]
) -> None:
    calls: list[str] = []
    steps, term, recorder = await _world(sessions, calls)
    await steps.run(term)

    assert calls == ["decide", "committed", "stepped", "record"], "capabilities are asked in the kernel's order"
    assert recorder.now == START, "the step runs on the replica's clock"
    async with database.transaction(sessions) as session:
        rows = {
            r.name: r for r in (await session.execute(select(tables.Workload).order_by(tables.Workload.id))).scalars()
        }
    assert {n: r.state for n, r in rows.items()} == {"first": "Admitted", "second": "Admitted", "third": "Pending"}
    assert rows["first"].admitted_at == dt.datetime.fromtimestamp(START, dt.UTC), "committed at the step's time"
    assert rows["third"].reason and "nvidia.com/gpu" in (rows["third"].message or ""), "why it waits is stored too"
    assert set(term.committed) == {"ns/first", "ns/second"}, "the enactor acts only on what was committed"
    assert steps.enactor.queue.waiting == {"ns/first", "ns/second", "ns/third"}
    assert recorder.outcome is not None
    assert set(recorder.outcome.stored) == {"uid-first", "uid-second", "uid-third"}
    assert {"ns/first", "ns/second", "ns/third"} <= recorder.outcome.changed

    calls.clear()
    clock[0] += 60.0
    await steps.run(term)  # (nothing changed: nothing to store, but every capability is still asked)
    assert calls == ["decide", "stepped", "record"] and recorder.now == START + 60.0


async def test_a_step_looks_at_so_many_changed_jobs_and_wakes_the_next_for_the_rest(
    sessions: async_sessionmaker[AsyncSession], clock: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(step_module, "STEP_JOBS", 2)
    steps, term, recorder = await _world(sessions, [])
    await steps.run(term)
    assert recorder.outcome is not None and set(recorder.outcome.stored) == {"uid-first", "uid-second"}
    assert list(steps.changes.jobs) == ["uid-third"] and steps.changes.wake.is_set(), "the rest, in the next step"

    steps.changes.wake.clear()
    await steps.run(term)
    assert set(recorder.outcome.stored) == {"uid-third"} and not steps.changes.jobs
    assert not steps.changes.wake.is_set()
    assert set(term.by_key) == {"ns/first", "ns/second", "ns/third"}


async def test_a_step_after_another_replica_took_the_lease_writes_nothing(
    sessions: async_sessionmaker[AsyncSession], clock: list[float]
) -> None:
    steps, term, _ = await _world(sessions, [])
    async with database.transaction(sessions) as session:
        assert await lease.release(session, term.fence, channel="test")
    await _leader(sessions, holder="other")
    with pytest.raises(lease.Fenced):
        await steps.run(term)
    async with database.transaction(sessions) as session:
        stored = (await session.execute(select(tables.Workload))).scalars().all()
    assert stored == [], "a deposed leader's step leaves the store as it was"


class Stamper(Recorder):
    """A capability holding a stamp of something it saw (as the meter's runs seen starting): due
    ``STAMPS_WAIT`` after it was seen, written with any commit before then."""

    def __init__(self, calls: list[str]) -> None:
        super().__init__(calls)
        self.seen: float | None = None
        self.wrote = False

    def commit_due(self) -> float | None:
        return None if self.seen is None else self.seen + STAMPS_WAIT

    async def write_in_commit(self, session: AsyncSession, step: StepContext) -> None:
        if self.seen is not None:
            self.calls.append("write")
            self.seen = None
            self.wrote = True

    def committed(self, step: StepContext) -> Collection[str]:
        super().committed(step)
        wrote, self.wrote = self.wrote, False
        return ["ns/third"] if wrote else ()  # (a stamp the workload's object shows)


async def test_a_stamp_waits_for_a_commit_a_moment_and_then_makes_its_own(
    sessions: async_sessionmaker[AsyncSession], clock: list[float]
) -> None:
    calls: list[str] = []
    steps, term, _ = await _world(sessions, calls)
    stamper = Stamper(calls)
    steps.capabilities = (stamper,)
    stamper.seen = START
    await steps.run(term)  # (it admits: the stamp goes with that commit)
    assert calls == ["decide", "write", "committed", "stepped", "record"]

    calls.clear()
    clock[0] += 60.0
    stamper.seen = clock[0]
    await steps.run(term)  # (nothing else to commit: the stamp waits)
    assert calls == ["decide", "stepped", "record"], "no transaction for a stamp alone, yet"
    assert steps.requeue_timer is not None, "a step is woken for when it is due"
    assert steps.requeue_timer.when() - asyncio.get_running_loop().time() <= STAMPS_WAIT + 0.05

    calls.clear()
    clock[0] += STAMPS_WAIT
    await steps.run(term)
    assert calls == ["decide", "write", "committed", "stepped", "record"], "due: committed on its own"
    assert steps.requeue_timer is None
    assert stamper.outcome is not None and "ns/third" in stamper.outcome.changed, "its object shows the stamp"
