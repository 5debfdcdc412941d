"""The dashboard at scale: 1,000 ClusterQueues and 100,000 pending workloads.

PostgreSQL is filled as ``bench store`` fills it (1,000 ClusterQueues in 20 cohorts; 100,000
pending workloads spread over the queues), the dashboard is served as a replica serves it
(``admission.ui.server.Dashboard`` on loopback), and headless Chromium (Playwright) opens it:
first paint is the time from navigation until every ClusterQueue card of the tree is on screen,
and the pending view's until its first page of 50 rows is. The JSON answers are timed alone too.
Goal: first paint under 1 s.
"""

from __future__ import annotations

import asyncio
import shutil
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path

from aiohttp import web
from sqlalchemy import text

from admission.store import config as config_store
from admission.store import database, embedded
from admission.store import workloads as store
from admission.ui.server import Dashboard
from bench.store import _cq, _records

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
QUEUES, PENDING = 1000, 100_000


async def _fill(url: str) -> None:
    engine = database.make_engine(url)
    try:
        factory = database.sessions(engine)
        async with database.transaction(factory) as s:
            await config_store.apply(s, [_cq(i) for i in range(QUEUES)], actor="bench")
        for offset in range(0, PENDING, 10_000):
            async with database.transaction(factory) as s:
                await store.upsert(s, _records(10_000, offset))
        async with database.transaction(factory) as s:
            await s.execute(
                text(
                    "UPDATE workloads SET cluster_queue = 'cq-' || lpad((id % 1000)::text, 4, '0'),"
                    " reason = 'WaitingForQuota', message = 'waiting for 1 nvidia.com/gpu in ClusterQueue'"
                )
            )
    finally:
        await engine.dispose()


def _timed_get(url: str) -> float:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=30) as response:
        response.read()
    return time.perf_counter() - started


async def _run(url: str) -> None:
    await _fill(url)
    engine = database.make_engine(url)
    app = web.Application()
    Dashboard(database.sessions(engine)).routes(app)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    base = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        api = {}
        for path in ("/ui/api/overview", "/ui/api/pending?queue=cq-0500&offset=0&limit=50"):
            await asyncio.to_thread(_timed_get, base + path)  # (warm)
            api[path] = statistics.median([await asyncio.to_thread(_timed_get, base + path) for _ in range(5)])
        paints: list[float] = []
        pending_paints: list[float] = []
        if CHROMIUM is not None:
            from playwright.async_api import async_playwright

            async with async_playwright() as p:
                browser = await p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
                page = await browser.new_page(viewport={"width": 1280, "height": 800})
                for _ in range(3):
                    started = time.perf_counter()
                    await page.goto(f"{base}/ui/#queues")
                    await page.wait_for_function(f"document.querySelectorAll('.cq').length === {QUEUES}")
                    paints.append(time.perf_counter() - started)
                    started = time.perf_counter()
                    await page.goto(f"{base}/ui/#pending?queue=cq-0500")
                    await page.wait_for_function("document.querySelectorAll('#pending-table tbody tr').length === 50")
                    pending_paints.append(time.perf_counter() - started)
                await browser.close()
    finally:
        await runner.cleanup()
        await engine.dispose()
    print(
        f"  JSON: overview of {QUEUES:,} ClusterQueues {api['/ui/api/overview'] * 1000:.0f} ms, "
        f"a page of 50 of {PENDING // QUEUES} pending in one queue "
        f"{api['/ui/api/pending?queue=cq-0500&offset=0&limit=50'] * 1000:.0f} ms (medians of 5)"
    )
    if paints:
        print(
            f"  first paint in Chromium: all {QUEUES:,} ClusterQueue cards {min(paints) * 1000:.0f} ms "
            f"(best of 3; worst {max(paints) * 1000:.0f} ms), the pending view's first page "
            f"{min(pending_paints) * 1000:.0f} ms; {PENDING:,} pending in all (goal: first paint under 1 s)"
        )
    else:
        print("  first paint: chromium is not on PATH; skipped")


def main() -> None:
    print("\n[dashboard]")
    url = embedded.start(Path(tempfile.mkdtemp(prefix="turnstile-bench-")) / "pg", cleanup="delete")
    database.upgrade_sync(url)
    asyncio.run(_run(url))


if __name__ == "__main__":
    main()
