"""Idle reclaim's utilisation pass at scale: 10,000 running GPU pods, read through a real Prometheus.

A dcgm-exporter-shaped page with one GPU per pod (``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` and
``DCGM_FI_DEV_GPU_UTIL``: 20,000 series, labelled as through a ServiceMonitor) is scraped by
Debian's ``prometheus`` every second; once a window's samples are in, one pass is timed as the
controller runs it (``admission.controller.features.utilisation.Prometheus.read``: both queries, the
answers parsed and joined to pods) and then the join of every pod to its workload (1,250
workloads of 8 pods) as ``Reading.mean`` does it. Goal: one pass under 1 s.

The page also has each GPU's memory (``DCGM_FI_DEV_FB_USED``/``_FB_FREE``): the ledger's read
(``with_memory``, right-sizing) is timed too. Then the end-of-run measurement: once Prometheus
holds a minute of samples, 10,000 runs (one per pod, 20 to 60 s long, all ended within that
minute) are measured whole as the leader does when they end (``Prometheus.measure``: range
queries batched by length, the pods named in POSTed queries), and the figures checked against
what the page served.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import tempfile
import time
from pathlib import Path

from aiohttp import web

from admission.controller.features.utilisation import Prometheus, RunWindow, batches
from admission.sim.prometheus import binary, running

PODS = 10_000
PER_WORKLOAD = 8
WINDOW = 5.0


def _page() -> str:
    lines = []
    series = (
        ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", lambda i: (i % 100) / 100),
        ("DCGM_FI_DEV_GPU_UTIL", lambda i: float(i % 100)),
        ("DCGM_FI_DEV_FB_USED", lambda i: float(1024 * (1 + i % 70))),  # MiB: 1 to 70 GiB
        ("DCGM_FI_DEV_FB_FREE", lambda i: float(81920 - 1024 * (1 + i % 70))),
    )
    for name, value_of in series:
        lines.append(f"# TYPE {name} gauge")
        for i in range(PODS):
            value = value_of(i)
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
                t0 = time.time()
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
                    memory_reads = []
                    for _ in range(3):
                        started = time.perf_counter()
                        reading = await prometheus.read(WINDOW, with_memory=True)
                        memory_reads.append(time.perf_counter() - started)
                        assert len(reading.memory) == PODS, len(reading.memory)
                    ended = await _ended_runs(prometheus, t0)
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
    print(
        f"the ledger's read with GPU memory (5 queries), {PODS:,} GPU pods: p50 "
        f"{statistics.median(memory_reads) * 1000:.0f} ms, max {max(memory_reads) * 1000:.0f} ms"
    )
    took, queries = ended
    print(
        f"end-of-run measurement: {PODS:,} runs of 20-60 s ended within a minute, measured whole in {queries} "
        f"range queries: {took:.2f} s"
    )


RUN_SECONDS = 60.0  # the minute the runs end in


async def _ended_runs(prometheus: Prometheus, t0: float) -> tuple[float, int]:
    """10,000 runs (one per pod) of 20 to 60 s that ended in the last minute, measured whole;
    their means checked against the page's values. Returns (seconds taken, queries asked)."""
    await asyncio.sleep(max(0.0, t0 + RUN_SECONDS + 10 - time.time()))  # (a minute of samples, and the next)
    now = time.time() - 2
    runs = []
    for i in range(PODS):
        until = now - (i % 30)
        since = max(t0 + 1, until - 20 - (i % 41))
        runs.append(RunWindow(i, frozenset({("ml", f"job-{i // PER_WORKLOAD}-{i % PER_WORKLOAD}")}), since, until))
    queries = 4 * len(batches(runs))
    started = time.perf_counter()
    found = await prometheus.measure(runs)
    took = time.perf_counter() - started
    assert len(found) == PODS, len(found)
    for i, figures in found.items():
        assert figures.busy is not None and abs(figures.busy - (i % 100) / 100) < 1e-9, (i, figures)
        assert figures.memory is not None and figures.memory.peak_mib == 1024 * (1 + i % 70), (i, figures)
    return took, queries


def main() -> None:
    if binary() is None:
        print("utilisation: prometheus is not on PATH (apt-get install prometheus); skipped")
        return
    asyncio.run(_run())


if __name__ == "__main__":
    main()
