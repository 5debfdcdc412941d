"""``turnstile demo``: the gpu-teams story, run by the whole system with a live view, then the report.

It runs ``examples/gpu-teams.yaml`` through engine cluster (``spec/cli.md``): the simulated
cluster, the webhook over TLS, the controller and an embedded PostgreSQL, in about a minute of
wall time. While it runs, the view shows what the leading controller holds in memory: each
ClusterQueue's admitted and waiting workloads and GPU use, why each waiting job waits, and
the latest decisions committed to PostgreSQL; the dashboard (``admission.ui``) serves the same
story in a browser at the printed URL.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from aiohttp import web
from rich.console import Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table

from admission.app import process
from admission.cli import documents, report
from admission.controller.controller import Controller
from admission.sim import engine
from admission.store import database
from admission.store import workloads as store
from queues import quantity
from queues.cycle.scheduler import Scheduler
from queues.simulation import scenario, simulator

# the story ships inside the package (a plain `pip install` runs the demo); examples/gpu-teams.yaml links to it
EXAMPLE = Path(__file__).resolve().with_name("gpu-teams.yaml")
DEMO_SECONDS = 60.0
DASHBOARD_PORT = 8081


def _view(t: float, sched: Scheduler | None, recent: list[store.EventRow], driver: engine.Driver) -> Group:
    queues = Table(title=f"t = {t:,.0f} s (scenario time)", title_justify="left", expand=False)
    for col in ("ClusterQueue", "cohort", "admitted", "waiting", "GPUs in use / nominal"):
        queues.add_column(col)
    pending = Table(title="Waiting, and why", title_justify="left")
    pending.add_column("workload")
    pending.add_column("reason")
    pending.add_column("message", overflow="fold")
    if sched is not None:
        for name, cq in sorted(sched.snapshot.queues.items()):
            used = ", ".join(
                f"{quantity.format_milli(v)}/{quantity.format_milli(cq.nominal((flavor, res)))} {flavor}"
                for (flavor, res), v in sorted(cq.usage.items())
                if v and "gpu" in res
            )
            waiting = len(sched.pending.waiting(name))
            queues.add_row(name, cq.cohort_name or "-", str(len(cq.workloads)), str(waiting), used or "-")
        for wl in sorted(sched.workloads.values(), key=lambda w: w.seq):
            if wl.admission is None:
                reason, message = sched.explain(wl)
                pending.add_row(wl.key, reason, message)
    events = Table(title="Latest decisions (committed to PostgreSQL)", title_justify="left")
    for col in ("t", "event", "workload", "detail"):
        events.add_column(col)
    for e in recent[-6:]:
        detail = e.cluster_queue or ""
        if e.type == "Evicted":
            detail = f"{e.reason}/{e.detail}" + (f" by {e.by}" if e.by else "")
        events.add_row(f"{driver.scenario_time(e.at):,.0f}", e.type, e.workload, detail)
    return Group(queues, pending, events)


async def _dashboard(controller: Controller) -> tuple[web.AppRunner, str]:
    """The dashboard (``admission.ui``) on loopback, at port 8081 if free (as ``sim up``'s), else any."""
    app = web.Application()
    process.dashboard(controller).routes(app)
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    for port in (DASHBOARD_PORT, 0):
        try:
            site = web.TCPSite(runner, "127.0.0.1", port)
            await site.start()
        except OSError:
            continue
        return runner, f"http://127.0.0.1:{runner.addresses[-1][1]}/ui/"
    raise OSError("no port for the dashboard")


async def _run(live: Live, parsed: scenario.Scenario, time_scale: float) -> simulator.Result:
    runner: web.AppRunner | None = None

    async def watch(driver: engine.Driver) -> None:
        nonlocal runner
        controller = driver.stack.controller
        runner, url = await _dashboard(controller)
        while True:
            async with database.transaction(controller.sessions) as session:
                recent = await store.events(session, after=max(0, await store.last_event_id(session) - 6))
            term = controller.term
            live.update(Group(
                f"dashboard: {url}   (open it while the demo runs)",
                _view(driver.now(), term.scheduler if term else None, recent, driver),
            ))  # fmt: skip
            await asyncio.sleep(0.25)

    try:
        return await engine.simulate(parsed, time_scale=time_scale, watch=watch)
    finally:
        if runner is not None:
            await runner.cleanup()


def run(*, seconds: float = DEMO_SECONDS) -> None:
    console = report.console()
    parsed = scenario.parse(documents.load_single(str(EXAMPLE)))
    makespan = simulator.Simulation(parsed).run().makespan  # the core's plan sets the pace
    time_scale = seconds / max(makespan, 1.0)
    console.print(
        Panel.fit(
            parsed.description.strip()
            + "\n\nRunning it for real: simulated cluster, webhook over TLS, controller, embedded PostgreSQL"
            + f" (one scenario second = {time_scale * 1000:.1f} ms of wall time).",
            title=f"turnstile demo: {parsed.name} (engine cluster)",
        )
    )
    with Live(console=console, refresh_per_second=4, transient=False) as live:
        result = asyncio.run(_run(live, parsed, time_scale))
    console.rule("report")
    report.render(result, console, engine="cluster")
