"""Crash safety: SIGKILL the controller at random moments of a busy run, restart it, and check
that nothing was lost, nothing admitted twice, and no quota ever exceeded (DESIGN principles 2-3).

The controller runs as a real ``turnstile controller`` process against the simulated cluster
(over HTTP) and PostgreSQL. Jobs arrive throughout (created suspended, as the webhook would),
some of high priority so that preemptions happen too. Throughout the run a sampler checks
both books: the admissions in PostgreSQL and the GPUs of the pods that exist in the cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from admission.kube import client as kube_client
from admission.sim import cluster as sim_cluster
from admission.sim.host import SimHost
from admission.store import database, tables
from queues import quantity
from tests.admission.controller.world import CONFIG, World, job

QUOTA_GPUS = 8
KILLS = int(os.environ.get("CHAOS_KILLS", "10"))


def _pod_gpus(pod: dict[str, Any]) -> int:
    spec = pod.get("spec") or {}
    return sum(
        quantity.parse_milli(str(((c.get("resources") or {}).get("requests") or {}).get("nvidia.com/gpu", "0")))
        for c in spec.get("containers") or []
    )


async def _controller(tmp: Path, kubeconfig: Path, url: str, n: int) -> asyncio.subprocess.Process:
    env = {**os.environ, "TURNSTILE_LEASE_TTL": "1.0", "TURNSTILE_HOME": str(tmp)}
    log = open(tmp / f"controller-{n}.log", "wb")  # noqa: SIM115 - the process owns it
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "from admission.cli.main import main; main()",
        "controller",
        "--kubeconfig",
        str(kubeconfig),
        "--database-url",
        url,
        "--webhook-port",
        "0",
        "--metrics-port",
        "0",
        "--cert-dir",
        str(tmp / "certs"),
        "--log-level",
        os.environ.get("CHAOS_LOG", "warning"),
        env=env,
        stdout=log,
        stderr=log,
    )


@contextlib.asynccontextmanager
async def _world(tmp: Path, url: str) -> AsyncIterator[World]:
    host = await SimHost.start(tmp / "kubeconfig", time_scale=1.0)
    kube = kube_client.Kube(await kube_client.connect(host.kubeconfig))
    engine = database.make_engine(url)
    try:
        await kube.create(kube_client.NAMESPACES, None, {"metadata": {"name": "ml"}})
        w = World(host, kube, database.sessions(engine), url, [])
        await w.apply(CONFIG)
        yield w
    finally:
        await kube.close()
        await engine.dispose()
        await host.stop()


async def test_sigkill_at_random_moments_loses_nothing_and_never_over_commits(
    tmp_path: Path, migrated_url: str
) -> None:
    async with _world(tmp_path, migrated_url) as w:
        await _chaos(w, tmp_path, migrated_url)


async def _chaos(w: World, tmp_path: Path, migrated_url: str) -> None:
    rng = random.Random(20261130)
    host = w.host
    store = host.server.store
    violations: list[str] = []
    names = [f"job-{i:02d}" for i in range(32)]
    stop = asyncio.Event()

    async def sample() -> None:
        while not stop.is_set():
            pods = store.list(sim_cluster.PODS, "ml")[0]
            live = sum(_pod_gpus(p) for p in pods if (p.get("status") or {}).get("phase") in ("Pending", "Running"))
            if live > QUOTA_GPUS * 1000:
                violations.append(f"cluster: pods hold {live // 1000} GPUs")
            async with database.transaction(w.sessions) as s:
                held = (await s.execute(select(func.coalesce(func.sum(tables.Admission.quantity), 0)))).scalar_one()
            if int(held) > QUOTA_GPUS * 1000:
                violations.append(f"store: admissions hold {int(held) // 1000} GPUs")
            await asyncio.sleep(0.02)

    async def submit() -> None:
        # Long low-priority work keeps the queue full; every fourth job is short and high
        # priority, so it preempts.
        for i, name in enumerate(names):
            high = i % 4 == 3
            runtime = rng.uniform(0.3, 0.6) if high else rng.uniform(2.0, 3.0)
            await w.create(job(name, gpus=rng.choice([2, 4]), runtime=runtime, priority="high" if high else None))
            await asyncio.sleep(rng.uniform(0.05, 0.25))

    async def leading(term: int) -> None:
        for _ in range(600):
            async with database.transaction(w.sessions) as s:
                token = (await s.execute(select(tables.LeaderLease.fencing_token))).scalar_one_or_none()
            if token is not None and token >= term:
                return
            await asyncio.sleep(0.02)
        raise AssertionError(f"controller {term} never became the leader")

    procs = [await _controller(tmp_path, host.kubeconfig, migrated_url, 0)]
    sampler = asyncio.create_task(sample())
    submitter = asyncio.create_task(submit())
    try:
        for n in range(1, KILLS + 1):
            await leading(n)  # kill leaders, not processes still starting up
            await asyncio.sleep(rng.uniform(0.3, 1.5))
            procs[-1].kill()  # SIGKILL: no cleanup, the lease is left to expire
            await procs[-1].wait()
            procs.append(await _controller(tmp_path, host.kubeconfig, migrated_url, n))
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
                            tables.Workload.name, tables.Workload.state, tables.Workload.reason, tables.Workload.message
                        )
                    )
                ).all()
            raise AssertionError(f"not every job finished after the crashes: {[tuple(r) for r in rows]}")
    finally:
        stop.set()
        await sampler
        submitter.cancel()
        for p in procs:
            if p.returncode is None:
                p.kill()
                await p.wait()
    assert len(procs) == KILLS + 1
    async with database.transaction(w.sessions) as s:
        token = (await s.execute(select(tables.LeaderLease.fencing_token))).scalar_one()
    assert token >= KILLS, "each killed controller was leading when it was killed"
    assert violations == []
    async with database.transaction(w.sessions) as s:
        events = (await s.execute(select(tables.WorkloadEvent.workload_id, tables.WorkloadEvent.type))).all()
        open_intervals = (
            await s.execute(select(func.count()).where(tables.UsageInterval.ended_at.is_(None)))
        ).scalar_one()
        admissions = (await s.execute(select(func.count()).select_from(tables.Admission))).scalar_one()
    per: dict[int, dict[str, int]] = {}
    for wid, kind in events:
        per.setdefault(wid, {}).setdefault(kind, 0)
        per[wid][kind] += 1
    assert len(per) == len(names)
    assert sum(c.get("Evicted", 0) for c in per.values()) >= 3, "the run exercised preemption"
    for counts in per.values():
        assert counts.get("Finished") == 1, counts  # finished exactly once
        assert counts.get("Admitted", 0) == counts.get("Evicted", 0) + 1, counts  # never admitted twice at once
    assert (open_intervals, admissions) == (0, 0)
    # Every job completed in the cluster, and none is left suspended or running unadmitted.
    for name in names:
        obj = await w.get(name)
        assert any(c["type"] == "Complete" and c["status"] == "True" for c in obj["status"]["conditions"]), name
