"""The schema: SQLAlchemy 2 typed tables, every constraint named by convention.

Configuration mirrors Kueue's objects: each row keeps the object's manifest (``manifest``,
as applied, for ``turnstile get -o yaml``) beside the normalised columns the scheduler and
the constraints need; quotas are one row per (queue, flavor, resource). Workloads carry
their pod sets and queue order; admissions charge quota per (workload, flavor, resource);
the usage ledger records every admitted interval for chargeback; each queue's decayed usage
is fair sharing's history; the audit log every admin edit; the leader lease
the single scheduler's identity and fencing token; settings the install-wide choices (where
the configuration is declared).

Quantities are exact milli-units in NUMERIC(38,0) columns (never floats).
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Identity,
    Index,
    Integer,
    Numeric,
    String,
    Text,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, declared_attr, mapped_column

from admission.store.table_base import NAME, Milli, timestamp_column

# (re-exported: tables.Base.metadata holds every table once this module is imported; migrations read it)
from admission.store.table_base import Base as Base


class _Config:
    """Columns every configuration object has."""

    manifest: Mapped[dict[str, Any]] = mapped_column(nullable=False)
    generation: Mapped[int] = mapped_column(nullable=False, server_default=text("1"))
    created_at: Mapped[dt.datetime] = timestamp_column()
    updated_at: Mapped[dt.datetime] = timestamp_column()


class ResourceFlavor(_Config, Base):
    __tablename__ = "resource_flavors"
    name: Mapped[str] = mapped_column(String(NAME), primary_key=True)


class Topology(_Config, Base):
    """Kueue's Topology (levels of node labels); ResourceFlavors name it in ``spec.topologyName``."""

    __tablename__ = "topologies"
    name: Mapped[str] = mapped_column(String(NAME), primary_key=True)


class Cohort(_Config, Base):
    __tablename__ = "cohorts"
    name: Mapped[str] = mapped_column(String(NAME), primary_key=True)
    parent_name: Mapped[str | None] = mapped_column(String(NAME))
    __table_args__ = (CheckConstraint("parent_name IS NULL OR parent_name <> name", name="not_own_parent"),)


class ClusterQueue(_Config, Base):
    __tablename__ = "cluster_queues"
    name: Mapped[str] = mapped_column(String(NAME), primary_key=True)
    cohort: Mapped[str | None] = mapped_column(String(NAME), index=True)
    queueing_strategy: Mapped[str] = mapped_column(String(16), nullable=False)
    stop_policy: Mapped[str] = mapped_column(String(16), nullable=False, server_default="None")
    # deleted in Kubernetes, kept by its finalizer while admitted workloads use it: admits nothing new
    deleting_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    __table_args__ = (
        CheckConstraint("queueing_strategy IN ('StrictFIFO', 'BestEffortFIFO')", name="strategy"),
        CheckConstraint("stop_policy IN ('None', 'Hold', 'HoldAndDrain')", name="stop_policy"),
    )


def _quota_checks() -> tuple[CheckConstraint, ...]:
    return (
        CheckConstraint("nominal >= 0", name="nominal_non_negative"),
        CheckConstraint("borrowing_limit IS NULL OR borrowing_limit >= 0", name="borrowing_non_negative"),
        CheckConstraint("lending_limit IS NULL OR lending_limit >= 0", name="lending_non_negative"),
        CheckConstraint("lending_limit IS NULL OR lending_limit <= nominal", name="lending_within_nominal"),
    )


class _Quota:
    """One (owner, flavor, resource) quota: nominal, borrowing and lending limits."""

    flavor: Mapped[str] = mapped_column(String(NAME), primary_key=True)
    resource: Mapped[str] = mapped_column(String(NAME), primary_key=True)
    position: Mapped[int] = mapped_column(Integer, nullable=False)
    nominal: Mapped[int] = mapped_column(Milli, nullable=False)
    borrowing_limit: Mapped[int | None] = mapped_column(Milli)
    lending_limit: Mapped[int | None] = mapped_column(Milli)

    @declared_attr.directive
    def __table_args__(cls) -> tuple[CheckConstraint, ...]:
        return _quota_checks()


class ClusterQueueQuota(_Quota, Base):
    __tablename__ = "cluster_queue_quotas"
    cluster_queue: Mapped[str] = mapped_column(
        String(NAME), ForeignKey("cluster_queues.name", ondelete="CASCADE"), primary_key=True
    )


class CohortQuota(_Quota, Base):
    __tablename__ = "cohort_quotas"
    cohort: Mapped[str] = mapped_column(String(NAME), ForeignKey("cohorts.name", ondelete="CASCADE"), primary_key=True)


class LocalQueue(_Config, Base):
    __tablename__ = "local_queues"
    namespace: Mapped[str] = mapped_column(String(63), primary_key=True)
    name: Mapped[str] = mapped_column(String(NAME), primary_key=True)
    # Not a foreign key: Kueue lets a LocalQueue name a ClusterQueue that does not exist (yet).
    cluster_queue: Mapped[str] = mapped_column(String(NAME), nullable=False, index=True)
    stop_policy: Mapped[str] = mapped_column(String(16), nullable=False, server_default="None")
    __table_args__ = (CheckConstraint("stop_policy IN ('None', 'Hold', 'HoldAndDrain')", name="stop_policy"),)


class WorkloadPriorityClass(_Config, Base):
    __tablename__ = "workload_priority_classes"
    name: Mapped[str] = mapped_column(String(NAME), primary_key=True)
    value: Mapped[int] = mapped_column(Integer, nullable=False)


class AdmissionCheck(_Config, Base):
    __tablename__ = "admission_checks"
    name: Mapped[str] = mapped_column(String(NAME), primary_key=True)
    controller_name: Mapped[str] = mapped_column(String(NAME), nullable=False)


class ProvisioningRequestConfig(_Config, Base):
    __tablename__ = "provisioning_request_configs"
    name: Mapped[str] = mapped_column(String(NAME), primary_key=True)
    provisioning_class_name: Mapped[str] = mapped_column(String(NAME), nullable=False)


WORKLOAD_STATES = ("Pending", "Admitted", "Finished")


class Workload(Base):
    """A job as the queue sees it, keyed by the job's uid."""

    __tablename__ = "workloads"
    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    job_uid: Mapped[str] = mapped_column(String(64), nullable=False, unique=True)
    api_version: Mapped[str] = mapped_column(String(NAME), nullable=False)
    kind: Mapped[str] = mapped_column(String(63), nullable=False)
    namespace: Mapped[str] = mapped_column(String(63), nullable=False)
    name: Mapped[str] = mapped_column(String(NAME), nullable=False)
    local_queue: Mapped[str | None] = mapped_column(String(NAME))
    cluster_queue: Mapped[str | None] = mapped_column(String(NAME))
    priority: Mapped[int] = mapped_column(Integer, nullable=False, server_default=text("0"))
    pod_sets: Mapped[dict[str, Any]] = mapped_column(nullable=False)
    labels: Mapped[dict[str, Any]] = mapped_column(nullable=False, server_default=text("'{}'::jsonb"))
    state: Mapped[str] = mapped_column(String(16), nullable=False, server_default="Pending")
    queue_ts: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    created_at: Mapped[dt.datetime] = timestamp_column()
    admitted_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    assigned_flavors: Mapped[dict[str, Any] | None] = mapped_column()
    reason: Mapped[str | None] = mapped_column(String(63))
    message: Mapped[str | None] = mapped_column(Text)
    # Two-phase admission: the admission checks its quota reservation has still to pass (its job
    # starts when none are left), retries so far, when it may queue again, whether it is active.
    checks: Mapped[list[str]] = mapped_column(JSONB, nullable=False, server_default=text("'[]'::jsonb"))
    retries: Mapped[int] = mapped_column(Integer, nullable=False, server_default=text("0"))
    requeue_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    active: Mapped[bool] = mapped_column(nullable=False, server_default=text("true"))
    # waitForPodsReady: when every pod of the admitted job was first Ready (None: not yet, this admission)
    pods_ready_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    # seconds its job ran in the admissions that ended (Kueue's accumulatedPastExecutionTimeSeconds)
    executed_seconds: Mapped[float] = mapped_column(Float, nullable=False, server_default=text("0"))
    __table_args__ = (
        CheckConstraint(f"state IN {WORKLOAD_STATES!r}", name="state"),
        CheckConstraint("(state = 'Admitted') = (admitted_at IS NOT NULL)", name="admitted_has_time"),
        Index(
            "ix_workloads_pending_order",
            "cluster_queue",
            text("priority DESC"),
            "queue_ts",
            "id",
            postgresql_where=text("state = 'Pending'"),
        ),
        Index("ix_workloads_namespace_name", "namespace", "name"),
    )


class Admission(Base):
    """Quota a workload holds: one row per (workload, flavor, resource)."""

    __tablename__ = "admissions"
    workload_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("workloads.id", ondelete="CASCADE"), primary_key=True
    )
    flavor: Mapped[str] = mapped_column(String(NAME), primary_key=True)
    resource: Mapped[str] = mapped_column(String(NAME), primary_key=True)
    cluster_queue: Mapped[str] = mapped_column(String(NAME), nullable=False, index=True)
    quantity: Mapped[int] = mapped_column(Milli, nullable=False)
    __table_args__ = (CheckConstraint("quantity >= 0", name="quantity_non_negative"),)


EVENT_TYPES = ("Admitted", "Evicted", "Finished", "Resized")


class WorkloadEvent(Base):
    """A workload's history, one row per decision: admitted (where), evicted (why, by whom), finished.

    Written in the same transaction as the decision, so history and quota never disagree.
    """

    __tablename__ = "workload_events"
    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    workload_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("workloads.id", ondelete="CASCADE"), nullable=False)
    at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    type: Mapped[str] = mapped_column(String(16), nullable=False)
    cluster_queue: Mapped[str | None] = mapped_column(String(NAME))
    flavors: Mapped[dict[str, Any] | None] = mapped_column()
    borrowing: Mapped[bool | None] = mapped_column()
    counts: Mapped[dict[str, Any] | None] = mapped_column()  # pod set -> pods, of a partial admission
    reason: Mapped[str | None] = mapped_column(String(63))
    detail: Mapped[str | None] = mapped_column(String(63))
    placement: Mapped[dict[str, Any] | None] = mapped_column()  # pod set -> node -> pods, placed by topology
    by_workload: Mapped[str | None] = mapped_column(String(NAME + 64))
    __table_args__ = (
        CheckConstraint(f"type IN {EVENT_TYPES!r}", name="type"),
        Index("ix_workload_events_workload", "workload_id", "id"),
        Index("ix_workload_events_at", "at"),
    )


class GpuBudget(Base):
    """A GPU-hour budget: what a ClusterQueue, or the jobs carrying a label, may run per period
    (``admission.store.budgets``; edited with ``turnstile budget``, audited as kind ``GPUBudget``)."""

    __tablename__ = "gpu_budgets"
    name: Mapped[str] = mapped_column(String(NAME + 64), primary_key=True)  # clusterQueue X | label k=v
    cluster_queue: Mapped[str | None] = mapped_column(String(NAME))
    labels: Mapped[dict[str, Any]] = mapped_column(nullable=False, server_default=text("'{}'::jsonb"))
    gpu_hours: Mapped[Decimal] = mapped_column(Numeric, nullable=False)
    period: Mapped[str] = mapped_column(String(32), nullable=False)  # monthly, or a duration (720h)
    # once spent: NULL holds new work back; a number runs it at that priority (``queues.cycle.budget_priority``)
    lower_priority: Mapped[int | None] = mapped_column(Integer)
    updated_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), server_default=func.now(), nullable=False)
    __table_args__ = (
        CheckConstraint("gpu_hours >= 0", name="gpu_hours_non_negative"),
        CheckConstraint("(cluster_queue IS NULL) <> (labels = '{}'::jsonb)", name="one_selector"),
    )


class AuditEntry(Base):
    """One admin edit: who, when, what, and the object before and after."""

    __tablename__ = "audit_log"
    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    # clock_timestamp(), not now(): an edit that waited for the configuration lock is stamped
    # when it was made, after the edit it waited for.
    at: Mapped[dt.datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.clock_timestamp(), nullable=False
    )
    actor: Mapped[str] = mapped_column(String(NAME), nullable=False)
    action: Mapped[str] = mapped_column(String(16), nullable=False)
    kind: Mapped[str] = mapped_column(String(63), nullable=False)
    name: Mapped[str] = mapped_column(String(NAME + 64), nullable=False)
    before: Mapped[dict[str, Any] | None] = mapped_column()
    after: Mapped[dict[str, Any] | None] = mapped_column()
    __table_args__ = (
        CheckConstraint("action IN ('create', 'update', 'delete')", name="action"),
        Index("ix_audit_log_object", "kind", "name", "at"),
        Index("ix_audit_log_at", "at"),
    )


class UsageInterval(Base):
    """Chargeback: a workload held ``quantity`` of a flavor-resource from ``started_at`` to ``ended_at``."""

    __tablename__ = "usage_ledger"
    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    workload_id: Mapped[int | None] = mapped_column(BigInteger, ForeignKey("workloads.id", ondelete="SET NULL"))
    workload: Mapped[str] = mapped_column(String(NAME + 64), nullable=False)
    namespace: Mapped[str] = mapped_column(String(63), nullable=False)
    cluster_queue: Mapped[str] = mapped_column(String(NAME), nullable=False)
    local_queue: Mapped[str | None] = mapped_column(String(NAME))
    flavor: Mapped[str] = mapped_column(String(NAME), nullable=False)
    resource: Mapped[str] = mapped_column(String(NAME), nullable=False)
    quantity: Mapped[int] = mapped_column(Milli, nullable=False)
    labels: Mapped[dict[str, Any]] = mapped_column(nullable=False, server_default=text("'{}'::jsonb"))
    started_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    ended_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    # when the job was seen running under this admission (started GPU-hours count from here)
    running_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    # of that run: seconds DCGM data covered, and those seconds times the utilisation measured
    measured_seconds: Mapped[float] = mapped_column(Float, nullable=False, server_default=text("0"))
    busy_seconds: Mapped[float] = mapped_column(Float, nullable=False, server_default=text("0"))
    # and its busiest GPU's memory (MiB): the peak, the GPU's size, the seconds covered and those
    # seconds times the memory used (right-sizing)
    memory_peak_mib: Mapped[float | None] = mapped_column(Float)
    memory_total_mib: Mapped[float | None] = mapped_column(Float)
    memory_seconds: Mapped[float] = mapped_column(Float, nullable=False, server_default=text("0"))
    memory_mib_seconds: Mapped[float] = mapped_column(Float, nullable=False, server_default=text("0"))
    __table_args__ = (
        CheckConstraint("quantity >= 0", name="quantity_non_negative"),
        CheckConstraint("ended_at IS NULL OR ended_at >= started_at", name="ends_after_start"),
        Index(
            "ix_usage_ledger_open",
            "workload_id",
            "flavor",
            "resource",
            unique=True,
            postgresql_where=text("ended_at IS NULL"),
        ),
        Index("ix_usage_ledger_started_at", "started_at"),
    )


class UsageHistory(Base):
    """A queue's decayed usage (``queues.cycle.usage_history``) as of ``updated_at``: a LocalQueue's
    (``namespace/name``; admission fair sharing, per resource) or a ClusterQueue's (its name;
    usage-aware fair sharing, per ``flavor/resource``), in whole units, so a restart or a fail-over
    keeps the history."""

    __tablename__ = "usage_history"
    queue: Mapped[str] = mapped_column(String(63 + 1 + NAME), primary_key=True)
    consumed: Mapped[dict[str, Any]] = mapped_column(nullable=False, server_default=text("'{}'::jsonb"))
    updated_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), nullable=False)


class DeletionRequest(Base):
    """Who deleted a Kueue queue object in Kubernetes, from the DELETE admission review (the only
    place the user is known), until the leader deletes the object from PostgreSQL and audits it."""

    __tablename__ = "deletion_requests"
    kind: Mapped[str] = mapped_column(String(63), primary_key=True)
    name: Mapped[str] = mapped_column(String(NAME + 64), primary_key=True)
    uid: Mapped[str] = mapped_column(String(64), nullable=False)  # the deleted object's, not a namesake's
    actor: Mapped[str] = mapped_column(String(NAME), nullable=False)
    requested_at: Mapped[dt.datetime] = timestamp_column()


class ActivityRequest(Base):
    """A person's ``spec.active`` for one workload (``turnstile stop|resume workload``), until the
    leader applies it: it is taken in the same transaction that stores what it did, so a request is
    never lost to a failed step, and a newer one replaces an older one not yet taken."""

    __tablename__ = "activity_requests"
    workload_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("workloads.id", ondelete="CASCADE"), primary_key=True
    )
    active: Mapped[bool] = mapped_column(nullable=False)
    actor: Mapped[str] = mapped_column(String(NAME), nullable=False)
    requested_at: Mapped[dt.datetime] = timestamp_column()


class Setting(Base):
    """One install-wide setting, e.g. ``config_source``: where the queue configuration is declared."""

    __tablename__ = "settings"
    key: Mapped[str] = mapped_column(String(63), primary_key=True)
    value: Mapped[str] = mapped_column(String(NAME), nullable=False)
    updated_at: Mapped[dt.datetime] = timestamp_column()


class LeaderLease(Base):
    """The scheduler's leader; ``fencing_token`` grows with every new term and guards every write."""

    __tablename__ = "leader_lease"
    name: Mapped[str] = mapped_column(String(63), primary_key=True)
    holder: Mapped[str] = mapped_column(String(NAME), nullable=False)
    fencing_token: Mapped[int] = mapped_column(BigInteger, nullable=False)
    renewed_at: Mapped[dt.datetime] = timestamp_column()
    expires_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    __table_args__ = (CheckConstraint("fencing_token > 0", name="token_positive"),)
