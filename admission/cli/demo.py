"""``turnstile demo``: the gpu-teams story, replayed with a live view, then the report.

Until the controller and the simulated cluster exist (engine ``cluster``), the demo replays
the scenario through the scheduling core (engine ``core``), paced in wall time so a person
can follow it: each step shows the queues, their GPU use, and why each waiting job waits.
"""

from __future__ import annotations

import time
from pathlib import Path

from rich.console import Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table

from admission.cli import documents, report
from queues import quantity, scenario, simulator

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "gpu-teams.yaml"


def _view(sim: simulator.Simulation) -> Group:
    sched = sim.sched
    queues = Table(title=f"t = {sim.now:,.0f} s", title_justify="left", expand=False)
    for col in ("ClusterQueue", "cohort", "admitted", "waiting", "in use"):
        queues.add_column(col)
    for name, cq in sorted(sched.snapshot.queues.items()):
        used = ", ".join(
            f"{res} {quantity.format_milli(v)}/{quantity.format_milli(cq.nominal((flavor, res)))} {flavor}"
            for (flavor, res), v in sorted(cq.usage.items())
            if v and "gpu" in res
        )
        waiting = len(sched.pending.waiting(name))
        queues.add_row(name, cq.cohort_name or "-", str(len(cq.workloads)), str(waiting), used or "-")
    pending = Table(title="Waiting, and why", title_justify="left")
    pending.add_column("workload")
    pending.add_column("reason")
    pending.add_column("message", overflow="fold")
    for wl in sorted(sched.workloads.values(), key=lambda w: w.seq):
        if wl.admission is None:
            reason, message = sched.explain(wl)
            pending.add_row(wl.key, reason, message)
    recent = Table(title="Latest events", title_justify="left")
    for col in ("t", "event", "workload", "detail"):
        recent.add_column(col)
    for e in sim.record.events[-6:]:
        detail = e.get("clusterQueue") or e.get("detail") or ""
        if e.get("by"):
            detail = f"{detail} by {e['by']}"
        recent.add_row(str(e["t"]), e["type"], e["workload"], detail)
    return Group(queues, pending, recent)


def run(*, step_seconds: float = 2.5) -> None:
    console = report.console()
    parsed = scenario.parse(documents.load_single(str(EXAMPLE)))
    console.print(Panel.fit(parsed.description.strip(), title=f"turnstile demo: {parsed.name} (engine core)"))
    sim = simulator.Simulation(parsed)
    with Live(console=console, refresh_per_second=4, transient=False) as live:

        def show(s: simulator.Simulation) -> None:
            live.update(_view(s))
            time.sleep(step_seconds)

        result = sim.run(on_step=show)
    console.rule("report")
    report.render(result, console)
