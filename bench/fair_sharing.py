"""Kueue's baseline and large-scale configs with fair sharing on, beside quota only.

Figures: makespan against the fluid bound, the wall time to simulate, and the fairness achieved:
each ClusterQueue's weighted share (``queues.fairsharing``) is followed over the whole run in both
modes; printed are the spread of the queues' time-mean shares (max / min over the queues of each
cohort, worst cohort) and the highest share any queue reached.
"""

from __future__ import annotations

import time
from typing import Any

from bench import kueue_perf
from queues import scenario, simulator


def run(name: str, cohorts: int, queues: int, sets: tuple[kueue_perf.WorkloadSet, ...], fair: bool) -> dict[str, Any]:
    doc = kueue_perf.generate(name, cohorts, queues, sets)
    if fair:
        doc["fairSharing"] = {}
    parsed = scenario.parse(doc)
    t0 = time.perf_counter()
    result = simulator.Simulation(parsed, follow_shares=True).run()
    wall = time.perf_counter() - t0
    figures = kueue_perf.figures(result, queues, sets)
    per_cq = result.summary()["clusterQueues"]
    spreads = []
    for c in range(cohorts):
        means = [per_cq[f"cohort-{c}-cq-{q}"]["weightedShareMean"] or 0.0 for q in range(queues)]
        spreads.append(max(means) / min(means) if min(means) > 0 else float("inf") if max(means) > 0 else 1.0)
    peak = max((cq["weightedShareMax"] or 0.0) for cq in per_cq.values())
    return {**figures, "wall": wall, "spread": max(spreads), "peak": peak}


def main() -> None:
    configs = (("baseline", 5, 6, kueue_perf.BASELINE), ("large_scale", 10, 100, kueue_perf.LARGE_SCALE))
    for name, cohorts, queues, sets in configs:
        print(f"\n[{name} with fair sharing] {cohorts} cohorts x {queues} CQs")
        for fair in (False, True):
            r = run(name, cohorts, queues, sets, fair)
            mode = "fair sharing" if fair else "quota only  "
            print(
                f"  {mode}: makespan {r['makespan']:7.1f} s = {r['makespan'] / r['bound']:.2f}x the bound; "
                f"wall {r['wall']:5.1f} s; time-mean share spread {r['spread']:.2f}x (max/min, worst cohort); "
                f"peak share {r['peak']:.0f}"
            )


if __name__ == "__main__":
    main()
