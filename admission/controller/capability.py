"""Capabilities: the controller's optional features behind one small protocol, so the kernel names none.

Every feature used to be edited into four to six places: the controller built it and ran its
loops, the step called it by name, the step's constructor took it as an argument, and its stop
was written out in the controller's ``finally`` (issue 33). A feature is now a ``Capability``:
every hook below does nothing by default, a feature overrides the ones it needs, and the kernel
(``controller`` for the replica, ``step`` for the leader) calls each hook of each capability it
was given, in their order. Kueue's ``jobframework`` (a GenericJob plus optional interfaces) is
the model; here there is one protocol, with no-op defaults instead of optional interfaces.

- every replica: ``loops()``, its background loops (read Prometheus, write status, look at pods),
  run for the process's life and cancelled on the way out; ``stop()``, release what it holds;
- the leader, in each step (``StepContext``): ``decide()``, before the core schedules, the
  evictions it owes (an idle GPU, a failed one) and the gates it sets on the scheduler (a spent
  budget holds new work); ``record()``, after the step's commit, its own fenced writes (the
  ledger's started and used hours).

Not yet behind it (still wired by hand in ``controller`` and ``step``): admission checks,
waitForPodsReady, placement and the Workload objects' marks; docs/architecture.md tracks them.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from admission.controller.term import Term
    from queues.cycle.scheduler import Decision

Loop = tuple[str, Callable[[], Coroutine[Any, Any, None]]]  # (the task's name, the coroutine function it runs)


@dataclass(frozen=True, slots=True)
class StepContext:
    """What a step tells its capabilities: the term it runs in, its clock, and what changed."""

    term: Term
    now: float  # the term's clock (``term.now_ms``'s seconds)
    dirty: Mapping[str, None]  # job uids whose jobs changed since the last step


class Capability:
    """One optional feature of the controller; override the hooks it uses (module docstring)."""

    name = "capability"

    def loops(self) -> Sequence[Loop]:
        """Background loops to run on every replica while the process runs."""
        return ()

    async def stop(self) -> None:
        """The process is stopping: release connections and clients."""

    def decide(self, step: StepContext) -> Sequence[Decision]:
        """In the leader's step, before the core schedules: evictions owed, gates set."""
        return ()

    async def record(self, step: StepContext) -> None:
        """In the leader's step, after its commit: this feature's own fenced writes."""
