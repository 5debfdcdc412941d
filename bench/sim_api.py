"""Simulated API server figures: small requests per second, watch fan-out, memory per 10,000 Jobs."""

from __future__ import annotations

import asyncio
import json
import time
import tracemalloc

from aiohttp import ClientSession, web

from admission.sim.server import resources
from admission.sim.server.apiserver import ApiServer

CONFIGMAPS = next(r for r in resources.ALL if r.plural == "configmaps")
JOBS = next(r for r in resources.ALL if r.plural == "jobs")


async def _requests_per_second(base: str, seconds: float = 3.0, concurrency: int = 16) -> float:
    done = 0
    deadline = time.perf_counter() + seconds
    async with ClientSession() as session:

        async def worker() -> None:
            nonlocal done
            while time.perf_counter() < deadline:
                async with session.get(f"{base}/api/v1/namespaces/default/configmaps/small") as r:
                    await r.read()
                done += 1

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return done / (time.perf_counter() - start)


async def _fan_out(server: ApiServer, base: str, events: int = 3000, watchers: int = 3) -> float:
    received = [0] * watchers
    rv = server.store.rv
    async with ClientSession() as session:

        async def watch(i: int) -> None:
            url = f"{base}/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={rv}&timeoutSeconds=60"
            async with session.get(url) as r:
                async for line in r.content:
                    if json.loads(line)["type"] == "ADDED":
                        received[i] += 1
                        if received[i] == events:
                            return

        tasks = [asyncio.create_task(watch(i)) for i in range(watchers)]
        await asyncio.sleep(0.2)
        start = time.perf_counter()
        for n in range(events):
            server.store.create(
                CONFIGMAPS,
                "default",
                {"metadata": {"name": f"cm-{n}"}, "data": {"k": "v"}},
                namespaces=resources.NAMESPACES,
            )
            if n % 100 == 0:
                await asyncio.sleep(0)
        await asyncio.gather(*tasks)
        return sum(received) / (time.perf_counter() - start)


def _memory_per_jobs(n: int = 10_000) -> float:
    server = ApiServer()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for i in range(n):
        server.store.create(
            JOBS,
            "default",
            {
                "metadata": {"name": f"job-{i}", "labels": {"kueue.x-k8s.io/queue-name": "q"}},
                "spec": {
                    "suspend": True,
                    "parallelism": 2,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [
                                {
                                    "name": "c",
                                    "image": "nvcr.io/nvidia/pytorch:24.01-py3",
                                    "resources": {"requests": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "4"}},
                                }
                            ],
                        }
                    },
                },
            },
            namespaces=resources.NAMESPACES,
        )
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return used / 2**20


async def _run() -> None:
    server = ApiServer()
    server.store.create(
        CONFIGMAPS, "default", {"metadata": {"name": "small"}, "data": {"a": "b"}}, namespaces=resources.NAMESPACES
    )
    runner = web.AppRunner(server.app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    base = f"http://127.0.0.1:{port}"
    try:
        rps = await _requests_per_second(base)
        print(f"  small GETs (16 concurrent clients, same process): {rps:8,.0f} requests/s   (target >= 2,000)")
        eps = await _fan_out(server, base)
        print(f"  watch fan-out to 3 watchers:                       {eps:8,.0f} events/s     (target >= 5,000)")
    finally:
        await runner.cleanup()


def main() -> None:
    print("\n[simulated API server]")
    asyncio.run(_run())
    print(f"  memory for 10,000 stored Jobs:                     {_memory_per_jobs():8.1f} MiB")
