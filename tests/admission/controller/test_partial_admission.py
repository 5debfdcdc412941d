"""Partial admission through the controller: a Job with job-min-parallelism starts with the pods that
fit, and gets its parallelism back when it is evicted (the webhook's refusals: tests/e2e/test_job_kinds.py)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from sqlalchemy import select

from admission.store import database, tables
from queues.podsets import jobs
from tests.admission.controller.world import CONFIG, JOBS, eventually, job, world
from tests.admission.runner import turnstile


def elastic(name: str, parallelism: int, minimum: str) -> dict[str, Any]:
    obj = job(name, gpus=1)
    obj["spec"].update(parallelism=parallelism, completions=parallelism)
    obj["metadata"]["annotations"][jobs.MIN_PARALLELISM] = minimum
    return obj


async def test_a_job_starts_with_the_pods_that_fit_and_gets_its_parallelism_back_when_evicted(
    tmp_path: Path, migrated_url: str
) -> None:
    async with world(tmp_path, migrated_url) as w:
        await w.apply(CONFIG)
        w.start_controller("replica-1")
        await w.create(job("first", gpus=5))
        await eventually(lambda: _running(w, "first"), what="the first job running")
        await w.create(elastic("elastic", 6, "2"))

        async def started() -> dict[str, Any] | None:
            current = await w.kube.get(JOBS, "ml", "elastic")
            return None if current["spec"]["suspend"] else current

        running = await eventually(started, what="the elastic job started partially")
        assert running["spec"]["parallelism"] == 3, "the 3 GPUs left, not the 6 it asks for"
        assert running["spec"]["completions"] == 6, "completions untouched (not an elastic indexed job)"
        async with database.transaction(w.sessions) as s:
            row = (await s.execute(select(tables.Workload).where(tables.Workload.name == "elastic"))).scalar_one()
            held = (
                await s.execute(select(tables.Admission).where(tables.Admission.workload_id == row.id))
            ).scalar_one()
        assert row.assigned_flavors is not None and row.assigned_flavors["counts"] == {"main": 3}
        assert held.quantity == 3000
        assert row.pod_sets["podSets"][0]["count"] == 6, "the workload keeps the job's own count"
        env = {**os.environ, "TURNSTILE_DATABASE_URL": migrated_url}
        described = await asyncio.to_thread(turnstile, "describe", "workload", "ml/elastic", env=env)
        assert described.returncode == 0, described.stderr
        assert "Pods:          main: 3 of 6 (partial), at least 2" in described.stdout
        got = await asyncio.to_thread(turnstile, "get", "workload", "ml/elastic", "-o", "json", env=env)
        (assignment,) = json.loads(got.stdout)["status"]["admission"]["podSetAssignments"]
        assert (assignment["count"], assignment["resourceUsage"]) == (3, {"nvidia.com/gpu": "3"})

        await w.create(job("urgent", gpus=8, priority="high"))

        async def restored() -> dict[str, Any] | None:
            current = await w.kube.get(JOBS, "ml", "elastic")
            return current if current["spec"]["suspend"] and current["spec"]["parallelism"] == 6 else None

        await eventually(restored, timeout=15, what="the evicted job suspended with its parallelism restored")
        await eventually(lambda: _running(w, "urgent"), what="the preemptor running")


async def _running(w: Any, name: str) -> bool:
    return not (await w.kube.get(JOBS, "ml", name))["spec"]["suspend"]
