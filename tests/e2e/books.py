"""Helpers shared by the crash and resilience tests: a controller process, a busy run of jobs, and
both books sampled.

``invariants`` samples, every 20 ms until its block ends, the GPUs held by the pods that
exist in the simulated cluster and the GPUs held by admissions in PostgreSQL; any sample above
the quota is recorded as a violation.
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

from sqlalchemy import func, select, text

from admission.jobs.job_fields import ADMISSION_ANNOTATION
from admission.kube.client import KubeError
from admission.sim.operators import cluster as sim_cluster
from admission.store import database, tables
from queues import quantity
from tests.admission.controller.world import JOBS, World, job

QUOTA_GPUS = 8  # the nominal quota of tests.admission.controller.world.CONFIG


def pod_gpus(pod: dict[str, Any]) -> int:
    """A pod's GPUs: its containers' requests (a GPU limit stands for its request)."""
    spec = pod.get("spec") or {}
    total = 0
    for c in spec.get("containers") or []:
        resources = c.get("resources") or {}
        asked = (resources.get("requests") or {}).get("nvidia.com/gpu") or (resources.get("limits") or {}).get(
            "nvidia.com/gpu", "0"
        )
        total += quantity.parse_milli(str(asked))
    return total


async def controller_process(
    tmp: Path, kubeconfig: Path, url: str, n: int, *, lease_ttl: float = 1.0, log_level: str | None = None
) -> asyncio.subprocess.Process:
    """A real ``turnstile controller`` (lease TTL 1 s unless told), logging to ``tmp/controller-N.log``."""
    env = {**os.environ, "TURNSTILE_LEASE_TTL": str(lease_ttl), "TURNSTILE_HOME": str(tmp)}
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
        "--ui-port",
        "0",  # (several replicas on one host: each its own dashboard port)
        "--cert-dir",
        str(tmp / "certs"),
        "--shutdown-delay",
        "1",
        "--log-level",
        log_level or os.environ.get("CHAOS_LOG", "warning"),
        env=env,
        stdout=log,
        stderr=log,
    )


async def lease_token(w: World) -> int:
    """The scheduler lease's fencing token: the number of leadership terms so far (0: none yet)."""
    async with database.transaction(w.sessions) as s:
        return int((await s.execute(select(tables.LeaderLease.fencing_token))).scalar_one_or_none() or 0)


@contextlib.asynccontextmanager
async def invariants(w: World) -> AsyncIterator[list[str]]:
    """Sample both books until the block ends; the list collects every sample above the quota."""
    violations: list[str] = []
    stop = asyncio.Event()
    limit = QUOTA_GPUS * 1000

    async def sample() -> None:
        while not stop.is_set():
            pods = w.host.server.store.list(sim_cluster.PODS, "ml")[0]
            live = sum(pod_gpus(p) for p in pods if (p.get("status") or {}).get("phase") in ("Pending", "Running"))
            if live > limit:
                violations.append(f"cluster: pods hold {live // 1000} GPUs")
            async with database.transaction(w.sessions) as s:
                held = (await s.execute(select(func.coalesce(func.sum(tables.Admission.quantity), 0)))).scalar_one()
            if int(held) > limit:
                violations.append(f"store: admissions hold {int(held) // 1000} GPUs")
            await asyncio.sleep(0.02)

    task = asyncio.create_task(sample())
    try:
        yield violations
    finally:
        stop.set()
        await task


async def submit(
    w: World, names: list[str], rng: random.Random, *, runtime_scale: float = 1.0, pace: float = 0.06
) -> None:
    """Jobs of 2 or 4 GPUs, one every ``pace`` seconds on average, every fourth of high priority
    (so some preempt); ``runtime_scale`` stretches their runtimes."""
    for i, name in enumerate(names):
        high = i % 4 == 3
        obj = job(
            name,
            gpus=rng.choice([2, 4]),
            runtime=(rng.uniform(0.2, 0.5) if high else rng.uniform(0.5, 1.0)) * runtime_scale,
            priority="high" if high else None,
        )
        while True:  # the injected 500/429 hit this client too; retry as kubectl users do
            try:
                await w.create(obj)
                break
            except KubeError as exc:
                if exc.status == 409:
                    break
                if not exc.temporary:
                    raise
                await asyncio.sleep(0.05)
        await asyncio.sleep(rng.uniform(pace / 3, pace * 5 / 3))


async def all_finished(w: World, n: int) -> bool:
    async with database.transaction(w.sessions) as s:
        states = (await s.execute(select(tables.Workload.state))).scalars().all()
    return len(states) == n and all(state == "Finished" for state in states)


async def finished_once(w: World, n: int) -> None:
    async with database.transaction(w.sessions) as s:
        finished = (
            await s.execute(
                select(tables.WorkloadEvent.workload_id, func.count())
                .where(tables.WorkloadEvent.type == "Finished")
                .group_by(tables.WorkloadEvent.workload_id)
            )
        ).all()
        open_intervals = (
            await s.execute(select(func.count()).where(tables.UsageInterval.ended_at.is_(None)))
        ).scalar_one()
    assert len(finished) == n and all(count == 1 for _, count in finished)
    assert open_intervals == 0


class Storm:
    """``pg_terminate_backend`` of the controller's connections (``application_name``
    turnstile-controller) every ``low``-``high`` seconds, until cancelled; ``kills`` counts them."""

    def __init__(self, w: World, rng: random.Random, low: float, high: float) -> None:
        self.w, self.rng, self.low, self.high = w, rng, low, high
        self.kills = 0

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.rng.uniform(self.low, self.high))
            with contextlib.suppress(*database.ERRORS):
                async with database.transaction(self.w.sessions) as s:
                    killed = await s.execute(
                        text(
                            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                            "WHERE application_name = 'turnstile-controller'"
                        )
                    )
                    self.kills += int(killed.scalar_one())


async def committed_admissions_only(w: World) -> list[str]:
    """Every running job runs on an admission that was committed (its token is an Admitted event
    of its workload), and every admission in the store is on the ledger."""
    problems = []
    jobs = w.host.server.store.list(JOBS_RESOURCE, "ml")[0]
    running = [j for j in jobs if not j["spec"].get("suspend") and int((j.get("status") or {}).get("active") or 0)]
    try:
        async with database.transaction(w.sessions) as s:
            for j in running:
                token = (j["metadata"].get("annotations") or {}).get(ADMISSION_ANNOTATION)
                if token is None:
                    problems.append(f"{j['metadata']['name']} runs with no admission token")
                    continue
                cluster_queue, _, millis = token.rpartition("/")
                found = await s.execute(
                    text(
                        "SELECT count(*) FROM workload_events e JOIN workloads w ON w.id = e.workload_id "
                        "WHERE w.name = :n AND e.type = 'Admitted' AND e.cluster_queue = :cq "
                        "AND round(extract(epoch FROM e.at) * 1000) = :ms"
                    ),
                    {"n": j["metadata"]["name"], "cq": cluster_queue, "ms": int(millis)},
                )
                if found.scalar_one() == 0:
                    problems.append(f"{j['metadata']['name']} runs on admission {token}, never committed")
            unledgered = await s.execute(
                text(
                    "SELECT count(*) FROM admissions a WHERE NOT EXISTS (SELECT 1 FROM usage_ledger l "
                    "WHERE l.workload_id = a.workload_id AND l.ended_at IS NULL)"
                )
            )
            if unledgered.scalar_one():
                problems.append("an admission is not on the ledger")
    except database.ERRORS:
        pass  # the sampler's own read failed: look again next time
    return problems


JOBS_RESOURCE = next(r for r in sim_cluster.JOB_RESOURCES if r.plural == JOBS.plural)
