"""Kueue's baseline and large-scale configs with fair sharing on, beside quota only.

Figures: makespan against the fluid bound, the wall time to simulate, and the fairness achieved
(also on the baseline with one queue per cohort loaded three times over, since the symmetric
baseline never borrows):
each ClusterQueue's weighted share (``queues.cycle.fairsharing``) is followed over the whole run in both
modes; printed are the spread of the time-mean shares of the queues that borrow (max / min within
a cohort, worst cohort), the highest share any queue reached, and the average wait per class. On
the skewed baseline, Turnstile's usage-aware fair sharing (``fairSharing.usageHalfLifeTime``) runs
too, and the mean wait of the heavy queues' jobs and of the others' is printed for each mode: how
ordering by decayed usage moves waiting from the light queues to the heavy ones.
"""

from __future__ import annotations

import time
from typing import Any

from bench import kueue_perf
from queues.simulation import scenario, simulator

SKEW = {"-cq-0": 3, "-cq-1": 2}  # a cohort's first two queues: three and two times their load


def skew(doc: dict[str, Any]) -> None:
    """Give the first two ClusterQueues of every cohort ``SKEW`` times their load (copies of their
    jobs, at the same times), so that two queues borrow at once and fair sharing has a choice."""
    extra = []
    for job in doc["jobs"]:
        factor = next((f for end, f in SKEW.items() if job["object"]["metadata"]["namespace"].endswith(end)), 1)
        for k in range(1, factor):
            copy = {**job, "object": {**job["object"], "metadata": dict(job["object"]["metadata"])}}
            copy["object"]["metadata"]["name"] += f"-x{k}"
            extra.append(copy)
    doc["jobs"] = sorted(doc["jobs"] + extra, key=lambda j: float(j["at"]))


MODES = {"quota only": None, "fair sharing": {}, "usage-aware": {"usageHalfLifeTime": "60s"}}


def run(
    name: str, cohorts: int, queues: int, sets: tuple[kueue_perf.WorkloadSet, ...], mode: str, skewed: bool = False
) -> dict[str, Any]:
    doc = kueue_perf.generate(name, cohorts, queues, sets)
    if skewed:
        skew(doc)
    if MODES[mode] is not None:
        doc["fairSharing"] = MODES[mode]
    parsed = scenario.parse(doc)
    t0 = time.perf_counter()
    result = simulator.Simulation(parsed, follow_shares=True).run()
    wall = time.perf_counter() - t0
    figures = kueue_perf.figures(result, queues, sets)
    per_cq = result.summary()["clusterQueues"]
    if skewed:  # (more work than the symmetric config the bound is computed for)
        figures["bound"] *= (queues + sum(f - 1 for f in SKEW.values())) / queues
    spreads = []
    for c in range(cohorts):
        means = [per_cq[f"cohort-{c}-cq-{q}"]["weightedShareMean"] or 0.0 for q in range(queues)]
        borrowers = [m for m in means if m > 0]
        spreads.append(max(borrowers) / min(borrowers) if borrowers else 1.0)
    peak = max((cq["weightedShareMax"] or 0.0) for cq in per_cq.values())
    heavy = [n for n in per_cq if any(n.endswith(end) for end in SKEW)]

    def mean_wait(names: list[str]) -> float:
        n = sum(per_cq[q]["admitted"] for q in names)
        return sum(per_cq[q]["wait"]["mean"] * per_cq[q]["admitted"] for q in names) / n if n else 0.0

    light = [n for n in per_cq if n not in heavy]
    return {
        **figures,
        "wall": wall,
        "spread": max(spreads),
        "peak": peak,
        "heavy": mean_wait(heavy),
        "light": mean_wait(light),
    }


def main() -> None:
    configs = (
        ("baseline", 5, 6, kueue_perf.BASELINE, False),
        ("baseline", 5, 6, kueue_perf.BASELINE, True),
        ("large_scale", 10, 100, kueue_perf.LARGE_SCALE, False),
    )
    for name, cohorts, queues, sets, skewed in configs:
        how = ", skewed: each cohort's first two queues with 3x and 2x the load" if skewed else ""
        print(f"\n[{name} with fair sharing] {cohorts} cohorts x {queues} CQs{how}")
        for mode in [m for m in MODES if skewed or m != "usage-aware"]:
            r = run(name, cohorts, queues, sets, mode, skewed)
            waits = f"; mean wait heavy queues {r['heavy']:.1f} s, others {r['light']:.1f} s" if skewed else ""
            print(
                f"  {mode:12}: makespan {r['makespan']:7.1f} s = {r['makespan'] / r['bound']:.2f}x the bound; "
                f"wall {r['wall']:5.1f} s; time-mean share spread {r['spread']:.2f}x (max/min of the queues that "
                f"borrow, worst cohort); "
                f"peak share {r['peak']:.0f}; avg wait "
                + ", ".join(f"{c} {w:.1f} s" for c, w in sorted(r["avg_wait"].items()))
                + waits
            )


if __name__ == "__main__":
    main()
