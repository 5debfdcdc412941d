"""Kueue's baseline config through engine cluster at ``--time-scale 1`` (``python -m bench cluster``).

The same 15,000 workloads as ``bench/kueue_perf.py``, but run as ``turnstile simulate FILE
--engine cluster --time-scale 1`` runs them: real seconds, each job created over HTTP through the
webhook (TLS) on the simulated API server, admitted by the controller against embedded
PostgreSQL, unsuspended, its pod bound and run for its runtime, finished by the simulated Job
controller. Everything but PostgreSQL shares this one process, as in the command, so the CPU
split is this process against PostgreSQL.

Issue 5's target: makespan <= 1.4x the 66 s fluid bound with every job finished; Kueue's CI
measures 351 s (5.3x) and average times to admission small 215 s, medium 77 s, large 16.5 s.
The scenario file is written beside the figures, so the run can be repeated with the command.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

import yaml

from admission.sim import engine
from bench import kueue_perf
from bench.procs import PostgresMeter
from queues.simulation import scenario


def main(time_scale: float = 1.0) -> None:
    name, cohorts, queues, sets = "baseline", 5, 6, kueue_perf.BASELINE
    doc = kueue_perf.generate(name, cohorts, queues, sets)
    path = Path(tempfile.gettempdir()) / "turnstile-kueue-baseline.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    parsed = scenario.parse(doc)
    print(f"== Kueue baseline through engine cluster, --time-scale {time_scale:g} ({path}) ==")
    cpu0, wall0 = time.process_time(), time.perf_counter()
    with PostgresMeter() as postgres:
        result = asyncio.run(engine.simulate(parsed, time_scale=time_scale))
    wall = time.perf_counter() - wall0
    cpu, pg = time.process_time() - cpu0, postgres.seconds
    r = kueue_perf.figures(result, queues, sets)
    kueue = kueue_perf.KUEUE_FIGURES[name]
    print(f"  {r['workloads']} workloads, {r['finished']} finished, {r['preemptions']} preemptions")
    print(
        f"  makespan {r['makespan']:.1f} s = {r['makespan'] / r['bound']:.2f}x the {r['bound']:.0f} s fluid bound "
        f"(target <= 1.4x; Kueue on its CI {kueue['makespan']:.0f} s = {kueue['makespan'] / r['bound']:.1f}x)"
    )
    for cls, avg in sorted(r["avg_wait"].items()):
        print(f"  avg time to admission {cls:7s} {avg:6.1f} s   Kueue: {kueue[cls]} s")
    print(
        f"  wall {wall:.0f} s; CPU: this process (simulated cluster + webhook + controller + driver) "
        f"{cpu / wall * 100:.0f}% of a core, PostgreSQL {pg / wall * 100:.0f}%"
    )


if __name__ == "__main__":
    main()
