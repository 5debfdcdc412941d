"""Crash safety: SIGKILL the controller at random moments of a busy run, restart it, and check
that nothing was lost, nothing admitted twice, and no quota ever exceeded (DESIGN principles 2-3).

The controller runs as a real ``turnstile controller`` process against the simulated cluster
(over HTTP) and PostgreSQL. Jobs arrive throughout (created suspended, as the webhook would),
some of high priority so that preemptions happen too. Throughout the run a sampler checks
both books: the admissions in PostgreSQL and the GPUs of the pods that exist in the cluster.
"""

from __future__ import annotations

import asyncio
import os
import random
from pathlib import Path

from sqlalchemy import func, select

from admission.sim.operators import cluster as sim_cluster
from admission.store import database, tables
from tests.admission.controller.world import CONFIG, World, job, world
from tests.e2e import books

KILLS = int(os.environ.get("CHAOS_KILLS", "10"))


async def test_sigkill_at_random_moments_loses_nothing_and_never_over_commits(
    tmp_path: Path, migrated_url: str
) -> None:
    async with world(tmp_path, migrated_url, time_scale=1.0) as w:
        await w.apply(CONFIG)
        await _chaos(w, tmp_path, migrated_url)


async def _chaos(w: World, tmp_path: Path, migrated_url: str) -> None:
    rng = random.Random(20261130)
    host = w.host
    names = [f"job-{i:02d}" for i in range(32)]

    highs = {name for i, name in enumerate(names) if i % 4 == 3}

    def low_gpus_running() -> int:
        pods = host.server.store.list(sim_cluster.PODS, "ml")[0]
        return sum(
            books.pod_gpus(p)
            for p in pods
            if (p.get("status") or {}).get("phase") in ("Pending", "Running")
            and "deletionTimestamp" not in p["metadata"]  # an evicted job's pods are leaving
            and p["metadata"]["labels"].get("job-name") not in highs
        )

    async def submit() -> None:
        # Long low-priority work keeps the queue full. Every fourth job is short, high priority
        # and asks for the whole quota, and it is created only once low-priority pods hold the
        # whole quota: each one must preempt, whichever controller is leading by then (low jobs
        # run far longer than a controller takes to restart).
        for name in names:
            if name in highs:
                for _ in range(1500):
                    if low_gpus_running() >= books.QUOTA_GPUS * 1000:
                        break
                    await asyncio.sleep(0.02)
                else:
                    raise AssertionError(f"low-priority pods never held the whole quota before {name}")
                await w.create(job(name, gpus=books.QUOTA_GPUS, runtime=rng.uniform(0.3, 0.6), priority="high"))
            else:
                await w.create(job(name, gpus=rng.choice([2, 4]), runtime=rng.uniform(3.0, 5.0)))
            await asyncio.sleep(rng.uniform(0.05, 0.25))

    async def leading(term: int) -> None:
        for _ in range(600):
            if await books.lease_token(w) >= term:
                return
            await asyncio.sleep(0.02)
        raise AssertionError(f"controller {term} never became the leader")

    procs = [await books.controller_process(tmp_path, host.kubeconfig, migrated_url, 0)]
    submitter = asyncio.create_task(submit())
    async with books.invariants(w) as violations:
        try:
            for n in range(1, KILLS + 1):
                await leading(n)  # kill leaders, not processes still starting up
                await asyncio.sleep(rng.uniform(0.3, 1.5))
                procs[-1].kill()  # SIGKILL: no cleanup, the lease is left to expire
                await procs[-1].wait()
                procs.append(await books.controller_process(tmp_path, host.kubeconfig, migrated_url, n))
            await submitter

            async def all_finished() -> bool:
                async with database.transaction(w.sessions) as s:
                    rows = dict((await s.execute(select(tables.Workload.name, tables.Workload.state))).all())
                return len(rows) == len(names) and all(state == "Finished" for state in rows.values())

            for _ in range(1500):
                if await all_finished():
                    break
                await asyncio.sleep(0.05)
            if not await all_finished():
                async with database.transaction(w.sessions) as s:
                    rows = (
                        await s.execute(
                            select(
                                tables.Workload.name,
                                tables.Workload.state,
                                tables.Workload.reason,
                                tables.Workload.message,
                            )
                        )
                    ).all()
                raise AssertionError(f"not every job finished after the crashes: {[tuple(r) for r in rows]}")
        finally:
            submitter.cancel()
            for p in procs:
                if p.returncode is None:
                    p.kill()
                    await p.wait()
    assert len(procs) == KILLS + 1
    token = await books.lease_token(w)
    assert token >= KILLS, "each killed controller was leading when it was killed"
    assert violations == []
    async with database.transaction(w.sessions) as s:
        events = (
            await s.execute(
                select(tables.WorkloadEvent.workload_id, tables.WorkloadEvent.type).order_by(tables.WorkloadEvent.id)
            )
        ).all()
        open_intervals = (
            await s.execute(select(func.count()).where(tables.UsageInterval.ended_at.is_(None)))
        ).scalar_one()
        admissions = (await s.execute(select(func.count()).select_from(tables.Admission))).scalar_one()
    per: dict[int, list[str]] = {}
    for wid, kind in events:
        per.setdefault(wid, []).append(kind)
    assert len(per) == len(names)
    assert sum(seq.count("Evicted") for seq in per.values()) >= len(highs), "every high-priority job preempted"
    for seq in per.values():
        assert seq.count("Finished") == 1 and seq[-1] == "Finished", seq  # finished exactly once, and last
        # Never admitted twice at once: admissions and evictions alternate, from an admission. It may
        # end evicted: a job can complete while its eviction is being enacted (its controller killed
        # between committing the eviction and suspending the job).
        assert all(kind == ("Admitted", "Evicted")[i % 2] for i, kind in enumerate(seq[:-1])), seq
    assert (open_intervals, admissions) == (0, 0)
    # Every job completed in the cluster, and none is left suspended or running unadmitted.
    for name in names:
        obj = await w.get(name)
        assert any(c["type"] == "Complete" and c["status"] == "True" for c in obj["status"]["conditions"]), name
