"""Kueue's visibility API on the leading controller: pending workloads in order, with positions."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from admission.app import process
from admission.controller.controller import Controller
from admission.controller.objects import visibility
from tests.admission.controller.world import CONFIG, eventually, job, world
from tests.admission.runner import turnstile

BASE = "/apis/visibility.kueue.x-k8s.io/v1beta2"


@asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[str]:
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def get(url: str) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, await response.json()


async def test_pending_workloads_in_order_with_positions(tmp_path: Path, migrated_url: str) -> None:
    async with world(tmp_path, migrated_url) as w:
        await w.apply(CONFIG)  # team-a: 8 GPUs
        controller: Controller = w.start_controller("replica-1")
        await w.create(job("big", gpus=8))
        await eventually(lambda: _running(w, "big"), what="big to run")
        for name in ("b", "c", "d"):  # wait behind big, in order
            await w.create(job(name, gpus=4))
        app = process.ui_app(controller)
        async with serving(app) as url:

            async def three_pending() -> Any:
                status, body = await get(f"{url}{BASE}/clusterqueues/team-a/pendingworkloads")
                return body if status == 200 and len(body["items"]) == 3 else None

            body = await eventually(three_pending, what="three pending workloads")
            assert body["kind"] == "PendingWorkloadsSummary"
            assert body["apiVersion"] == BASE.removeprefix("/apis/"), "the version the path asked for"
            status, old = await get(
                f"{url}/apis/visibility.kueue.x-k8s.io/v1beta1/clusterqueues/team-a/pendingworkloads"
            )
            assert status == 200 and old["apiVersion"] == "visibility.kueue.x-k8s.io/v1beta1"
            items = body["items"]
            # named as kubectl and the aggregated API name the Workload objects: job-<name>-<uid prefix>
            uids = {n: (await w.get(n))["metadata"]["uid"] for n in ("b", "c", "d")}
            assert [i["metadata"]["name"] for i in items] == [f"job-{n}-{uids[n][:5]}" for n in ("b", "c", "d")]
            assert [i["positionInClusterQueue"] for i in items] == [0, 1, 2]
            assert [i["positionInLocalQueue"] for i in items] == [0, 1, 2]
            assert items[0]["localQueueName"] == "team-a" and items[0]["metadata"]["namespace"] == "ml"
            owner = items[0]["metadata"]["ownerReferences"][0]
            assert (owner["kind"], owner["name"]) == ("Job", "b")
            status, paged = await get(f"{url}{BASE}/namespaces/ml/localqueues/team-a/pendingworkloads?offset=1&limit=1")
            assert status == 200 and [i["metadata"]["name"] for i in paged["items"]] == [f"job-c-{uids['c'][:5]}"]
            status, missing = await get(f"{url}{BASE}/clusterqueues/nope/pendingworkloads")
            assert status == 404 and missing["kind"] == "Status" and "nope" in missing["message"]
            status, bad = await get(f"{url}{BASE}/clusterqueues/team-a/pendingworkloads?limit=0")
            assert status == 400 and "limit" in bad["message"]
    standby = web.Application()
    visibility.routes(standby, lambda: None, lambda _key: None)
    async with serving(standby) as url:
        status, body = await get(f"{url}{BASE}/clusterqueues/team-a/pendingworkloads")
        assert status == 503 and "does not lead" in body["message"]


async def _running(w: Any, name: str) -> bool:
    return (await w.get(name))["spec"]["suspend"] is False


async def test_describe_workload_answers_why_it_waits(tmp_path: Path, migrated_url: str) -> None:
    async with world(tmp_path, migrated_url) as w:
        await w.apply(CONFIG)  # team-a: 8 GPUs, lower priority preempted within the queue
        w.start_controller("replica-1")
        await w.create(job("big", gpus=8))
        await eventually(lambda: _running(w, "big"), what="big to run")
        for name in ("b", "c"):
            await w.create(job(name, gpus=4, priority="high" if name == "c" else None))
        await eventually(lambda: _running(w, "c"), what="c (high) to preempt big")
        env = {**os.environ, "TURNSTILE_DATABASE_URL": migrated_url, "TURNSTILE_HOME": str(tmp_path / "home")}

        async def described(name: str, *expected: str) -> str | None:
            done = await asyncio.to_thread(turnstile, "describe", "workload", f"ml/{name}", env=env)
            return done.stdout if done.returncode == 0 and all(e in done.stdout for e in expected) else None

        # big was preempted by c; b took the rest; big waits first in line for all 8 GPUs
        out = await eventually(lambda: described("big", "Ahead:", "History"), what="big described")
        assert "Position:      1 in its ClusterQueue" in out and "Ahead:         0 in ClusterQueue team-a" in out, out
        big_object = f"job-big-{(await w.get('big'))['metadata']['uid'][:5]}"  # (as kubectl shows it)
        assert f"its Workload object: {big_object}" in out, out
        assert await described(big_object, "Ahead:"), "describe finds a workload by its object's name too"
        listed = await asyncio.to_thread(turnstile, "get", "workloads", env=env)
        assert any(line.split()[1:3] == ["big", big_object] for line in listed.stdout.splitlines()), listed.stdout
        (needs,) = [line for line in out.splitlines() if line.startswith("│ nvidia.com/gpu")]
        assert needs.replace("│", " ").split() == ["nvidia.com/gpu", "8", "a100", "8", "8", "0", "-"], out
        history = out[out.index("History") :]
        assert history.index("Admitted") < history.index("Evicted"), out
        c_object = f"job-c-{(await w.get('c'))['metadata']['uid'][:5]}"
        assert f"Preempted InClusterQueue by ml/{c_object}" in history, out  # (named as kubectl names it)
        assert "Preemption:    none possible" in out, out  # b has its priority and c a higher one
