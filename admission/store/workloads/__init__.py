"""Workloads in PostgreSQL, by aggregate: ``intake`` (jobs into rows, the pod-set codec), ``snapshot``
(what a term starts from), ``commit`` (decisions re-checked under locks; the ledger; ``resize``: an
elastic job's admission resized), ``state``
(reasons, checks, pods ready) and ``event_log`` (what happened; progress queries).

The package's names are its interface: callers use ``workloads.commit_cycle`` and never reach
into a module, so the aggregates can move without touching them.
"""

from __future__ import annotations

from admission.store.workloads.commit import Admit, CommitResult, Evict, commit_cycle, dequeue, finish, held_usage
from admission.store.workloads.event_log import (
    EventRow,
    events,
    last_event_id,
    last_progress,
    next_requeue,
    workload_states,
)
from admission.store.workloads.intake import (
    LEDGER_LABELS,
    UPSERT_CHUNK,
    Record,
    pod_sets_from_json,
    pod_sets_json,
    upsert,
)
from admission.store.workloads.resize import Resize
from admission.store.workloads.snapshot import StoreSnapshot, load_snapshot
from admission.store.workloads.state import (
    CheckState,
    clear_admitted_reason,
    set_admitted_reasons,
    set_checks,
    set_pods_ready,
    set_reasons,
)

__all__ = [
    "LEDGER_LABELS",
    "UPSERT_CHUNK",
    "Admit",
    "CheckState",
    "CommitResult",
    "EventRow",
    "Evict",
    "Record",
    "Resize",
    "StoreSnapshot",
    "clear_admitted_reason",
    "commit_cycle",
    "dequeue",
    "events",
    "finish",
    "held_usage",
    "last_event_id",
    "last_progress",
    "load_snapshot",
    "next_requeue",
    "pod_sets_from_json",
    "pod_sets_json",
    "set_admitted_reasons",
    "set_checks",
    "set_pods_ready",
    "set_reasons",
    "upsert",
    "workload_states",
]
