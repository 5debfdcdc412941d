"""Leader election's rounds (``admission.controller.leadership``) with the lease faked and the
clock set by the test: which round begins a term, confirms it, ends it, and how long each waits.
The lease's SQL and fencing are tested on PostgreSQL (tests/store); failover through a real
database and cluster in tests/admission/controller/test_restart.py."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy.exc import OperationalError

from admission.controller import leadership
from admission.controller.leadership import RETRY_SECONDS, Leadership
from admission.controller.readiness import DatabaseHealth
from admission.store.lease import Fence

TTL = 15.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Replica:
    """What the controller gives leadership: its term, as callbacks record it."""

    def __init__(self, clock: Clock, *, synced: bool = True, begins: bool = True) -> None:
        self.clock = clock
        self.synced, self.begins = synced, begins
        self.term: Fence | None = None
        self.said: list[str] = []
        self.confirmed: list[float] = []
        self.lease: list[Fence | Exception | None] = []  # what each round's acquire gets, in turn
        self.acquired = 0

    async def begin(self, fence: Fence, at: float) -> bool:
        self.said.append(f"begin {fence.token}")
        if self.begins:
            self.term = fence
        return self.begins

    async def end(self, why: str) -> None:
        self.said.append(f"end: {why}")
        self.term = None

    def leadership(self) -> Leadership:
        replica = self

        class Faked(Leadership):
            async def _acquire(self) -> Fence | None:
                replica.acquired += 1
                answer = replica.lease.pop(0)
                if isinstance(answer, Exception):
                    raise answer
                return answer

        return Faked(
            None,  # type: ignore[arg-type]  # (no database: the lease is faked)
            identity="me",
            ttl=TTL,
            database=DatabaseHealth(),
            can_lead=lambda: self.synced,
            begin=self.begin,
            end=self.end,
            leading=lambda: self.term,
            confirm=self.confirmed.append,
        )


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(leadership.time, "monotonic", fake)
    return fake


MINE, NEXT = Fence("scheduler", "me", 7), Fence("scheduler", "me", 8)
DOWN: Any = OperationalError("SELECT", {}, ConnectionError("the database does not answer"))


async def test_a_replica_asks_only_once_its_informers_listed_everything(clock: Clock) -> None:
    replica = Replica(clock, synced=False)
    elect = replica.leadership()
    assert await elect._round() == 0.1 and replica.acquired == 0
    replica.synced = True
    replica.lease = [MINE]
    assert await elect._round() == 0.0  # (a term began: confirmed again at once)
    assert replica.said == ["begin 7"] and replica.term == MINE


async def test_a_held_lease_is_confirmed_every_third_of_its_ttl(clock: Clock) -> None:
    replica = Replica(clock)
    elect = replica.leadership()
    replica.lease = [MINE, MINE, MINE]
    await elect._round()
    for _ in range(2):
        clock.now += TTL / 3
        assert await elect._round() == TTL / 3
    assert replica.said == ["begin 7"] and replica.confirmed == [1005.0, 1010.0]


async def test_a_lost_lease_ends_the_term_and_the_replica_stands_by(clock: Clock) -> None:
    replica = Replica(clock)
    elect = replica.leadership()
    replica.lease = [MINE, None, None]
    await elect._round()
    assert await elect._round() == TTL / 3
    assert await elect._round() == TTL / 3
    assert replica.said == ["begin 7", "end: another replica holds the lease"] and replica.term is None


async def test_an_unanswered_renewal_ends_the_term_only_once_the_lease_may_have_expired(clock: Clock) -> None:
    replica = Replica(clock)
    elect = replica.leadership()
    replica.lease = [MINE, DOWN, DOWN]
    await elect._round()
    clock.now += TTL * 0.5
    assert await elect._round() == RETRY_SECONDS  # (retried soon; the term goes on: the lease still holds)
    assert replica.term == MINE and not elect.database.ok
    clock.now += TTL * 0.31  # 0.81 of a TTL since the last renewal
    await elect._round()
    assert replica.term is None
    assert replica.said[-1] == "end: the lease could not be renewed in time (the database does not answer)"


async def test_a_new_token_is_a_new_term_and_a_term_that_cannot_begin_is_tried_again_soon(clock: Clock) -> None:
    replica = Replica(clock)
    elect = replica.leadership()
    replica.lease = [MINE, NEXT]
    await elect._round()
    await elect._round()  # (the lease was lost and won again meanwhile: a fresh term)
    assert replica.said == ["begin 7", "end: a new term", "begin 8"]
    cannot = Replica(clock, begins=False)
    elect = cannot.leadership()
    cannot.lease = [MINE]
    assert await elect._round() == RETRY_SECONDS and cannot.term is None
