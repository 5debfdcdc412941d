"""The dashboard in a real browser: headless Chromium (Debian's package) driven by Playwright,
against a controller on the simulated cluster with queues and jobs.

The page loads without console errors, shows the cohort tree with quota bars and a pending job
with its position and reason, updates by itself when that job is admitted, shows a workload's
timeline, reconnects after its server restarts, and shows hostile text as text. With
``TURNSTILE_UPDATE_SCREENSHOTS=1`` the screenshots docs/dashboard.md shows are written to
``docs/images``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from admission.app import process
from admission.controller.controller import Controller
from tests.admission.controller.world import JOBS, World, eventually, job, world
from tests.e2e.test_install import free_port

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
playwright_api = pytest.importorskip(
    "playwright.async_api", reason="playwright is not installed (pip install -e .[test])"
)
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not on PATH (apt-get install chromium; .ci/run installs it)"
)
IMAGES = Path(__file__).resolve().parents[3] / "docs" / "images"
CONFIG = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: a100}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Cohort
metadata: {name: research}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: team-a}
spec:
  namespaceSelector: {}
  cohortName: research
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors: [{name: a100, resources: [{name: nvidia.com/gpu, nominalQuota: "8", borrowingLimit: "0"}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: team-b}
spec:
  namespaceSelector: {}
  cohortName: research
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors: [{name: a100, resources: [{name: nvidia.com/gpu, nominalQuota: "4"}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: team-a, namespace: ml}
spec: {clusterQueue: team-a}
"""


@contextlib.asynccontextmanager
async def serving(controller: Controller, port: int) -> AsyncIterator[str]:
    """The controller's UI listener (the dashboard and the visibility API), as a replica serves it."""
    app = process.ui_app(controller)
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@contextlib.asynccontextmanager
async def browser() -> AsyncIterator[Any]:
    async with playwright_api.async_playwright() as p:
        chromium = await p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = await chromium.new_page(viewport={"width": 1280, "height": 800})
            page.errors = []  # type: ignore[attr-defined]
            page.on("console", lambda m: page.errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: page.errors.append(str(e)))
            yield page
        finally:
            await chromium.close()


def screenshot(tmp: Path, name: str) -> Path:
    if os.environ.get("TURNSTILE_UPDATE_SCREENSHOTS"):
        IMAGES.mkdir(parents=True, exist_ok=True)
        return IMAGES / name
    return tmp / name


async def _admitted(w: World, name: str) -> bool:
    return (await w.kube.get(JOBS, "ml", name))["spec"]["suspend"] is False


async def test_the_dashboard_tells_the_story_live_in_a_real_browser(tmp_path: Path, migrated_url: str) -> None:
    async with world(tmp_path, migrated_url) as w:
        await w.apply(CONFIG)
        controller = w.start_controller("replica-1")
        first = job("first", gpus=8, runtime=None)
        first["metadata"]["labels"]["team"] = "vision"  # (a ledger label: usage by label:team)
        await w.create(first)
        await eventually(lambda: _admitted(w, "first"), what="the first job admitted")
        await w.create(job("second", gpus=6))  # waits: the first holds all 8
        port = free_port()
        async with browser() as page:
            async with serving(controller, port) as url:
                await page.goto(f"{url}/ui/")
                card = page.locator('.cq[data-queue="team-a"]')
                await card.wait_for()
                assert "1 admitted, 1 pending" in await card.inner_text()
                assert "8 of 8" in await card.inner_text()
                assert await page.locator('.cohort[data-cohort="research"] .cq').count() == 2
                assert "8.0 in use of 12.0" in await page.locator('.card[data-flavor="a100"]').inner_text()
                await page.wait_for_selector("#live.on")
                await page.screenshot(path=str(screenshot(tmp_path, "dashboard-queues.png")), full_page=True)

                await page.goto(f"{url}/ui/#pending?queue=team-a")
                row = page.locator('#pending-table tr[data-workload="ml/second"]')
                await row.wait_for()
                text = await row.inner_text()
                assert text.startswith("1") and "WaitingForQuota" in text, text
                await page.screenshot(path=str(screenshot(tmp_path, "dashboard-pending.png")), full_page=True)

                # live: the first job goes, the second is admitted; the page follows without a reload
                await w.kube.delete(JOBS, "ml", "first")
                await row.wait_for(state="detached", timeout=15000)
                assert "none" in await page.locator("#pending-page").inner_text()

                await page.goto(f"{url}/ui/#workload?name=ml/second")
                await page.locator("#timeline li.Admitted").wait_for()
                assert "Workload:      ml/second" in await page.locator("#describe").inner_text()
                await page.locator('#events-table tr[data-reason="Admitted"]').wait_for()  # its job's Events
                await page.screenshot(path=str(screenshot(tmp_path, "dashboard-workload.png")), full_page=True)

                await page.goto(f"{url}/ui/#usage")
                await page.locator('#usage-chart .item[data-group="vision"]').wait_for()
                assert "GPU-h" in await page.locator('#usage-chart .item[data-group="vision"]').inner_text()
                await page.goto(f"{url}/ui/#audit")
                await page.locator("#audit-table tbody tr").first.wait_for()
                assert "clusterqueue/team-a" in (await page.locator("#audit-table").inner_text()).lower()
                assert page.errors == [], page.errors  # (what follows provokes a 404 and lost connections)

                # hostile text in the URL is shown as text, never run
                await page.goto(f"{url}/ui/#workload?name=" + "%3Cimg%20src%3Dx%20onerror%3Dalert(1)%3E")
                await page.locator("#error").wait_for()
                assert "<img src=x onerror=alert(1)>" in await page.locator("#error").inner_text()
                assert await page.locator("main img").count() == 0
            # the server restarts (a controller restart): the page reconnects and is live again
            await page.goto(f"{url}/ui/#queues")
            await page.wait_for_selector("#live.off", timeout=15000)
            async with serving(controller, port):
                await page.wait_for_selector("#live.on", timeout=15000)
                await w.create(job("third", gpus=1))
                await eventually(lambda: _admitted(w, "third"), what="the third job admitted")
                card = page.locator('.cq[data-queue="team-a"]')
                await page.wait_for_function(
                    "document.querySelector('.cq[data-queue=\"team-a\"]').innerText.includes('7 of 8')",
                    timeout=15000,
                )
                assert "2 admitted" in await card.inner_text()
