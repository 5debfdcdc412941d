"""High availability and a flaky API server: two replicas with a forced leader change, and every
fault the simulated cluster can inject (latency, 500/429, conflicts, dropped watches, 410 Gone),
with nothing lost and no quota ever exceeded."""

from __future__ import annotations

import asyncio
import random
import signal
import time
from collections.abc import Callable
from pathlib import Path

from admission.sim.server.faults import Faults
from tests.admission.controller.world import CONFIG, World, eventually, world
from tests.e2e import books


async def test_two_replicas_and_a_paused_leader_that_wakes_up(tmp_path: Path, migrated_url: str) -> None:
    """Two real replica processes; the leader is frozen (SIGSTOP) past its lease, the standby takes
    over, and when the old leader wakes (SIGCONT) its fenced writes fail and it steps down."""
    rng = random.Random(7)
    names = [f"ha-{i:02d}" for i in range(24)]
    async with world(tmp_path, migrated_url) as w:
        await w.apply(CONFIG)
        first = await books.controller_process(tmp_path, w.host.kubeconfig, migrated_url, 1)
        second: asyncio.subprocess.Process | None = None
        try:
            assert await eventually(lambda: books.lease_token(w), timeout=20, what="replica 1 to lead") == 1
            second = await books.controller_process(tmp_path, w.host.kubeconfig, migrated_url, 2)
            async with books.invariants(w) as violations:
                submitter = asyncio.create_task(books.submit(w, names, rng))
                await asyncio.sleep(1.0)
                first.send_signal(signal.SIGSTOP)  # a paused leader: no renewals, no writes
                await eventually(lambda: _is(w, 2), timeout=20, what="replica 2 to take over")
                await asyncio.sleep(0.5)
                first.send_signal(signal.SIGCONT)  # it wakes up believing it leads
                await submitter
                assert await eventually(
                    lambda: books.all_finished(w, len(names)), timeout=40, what="every job to finish"
                )
            assert violations == []
            await books.finished_once(w, len(names))
            assert await books.lease_token(w) == 2, "replica 2 kept the lease; the woken ex-leader did not take it back"

            def stepped_down() -> bool:  # the run can end moments after SIGCONT: give it the time
                woke = (tmp_path / "controller-1.log").read_text()
                return "no longer leading" in woke or "lost the scheduler lease" in woke

            await eventually(stepped_down, timeout=10, what="the woken ex-leader to step down")
        finally:
            for p in (first, second):
                if p is not None and p.returncode is None:
                    p.send_signal(signal.SIGCONT)
                    p.kill()
                    await p.wait()


async def _is(w: World, token: int) -> bool:
    return await books.lease_token(w) == token


async def test_api_faults_lose_nothing(tmp_path: Path, migrated_url: str) -> None:
    rng = random.Random(11)
    names = [f"fault-{i:02d}" for i in range(24)]
    faults = Faults(latency=0.002, error_rate=0.1, conflict_rate=0.1, seed=3)
    async with world(tmp_path, migrated_url, faults=faults) as w:
        await w.apply(CONFIG)
        controller = w.start_controller("replica-1")
        store = w.host.server.store
        chaos: list[Callable[[], None]] = [w.host.server.drop_watches, store.compact]

        async def disturb() -> None:
            while True:
                await asyncio.sleep(rng.uniform(0.2, 0.5))
                rng.choice(chaos)()

        async with books.invariants(w) as violations:
            disturber = asyncio.create_task(disturb())
            try:
                await books.submit(w, names, rng)
                assert await eventually(
                    lambda: books.all_finished(w, len(names)), timeout=60, what="every job to finish"
                )
            finally:
                disturber.cancel()
        assert violations == []
        await books.finished_once(w, len(names))
        informers = controller.informers
        assert sum(i.relists for i in informers) > len(informers), "410 Gone made the informers list again"
        assert sum(i.rewatches for i in informers) > 0, "dropped watches were resumed"


async def test_sigterm_hands_leadership_over_within_two_seconds(tmp_path: Path, migrated_url: str) -> None:
    """A rolling update's SIGTERM: the leader stops cleanly (readiness false, in-flight patches
    finished, lease released and announced), the standby leads within 2 s although the lease's
    TTL is 15 s, nothing is over-committed or lost, and the old process exits 0 well inside a
    pod's 30 s grace period."""
    rng = random.Random(5)
    names = [f"term-{i:02d}" for i in range(20)]
    async with world(tmp_path, migrated_url) as w:
        await w.apply(CONFIG)
        first = await books.controller_process(
            tmp_path, w.host.kubeconfig, migrated_url, 1, lease_ttl=15, log_level="info"
        )
        second: asyncio.subprocess.Process | None = None
        try:
            assert await eventually(lambda: books.lease_token(w), timeout=20, what="replica 1 to lead") == 1
            second = await books.controller_process(
                tmp_path, w.host.kubeconfig, migrated_url, 2, lease_ttl=15, log_level="info"
            )
            await eventually(
                lambda: "standing by" in (tmp_path / "controller-2.log").read_text(), timeout=20, what="2 to stand by"
            )
            async with books.invariants(w) as violations:
                submitter = asyncio.create_task(books.submit(w, names, rng))
                await asyncio.sleep(1.0)
                signalled = time.monotonic()
                first.send_signal(signal.SIGTERM)
                await eventually(lambda: _is(w, 2), timeout=5, what="replica 2 to lead")
                took = time.monotonic() - signalled
                assert took < 2.0, f"the standby led {took:.2f}s after the leader's SIGTERM"
                code = await asyncio.wait_for(first.wait(), 15)
                assert code == 0, (tmp_path / "controller-1.log").read_text()[-2000:]
                await submitter
                assert await eventually(
                    lambda: books.all_finished(w, len(names)), timeout=40, what="every job to finish"
                )
            assert violations == []
            await books.finished_once(w, len(names))
            stopped = (tmp_path / "controller-1.log").read_text()
            assert "released the scheduler lease" in stopped and "stopped" in stopped
            # (it ran, led and stopped with its collector set for a server: ``admission.app.collector``)
            assert "objects left out of the garbage collector's walks" in stopped
        finally:
            for p in (first, second):
                if p is not None and p.returncode is None:
                    p.kill()
                    await p.wait()
