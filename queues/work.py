"""How much the scheduling core did: its cost as counts, the same on every machine.

Time says how fast a machine is; counts say how much work an input asked for. A scheduling core
that does many times the work it needs (a failure cache that stopped sharing, a queue requeued
at every event) shows here before it shows on a clock, and a test can hold the count per admitted
workload under a bound on fixed scenarios (``tests/queues/test_work.py``): a regression fails with
the same numbers everywhere. The simulator reports them as ``summary.work``; ``bench core`` prints
them beside its times.

- ``cycles``: scheduling cycles run (``Scheduler.cycle``);
- ``nominations``: heads nominated (a remembered failure counts: it is a nomination that was cheap);
- ``assignments``: flavor assignments computed (``queues.cycle.flavors.assign``: the costly part);
- ``requeues``: set-aside workloads put back in their queue's line (``PendingQueues.requeue``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(slots=True)
class Work:
    cycles: int = 0
    nominations: int = 0
    assignments: int = 0
    requeues: int = 0

    def to_json(self) -> dict[str, int]:
        return asdict(self)

    def per(self, admitted: int) -> dict[str, float]:
        """Each count per admitted workload (what a test bounds)."""
        return {name: round(value / max(1, admitted), 2) for name, value in asdict(self).items()}
