"""Faults between Turnstile and PostgreSQL, injected on real connections: an admission whose commit
fails, connections killed at random points of commits, a black-holed network, a killed LISTEN.

Principle 2 of the design: an admission is a committed row first, then a patch. So whatever
fails, no job runs on an admission that was never committed, every admission is on the ledger,
and nothing exceeds its quota (``books.invariants``).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from pathlib import Path

import pytest
from sqlalchemy import text

from admission.store import database
from tests.admission.controller.world import CONFIG, World, eventually, job, world
from tests.e2e import books
from tests.e2e.dbproxy import proxied

POISON = [
    """
    CREATE FUNCTION poison_admission() RETURNS trigger AS $$
    BEGIN
      IF (SELECT name FROM workloads WHERE id = NEW.workload_id) = 'poison' THEN
        RAISE EXCEPTION 'injected: this admission cannot be stored';
      END IF;
      RETURN NEW;
    END $$ LANGUAGE plpgsql
    """,
    "CREATE TRIGGER poison BEFORE INSERT ON admissions FOR EACH ROW EXECUTE FUNCTION poison_admission()",
]


async def _running(w: World, name: str) -> bool:
    j = await w.get(name)
    return not j["spec"]["suspend"]


async def _state(w: World, name: str) -> str | None:
    async with database.transaction(w.sessions) as s:
        found = await s.execute(text("SELECT state FROM workloads WHERE name = :n"), {"n": name})
        return found.scalar_one_or_none()


async def test_an_admission_whose_commit_fails_never_starts_its_job(
    tmp_path: Path, migrated_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The core admits in memory first; when the store cannot take the admission, nothing of that
    step may reach the cluster: the term is rebuilt from the store, and the job waits."""
    caplog.set_level(logging.WARNING, logger="admission")
    async with world(tmp_path, migrated_url) as w:
        await w.apply(CONFIG)
        async with database.transaction(w.sessions) as s:
            for statement in POISON:
                await s.execute(text(statement))
        w.start_controller("replica-1")
        await w.create(job("healthy", gpus=4))
        await eventually(lambda: _running(w, "healthy"), what="a healthy job admitted")
        await w.create(job("poison", gpus=4))  # fits, but its admission row cannot be inserted
        await eventually(
            lambda: any("scheduling step failed" in r.getMessage() for r in caplog.records), what="the failure"
        )
        for _ in range(40):  # 2 s of retries: never started, never admitted in the store
            assert (await w.get("poison"))["spec"]["suspend"] is True
            assert await _state(w, "poison") == "Pending"
            await asyncio.sleep(0.05)
        async with database.transaction(w.sessions) as s:
            events = await s.execute(
                text(
                    "SELECT count(*) FROM workload_events e JOIN workloads w ON w.id = e.workload_id WHERE w.name = 'poison'"
                )
            )
            assert events.scalar_one() == 0, "no Admitted event for an admission that was never stored"
            await s.execute(text("DROP TRIGGER poison ON admissions"))
        await eventually(lambda: _running(w, "poison"), timeout=10, what="the job admitted once the store takes it")
        assert await _running(w, "healthy")


async def test_a_black_holed_database_is_noticed_and_the_webhook_stays_ready(
    tmp_path: Path, migrated_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Nothing fails, everything waits: every call is bounded, leadership is given up before the
    lease runs out, the outage is logged once with its cause, the webhook stays ready (it answers
    from memory), and scheduling resumes within seconds of the network healing."""
    caplog.set_level(logging.WARNING, logger="admission")
    async with proxied(migrated_url) as proxy, world(tmp_path, migrated_url) as w:
        await w.apply(CONFIG)
        controller = w.start_controller("replica-1", database_url=proxy.url())
        await eventually(lambda: controller.term is not None, what="leading through the proxy")
        await w.create(job("before", gpus=4))
        await eventually(lambda: _running(w, "before"), what="a job admitted through the proxy")
        proxy.blackhole()
        await eventually(lambda: not controller.database.ok, timeout=6, what="the outage noticed")
        await eventually(lambda: controller.term is None, timeout=6, what="leadership given up")
        assert controller.readiness.ready(), "the webhook answers from memory: still ready"
        assert any(line.startswith("[-]database failed") for line in controller.readiness.report())
        await asyncio.sleep(3)  # the outage goes on: said once, not at every retry
        said = [r for r in caplog.records if "database unreachable" in r.getMessage()]
        assert len(said) == 1, [r.getMessage() for r in said]
        proxy.heal()
        await eventually(lambda: controller.term is not None, timeout=10, what="leading again after the outage")
        await w.create(job("after", gpus=4))
        await eventually(lambda: _running(w, "after"), timeout=10, what="scheduling again")
        assert any("database reachable again" in r.getMessage() for r in caplog.records)


async def test_a_black_hole_is_noticed_within_seconds_whatever_the_lease(tmp_path: Path, migrated_url: str) -> None:
    """With the install's 15 s lease, the lease's rounds alone noticed a black hole after ~9 s (and
    turnstile_database_up said 1 meanwhile); the configuration listener's ping says it within 3 s."""
    async with proxied(migrated_url) as proxy, world(tmp_path, migrated_url) as w:
        await w.apply(CONFIG)
        controller = w.start_controller("replica-1", database_url=proxy.url(), lease_ttl=15.0)
        await eventually(lambda: controller.term is not None, timeout=20, what="leading through the proxy")
        assert b"turnstile_database_up 1.0" in controller.metrics.render()
        proxy.blackhole()
        started = time.monotonic()
        await eventually(lambda: not controller.database.ok, timeout=10, what="the outage noticed")
        assert time.monotonic() - started < 3.5, "noticed within the listener's ping and its timeout"
        assert b"turnstile_database_up 0.0" in controller.metrics.render()
        proxy.heal()
        await eventually(lambda: controller.database.ok, timeout=10, what="the database seen again")


async def test_the_configuration_listener_comes_back_after_its_connection_is_killed(
    tmp_path: Path, migrated_url: str
) -> None:
    """A killed LISTEN connection is noticed and re-made: a quota raise reaches the scheduler in
    seconds, not at the next full resync (60 s)."""
    async with world(tmp_path, migrated_url) as w:
        await w.apply(CONFIG)  # 8 GPUs
        controller = w.start_controller("replica-1")
        await eventually(lambda: controller.term is not None, what="leading")
        await w.create(job("big", gpus=12))
        await eventually(lambda: _state(w, "big"), what="the big job queued")
        async with database.transaction(w.sessions) as s:
            await s.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            )
        await asyncio.sleep(0.3)
        await w.apply(CONFIG.replace('nominalQuota: "8"', 'nominalQuota: "16"'))
        await eventually(lambda: _running(w, "big"), timeout=6, what="the quota raise heard through a new LISTEN")


async def test_connections_killed_at_random_never_run_a_job_without_a_committed_admission(
    tmp_path: Path, migrated_url: str
) -> None:
    """pg_terminate_backend storms on the controller's connections during a busy run with
    preemptions: sampled every 50 ms, no job runs on an uncommitted admission, every admission is
    on the ledger, no quota is exceeded; at the end every job finished exactly once."""
    rng = random.Random(21)
    names = [f"storm-{i:02d}" for i in range(30)]
    async with world(tmp_path, migrated_url) as w:
        await w.apply(CONFIG)
        w.start_controller("replica-1", database_url=migrated_url)  # its own connections, named
        storm = books.Storm(w, rng, 0.05, 0.3)
        violations: list[str] = []

        async def sample() -> None:
            while True:
                violations.extend(await books.committed_admissions_only(w))
                await asyncio.sleep(0.05)

        async with books.invariants(w) as over_quota:
            tasks = [asyncio.create_task(storm.run()), asyncio.create_task(sample())]
            try:
                await books.submit(w, names, rng, runtime_scale=30)
                assert await eventually(
                    lambda: books.all_finished(w, len(names)), timeout=120, what="every job to finish"
                )
            finally:
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
        assert storm.kills >= 10, f"only {storm.kills} connections were killed"
        assert violations == []
        assert over_quota == []
        await books.finished_once(w, len(names))
