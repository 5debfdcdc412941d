"""Capabilities: the controller's optional features behind one small protocol, so the kernel names none.

Every feature used to be edited into four to six places: the controller built it and ran its
loops, the step called it by name, the step's constructor took it as an argument, and its stop
was written out in the controller's ``finally`` (issue 33). A feature is now a ``Capability``:
every hook below does nothing by default, a feature overrides the ones it needs, and the kernel
(``controller`` for the replica, ``step`` for the leader) calls each hook of each capability it
was given, in their order. Kueue's ``jobframework`` (a GenericJob plus optional interfaces) is
the model; here there is one protocol, with no-op defaults instead of optional interfaces.

- every replica: ``start()``, its workers, as the process starts; ``loops()``, its background
  loops (read Prometheus, write status, look at pods), run for the process's life and cancelled
  on the way out; ``stop()``, release what it holds; ``optional_informers()``, the informers it
  runs that only some clusters serve (their state is the readiness report's detail);
  ``configured()``, a queue configuration was loaded;
- the leader: ``term_began()``, a term was rebuilt from the store (look at everything again);
  in each step (``StepContext``): ``decide()``, before the core schedules, the evictions it owes
  (an admission check's verdict, an idle GPU, a failed one, pods not Ready in time) and the gates
  it sets on the scheduler (a spent budget holds new work); ``commit_due()``,
  ``write_before_decisions()`` and ``write_in_commit()``, what it stores in the step's own fenced
  transaction, before or after the decisions (so it lands with them, or not at all), and by when,
  and ``committed()`` once that transaction is in; ``stepped()``, what
  the step stored and touched (``Stepped``: the workloads whose objects or requests follow them);
  ``record()``, after the commit, writes of its own in a transaction of its own (the ledger's
  started and used hours); ``next_wake()``, the next time it needs a step though nothing else
  changes (a deadline).

Behind it: admission checks, waitForPodsReady, the Workload objects, placement (nodes lost or
cordoned), idle reclaim with GPU health, GPU-hour budgets, metering, pod waits, declared queues
and their status. They are built in one place, ``admission.app.wiring``, which is the only place
that names them; the kernel names one feature's part, placement's node inventory, which the
enactor and a new term place pods by (``admission.controller.parts.Features``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession

    from admission.controller.term import Term
    from admission.kube.informer import Informer
    from queues.cycle.scheduler import Decision
    from queues.model import Config

Loop = tuple[str, Callable[[], Coroutine[Any, Any, None]]]  # (the task's name, the coroutine function it runs)

NOW = float("-inf")  # ``commit_due``: due at once
# ``commit_due``: how long what a capability saw, stamped with when it saw it (a run seen starting,
# a job's pods first Ready), may wait for a step that commits anyway. Under load every job event
# makes a step, and a transaction per step for a few stamps was most of the database's round trips
# (600 of 4,000 admissions' steps); a stamp's time is taken when it is seen, so waiting changes
# no figure. A replica that stops meanwhile loses them: the next term sees those jobs again and
# stamps them then, as it does those whose events had not reached a step.
STAMPS_WAIT = 0.25


@dataclass(frozen=True, slots=True)
class StepContext:
    """What a step tells its capabilities: the term it runs in, its clock, and what changed."""

    term: Term
    now: float  # the term's clock (``term.now_ms``'s seconds)
    dirty: Mapping[str, None]  # job uids whose jobs changed since the last step


@dataclass(frozen=True, slots=True)
class Stepped:
    """What a step stored and touched, told to every capability after its commit."""

    stored: Sequence[str]  # job uids whose workload rows were stored, refreshed or dequeued
    forgotten: Sequence[str]  # job uids whose workloads finished, were deleted or left queueing
    # workload keys decided, told (a reason, a check), (no longer) preempting, or stamped (pods Ready)
    changed: set[str]
    touched: set[str]  # workload keys the enactor is asked to drive to their state


class Capability:
    """One optional feature of the controller; override the hooks it uses (module docstring)."""

    def start(self) -> None:
        """The process starts: start its workers (before any loop runs)."""

    def optional_informers(self) -> Sequence[Informer]:
        """The informers it runs that only some clusters serve (ProvisioningRequests, Workloads)."""
        return ()

    def configured(self, config: Config | None) -> None:
        """A queue configuration was loaded (every replica): what it needs watched."""

    def term_began(self, term: Term) -> None:
        """This replica leads a term rebuilt from the store: look at everything again."""

    def loops(self) -> Sequence[Loop]:
        """Background loops to run on every replica while the process runs."""
        return ()

    async def stop(self) -> None:
        """The process is stopping: release connections and clients."""

    def decide(self, step: StepContext) -> Sequence[Decision]:
        """In the leader's step, before the core schedules: evictions owed, gates set."""
        return ()

    def commit_due(self) -> float | None:
        """By when what it has for the step's transaction must be committed (term clock; ``NOW``), or
        None: nothing. A step commits when anything is due or it has decisions, and every capability
        then writes all it has; a step is woken for the earliest time due (``STAMPS_WAIT``)."""
        return None

    async def write_before_decisions(self, session: AsyncSession, step: StepContext) -> None:
        """Inside the step's transaction, before its decisions are stored: what describes the state the
        step started from (a run seen before this step's evictions end it)."""

    async def write_in_commit(self, session: AsyncSession, step: StepContext) -> None:
        """Inside the step's transaction (fenced, re-checked with the decisions): what it stores."""

    def committed(self, step: StepContext) -> Collection[str]:
        """That transaction committed: what it says about it (metrics). Returns the workloads whose
        stored state what it wrote changed (a stamp their objects show: ``Stepped.changed``)."""
        return ()

    def stepped(self, step: StepContext, outcome: Stepped) -> None:
        """The step's decisions are committed (or it had none): what it stored and touched."""

    async def record(self, step: StepContext) -> None:
        """In the leader's step, after its commit: this feature's own fenced writes."""

    def next_wake(self) -> float | None:
        """When it next needs a step though nothing else changes (term clock), or None."""
        return None
