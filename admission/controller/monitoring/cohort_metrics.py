"""Kueue's Cohort hierarchy families on ``/metrics``: where each ClusterQueue and Cohort sits, and
each Cohort's subtree in quota, reservations and admitted workloads.

Why: Kueue's dashboards for hierarchical cohorts (``MetricsForCohorts``) join the per-queue
gauges to the tree with ``kueue_cluster_queue_info`` / ``kueue_cohort_info`` (value 1; labels
``parent_cohort`` and ``root_cohort``) and chart a whole organisation's part of the cluster with
the ``kueue_cohort_subtree_*`` gauges. Read at scrape time from the leader's quota tree, as the
other queue gauges (``admission.controller.monitoring.metrics``); names, labels and meanings are Kueue's
(pkg/metrics/metrics.go, pkg/cache/scheduler/cohort_metrics.go):

- ``kueue_cohort_subtree_quota{cohort,flavor,resource}``: the nominal quota of the Cohort's
  subtree (its own, plus what each child can lend it: ``queues.quotas``' subtree quota, lending
  limits applied, as Kueue's ``SubtreeQuota``); left out where 0, as Kueue clears it.
- ``kueue_cohort_subtree_resource_reservations{cohort,flavor,resource}``: quota reserved by every
  ClusterQueue under the Cohort; left out where 0.
- ``kueue_cohort_subtree_admitted_active_workloads{cohort}``: admitted workloads under it.

A ClusterQueue in no Cohort is reported with empty ``parent_cohort`` and ``root_cohort``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from admission.controller.monitoring.exposition import Exposition, escape
from queues import quantity
from queues.model import ClusterQueue, FlavorResource
from queues.quotas import CohortNode

if TYPE_CHECKING:
    from queues.cycle.scheduler import Scheduler

FAMILIES = (
    ("kueue_cluster_queue_info", "A ClusterQueue's place in the Cohort tree (1; join by labels)"),
    ("kueue_cohort_info", "A Cohort's place in the Cohort tree (1; join by labels)"),
    ("kueue_cohort_subtree_quota", "Nominal quota of the Cohort's subtree, per flavor and resource"),
    ("kueue_cohort_subtree_resource_reservations", "Quota reserved under the Cohort, per flavor and resource"),
    ("kueue_cohort_subtree_admitted_active_workloads", "Admitted workloads under the Cohort"),
)


def _root(node: CohortNode) -> CohortNode:
    while node.parent is not None:
        node = node.parent
    return node


def write_hierarchy(out: Exposition, sched: Scheduler, admitted_in: Mapping[str, int]) -> None:
    """The five families for the leader's current tree (a standby writes none); ``admitted_in``:
    admitted workloads per ClusterQueue, as ``kueue_admitted_active_workloads`` counts them."""
    info, cohort_info, quota, reserved, admitted = ([] for _ in FAMILIES)
    for name, cq in sorted(sched.snapshot.queues.items()):
        parent = cq.parent
        labels = f'cluster_queue="{escape(name)}",parent_cohort="{escape(parent.name if parent else "")}"'
        info.append((f'{labels},root_cohort="{escape(_root(parent).name if parent else "")}"', 1.0))
    for name, cohort in sorted(sched.snapshot.cohorts.items()):
        c = f'cohort="{escape(name)}"'
        above = cohort.parent.name if cohort.parent is not None else ""
        cohort_info.append((f'{c},parent_cohort="{escape(above)}",root_cohort="{escape(_root(cohort).name)}"', 1.0))
        queues = list(cohort.subtree_queues())
        for (flavor, resource), milli in sorted(cohort.subtree_quota.items()):
            if milli > 0:
                quota.append((f'{c},flavor="{escape(flavor)}",resource="{escape(resource)}"', milli / quantity.MILLI))
        for (flavor, resource), milli in sorted(_reserved(queues).items()):
            if milli > 0:
                fr = f'{c},flavor="{escape(flavor)}",resource="{escape(resource)}"'
                reserved.append((fr, milli / quantity.MILLI))
        admitted.append((c, float(sum(admitted_in.get(cq.name, 0) for cq in queues))))
    for (family, help_text), samples in zip(FAMILIES, (info, cohort_info, quota, reserved, admitted), strict=True):
        out.family(family, "gauge", help_text)
        for labels, value in samples:
            out.sample(family, labels, value)


def _reserved(queues: list[ClusterQueue]) -> dict[FlavorResource, int]:
    """Quota reserved by ``queues``, summed per flavor-resource (Kueue's subtree reservations)."""
    total: dict[FlavorResource, int] = {}
    for cq in queues:
        for fr, milli in cq.usage.items():
            total[fr] = total.get(fr, 0) + milli
    return total
