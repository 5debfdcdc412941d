"""Idle reclaim's utilisation pass at scale: 10,000 running GPU pods, read through a real Prometheus.

A dcgm-exporter-shaped page with one GPU per pod (``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` and
``DCGM_FI_DEV_GPU_UTIL``: 20,000 series, labelled as through a ServiceMonitor) is scraped by
Debian's ``prometheus`` every second; once a window's samples are in, one pass is timed as the
controller runs it (``admission.controller.utilisation.Prometheus.read``: both queries, the
answers parsed and joined to pods) and then the join of every pod to its workload (1,250
workloads of 8 pods) as ``Reading.mean`` does it. Goal: one pass under 1 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import tempfile
import time
from pathlib import Path

from aiohttp import web

from admission.controller.utilisation import Prometheus
from tests.prometheus import BINARY, running

PODS = 10_000
PER_WORKLOAD = 8
WINDOW = 5.0


def _page() -> str:
    lines = []
    for name, scale in (("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 1.0), ("DCGM_FI_DEV_GPU_UTIL", 100.0)):
        lines.append(f"# TYPE {name} gauge")
        for i in range(PODS):
            value = (i % 100) / 100 * scale
            lines.append(
                f'{name}{{gpu="{i % 8}",UUID="GPU-{i:08d}",Hostname="node-{i // 8}",container="train",'
                f'namespace="ml",pod="job-{i // PER_WORKLOAD}-{i % PER_WORKLOAD}"}} {value}'
            )
    return "\n".join(lines) + "\n"


async def _run() -> None:
    page = _page()

    async def serve(_request: web.Request) -> web.Response:
        return web.Response(text=page, content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", serve)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            async with running(Path(tmp), f"127.0.0.1:{port}", "/metrics", honor_labels=False) as url:
                await asyncio.sleep(WINDOW + 2)  # a window's scrapes
                prometheus = Prometheus(url, timeout=30)
                passes, joins = [], []
                workloads = [[("ml", f"job-{w}-{k}") for k in range(PER_WORKLOAD)] for w in range(PODS // PER_WORKLOAD)]
                try:
                    for _ in range(5):
                        started = time.perf_counter()
                        reading = await prometheus.read(WINDOW)
                        passes.append(time.perf_counter() - started)
                        started = time.perf_counter()
                        known = sum(1 for pods in workloads if reading.mean(pods) is not None)
                        joins.append(time.perf_counter() - started)
                        assert len(reading.by_pod) == PODS and known == len(workloads), (len(reading.by_pod), known)
                finally:
                    await prometheus.close()
    finally:
        with contextlib.suppress(Exception):
            await runner.cleanup()
    print(
        f"utilisation pass, {PODS:,} GPU pods ({2 * PODS:,} series) through Prometheus: "
        f"query + parse + join to pods p50 {statistics.median(passes) * 1000:.0f} ms, max {max(passes) * 1000:.0f} ms; "
        f"join to {len(workloads):,} workloads {statistics.median(joins) * 1000:.1f} ms (goal: under 1 s)"
    )


def main() -> None:
    if BINARY is None:
        print("utilisation: prometheus is not on PATH (apt-get install prometheus); skipped")
        return
    asyncio.run(_run())


if __name__ == "__main__":
    main()
