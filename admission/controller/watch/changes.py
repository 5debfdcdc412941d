"""What changed since the leader's last step: filled by the informers, the enactor and the
configuration listener, drained by the step (``admission.controller.step``).

Its own module because the capabilities that watch the cluster (placement's nodes, for one)
fill it too, and they sit below the step.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field


@dataclass(slots=True)
class Changes:
    """What changed since the last step: filled by the informers and the listener, drained by a step."""

    wake: asyncio.Event = field(default_factory=asyncio.Event)
    jobs: dict[str, None] = field(default_factory=dict)  # job uids, in event order
    config: bool = False
    namespaces: bool = False
    # admitted workloads whose job waits for preempted workloads' pods to stop -> those workloads
    # (None: it no longer waits), as the enactor found; a step stores and announces it
    preempting: dict[str, list[str] | None] = field(default_factory=dict)
    # nodes deleted (``admission.controller.features.inventory``)
    nodes_lost: dict[str, None] = field(default_factory=dict)
    # nodes cordoned -> workloads placed there whose pods there had not started
    nodes_unusable: dict[str, set[str]] = field(default_factory=dict)

    def job(self, uid: str) -> None:
        self.jobs[uid] = None
        self.wake.set()
