"""Database chaos at length (``python -m bench chaos``): faults between the controller and PostgreSQL
during a busy run, and the invariants that must hold through all of them.

The longer sibling of ``tests/e2e/test_database_faults.py`` (which runs in ``make test`` at a size
that fits the time budget). A controller runs against the simulated cluster with its own
connections, named ``turnstile-controller``, through a TCP proxy; meanwhile:

- ``pg_terminate_backend`` kills its connections at random every 0.3-1.5 s;
- every 8 s the proxy cuts every connection (a failover), every 11 s it black-holes them for 1 s;
- jobs of 2 and 4 GPUs arrive on an 8-GPU queue, the low-priority ones long and the high-priority
  ones (every fourth) short, so high-priority arrivals find the quota held and preempt.

Sampled every 50 ms: no job runs on an admission that was never committed, every admission is
on the ledger, the GPUs held (pods in the cluster, admissions in the store) never exceed the
quota. At the end every job has finished exactly once. Figures printed: faults injected, jobs,
terms rebuilt, invariant violations (must be 0), wall time.
"""

from __future__ import annotations

import asyncio
import random
import tempfile
import time
from pathlib import Path

from sqlalchemy import text

from admission.store import database, embedded
from tests.admission.controller.world import CONFIG, world
from tests.e2e import books
from tests.e2e.dbproxy import proxied

JOBS = 200


async def _run(workdir: Path) -> None:
    server = await asyncio.to_thread(embedded.start, workdir / "pg", database="chaos", cleanup="delete")
    await database.upgrade(server)
    rng = random.Random(2026)
    names = [f"chaos-{i:03d}" for i in range(JOBS)]
    started = time.monotonic()
    async with proxied(server) as proxy, world(workdir, server) as w:
        await w.apply(CONFIG)
        controller = w.start_controller("chaos", database_url=proxy.url())
        storm = books.Storm(w, rng, 0.3, 1.5)
        cuts, holes = 0, 0
        violations: list[str] = []

        async def network() -> None:
            nonlocal cuts, holes
            tick = 0
            while True:
                await asyncio.sleep(1.0)
                tick += 1
                if tick % 8 == 0:
                    proxy.cut()
                    cuts += 1
                    await asyncio.sleep(0.2)
                    proxy.heal()
                if tick % 11 == 0:
                    proxy.blackhole()
                    holes += 1
                    await asyncio.sleep(1.0)
                    proxy.heal()

        async def sample() -> None:
            while True:
                violations.extend(await books.committed_admissions_only(w))
                await asyncio.sleep(0.05)

        async with books.invariants(w) as over_quota:
            tasks = [asyncio.create_task(f()) for f in (storm.run, network, sample)]
            try:
                await books.submit(w, names, rng, runtime_scale=60, pace=0.15)
                deadline = time.monotonic() + 900
                while not await books.all_finished(w, JOBS) and time.monotonic() < deadline:
                    await asyncio.sleep(0.5)
            finally:
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                proxy.heal()
        finished = await books.all_finished(w, JOBS)
        once = True
        try:
            await books.finished_once(w, JOBS)
        except AssertionError:
            once = False
        async with database.transaction(w.sessions) as s:
            evictions = (
                await s.execute(text("SELECT count(*) FROM workload_events WHERE type = 'Evicted'"))
            ).scalar_one()
        token = await books.lease_token(w)
        print(
            f"chaos: {JOBS} jobs ({'all finished once' if finished and once else 'NOT all finished once'}), "
            f"{evictions} preemptions, {time.monotonic() - started:.0f} s"
        )
        print(
            f"  faults injected: {storm.kills} connections killed, {cuts} cuts, {holes} one-second black holes; "
            f"terms begun: {controller.terms_begun} (a failed step rebuilds the term from the store), "
            f"leadership changes: {token - 1}"
        )
        print(
            f"  invariant violations: {len(violations)} jobs on uncommitted admissions or admissions off the "
            f"ledger, {len(over_quota)} samples over quota (all must be 0)"
        )


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="turnstile-chaos-") as tmp:
        asyncio.run(_run(Path(tmp)))
