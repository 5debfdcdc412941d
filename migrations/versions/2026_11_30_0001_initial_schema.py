"""Initial schema: Kueue configuration, workloads, admissions, audit log, usage ledger, leader lease.

Why: Turnstile keeps queue configuration, quotas, admissions and usage in PostgreSQL so that
every admin edit is transactional and audited and every GPU-hour is on a ledger.

Locking risk: none. It only creates tables and indexes in an empty database.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "admission_checks",
        sa.Column("name", sa.String(length=253), nullable=False),
        sa.Column("controller_name", sa.String(length=253), nullable=False),
        sa.Column("manifest", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("generation", sa.BigInteger(), server_default=sa.text("1"), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_admission_checks")),
    )
    op.create_table(
        "audit_log",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), server_default=sa.text("clock_timestamp()"), nullable=False),
        sa.Column("actor", sa.String(length=253), nullable=False),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.Column("kind", sa.String(length=63), nullable=False),
        sa.Column("name", sa.String(length=317), nullable=False),
        sa.Column("before", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("after", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.CheckConstraint("action IN ('create', 'update', 'delete')", name=op.f("ck_audit_log_action")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_log")),
    )
    op.create_index("ix_audit_log_at", "audit_log", ["at"], unique=False)
    op.create_index("ix_audit_log_object", "audit_log", ["kind", "name", "at"], unique=False)
    op.create_table(
        "cluster_queues",
        sa.Column("name", sa.String(length=253), nullable=False),
        sa.Column("cohort", sa.String(length=253), nullable=True),
        sa.Column("queueing_strategy", sa.String(length=16), nullable=False),
        sa.Column("stop_policy", sa.String(length=16), server_default="None", nullable=False),
        sa.Column("manifest", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("generation", sa.BigInteger(), server_default=sa.text("1"), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint(
            "queueing_strategy IN ('StrictFIFO', 'BestEffortFIFO')", name=op.f("ck_cluster_queues_strategy")
        ),
        sa.CheckConstraint(
            "stop_policy IN ('None', 'Hold', 'HoldAndDrain')", name=op.f("ck_cluster_queues_stop_policy")
        ),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_cluster_queues")),
    )
    op.create_index(op.f("ix_cluster_queues_cohort"), "cluster_queues", ["cohort"], unique=False)
    op.create_table(
        "cohorts",
        sa.Column("name", sa.String(length=253), nullable=False),
        sa.Column("parent_name", sa.String(length=253), nullable=True),
        sa.Column("manifest", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("generation", sa.BigInteger(), server_default=sa.text("1"), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint("parent_name IS NULL OR parent_name <> name", name=op.f("ck_cohorts_not_own_parent")),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_cohorts")),
    )
    op.create_table(
        "leader_lease",
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("holder", sa.String(length=253), nullable=False),
        sa.Column("fencing_token", sa.BigInteger(), nullable=False),
        sa.Column("renewed_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("fencing_token > 0", name=op.f("ck_leader_lease_token_positive")),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_leader_lease")),
    )
    op.create_table(
        "local_queues",
        sa.Column("namespace", sa.String(length=63), nullable=False),
        sa.Column("name", sa.String(length=253), nullable=False),
        sa.Column("cluster_queue", sa.String(length=253), nullable=False),
        sa.Column("stop_policy", sa.String(length=16), server_default="None", nullable=False),
        sa.Column("manifest", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("generation", sa.BigInteger(), server_default=sa.text("1"), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint("stop_policy IN ('None', 'Hold', 'HoldAndDrain')", name=op.f("ck_local_queues_stop_policy")),
        sa.PrimaryKeyConstraint("namespace", "name", name=op.f("pk_local_queues")),
    )
    op.create_index(op.f("ix_local_queues_cluster_queue"), "local_queues", ["cluster_queue"], unique=False)
    op.create_table(
        "provisioning_request_configs",
        sa.Column("name", sa.String(length=253), nullable=False),
        sa.Column("provisioning_class_name", sa.String(length=253), nullable=False),
        sa.Column("manifest", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("generation", sa.BigInteger(), server_default=sa.text("1"), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_provisioning_request_configs")),
    )
    op.create_table(
        "resource_flavors",
        sa.Column("name", sa.String(length=253), nullable=False),
        sa.Column("manifest", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("generation", sa.BigInteger(), server_default=sa.text("1"), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_resource_flavors")),
    )
    op.create_table(
        "workload_priority_classes",
        sa.Column("name", sa.String(length=253), nullable=False),
        sa.Column("value", sa.Integer(), nullable=False),
        sa.Column("manifest", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("generation", sa.BigInteger(), server_default=sa.text("1"), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_workload_priority_classes")),
    )
    op.create_table(
        "workloads",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("job_uid", sa.String(length=64), nullable=False),
        sa.Column("api_version", sa.String(length=253), nullable=False),
        sa.Column("kind", sa.String(length=63), nullable=False),
        sa.Column("namespace", sa.String(length=63), nullable=False),
        sa.Column("name", sa.String(length=253), nullable=False),
        sa.Column("local_queue", sa.String(length=253), nullable=True),
        sa.Column("cluster_queue", sa.String(length=253), nullable=True),
        sa.Column("priority", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("pod_sets", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column(
            "labels", postgresql.JSONB(astext_type=sa.Text()), server_default=sa.text("'{}'::jsonb"), nullable=False
        ),
        sa.Column("state", sa.String(length=16), server_default="Pending", nullable=False),
        sa.Column("queue_ts", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("admitted_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("assigned_flavors", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("reason", sa.String(length=63), nullable=True),
        sa.Column("message", sa.Text(), nullable=True),
        sa.CheckConstraint(
            "(state = 'Admitted') = (admitted_at IS NOT NULL)", name=op.f("ck_workloads_admitted_has_time")
        ),
        sa.CheckConstraint("state IN ('Pending', 'Admitted', 'Finished')", name=op.f("ck_workloads_state")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_workloads")),
        sa.UniqueConstraint("job_uid", name=op.f("uq_workloads_job_uid")),
    )
    op.create_index("ix_workloads_namespace_name", "workloads", ["namespace", "name"], unique=False)
    op.create_index(
        "ix_workloads_pending_order",
        "workloads",
        ["cluster_queue", sa.literal_column("priority DESC"), "queue_ts", "id"],
        unique=False,
        postgresql_where=sa.text("state = 'Pending'"),
    )
    op.create_table(
        "admissions",
        sa.Column("workload_id", sa.BigInteger(), nullable=False),
        sa.Column("flavor", sa.String(length=253), nullable=False),
        sa.Column("resource", sa.String(length=253), nullable=False),
        sa.Column("cluster_queue", sa.String(length=253), nullable=False),
        sa.Column("quantity", sa.Numeric(precision=38, scale=0), nullable=False),
        sa.CheckConstraint("quantity >= 0", name=op.f("ck_admissions_quantity_non_negative")),
        sa.ForeignKeyConstraint(
            ["workload_id"], ["workloads.id"], name=op.f("fk_admissions_workload_id_workloads"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("workload_id", "flavor", "resource", name=op.f("pk_admissions")),
    )
    op.create_index(op.f("ix_admissions_cluster_queue"), "admissions", ["cluster_queue"], unique=False)
    op.create_table(
        "cluster_queue_quotas",
        sa.Column("cluster_queue", sa.String(length=253), nullable=False),
        sa.Column("flavor", sa.String(length=253), nullable=False),
        sa.Column("resource", sa.String(length=253), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("nominal", sa.Numeric(precision=38, scale=0), nullable=False),
        sa.Column("borrowing_limit", sa.Numeric(precision=38, scale=0), nullable=True),
        sa.Column("lending_limit", sa.Numeric(precision=38, scale=0), nullable=True),
        sa.CheckConstraint(
            "borrowing_limit IS NULL OR borrowing_limit >= 0",
            name=op.f("ck_cluster_queue_quotas_borrowing_non_negative"),
        ),
        sa.CheckConstraint(
            "lending_limit IS NULL OR lending_limit <= nominal",
            name=op.f("ck_cluster_queue_quotas_lending_within_nominal"),
        ),
        sa.CheckConstraint(
            "lending_limit IS NULL OR lending_limit >= 0", name=op.f("ck_cluster_queue_quotas_lending_non_negative")
        ),
        sa.CheckConstraint("nominal >= 0", name=op.f("ck_cluster_queue_quotas_nominal_non_negative")),
        sa.ForeignKeyConstraint(
            ["cluster_queue"],
            ["cluster_queues.name"],
            name=op.f("fk_cluster_queue_quotas_cluster_queue_cluster_queues"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("cluster_queue", "flavor", "resource", name=op.f("pk_cluster_queue_quotas")),
    )
    op.create_table(
        "cohort_quotas",
        sa.Column("cohort", sa.String(length=253), nullable=False),
        sa.Column("flavor", sa.String(length=253), nullable=False),
        sa.Column("resource", sa.String(length=253), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("nominal", sa.Numeric(precision=38, scale=0), nullable=False),
        sa.Column("borrowing_limit", sa.Numeric(precision=38, scale=0), nullable=True),
        sa.Column("lending_limit", sa.Numeric(precision=38, scale=0), nullable=True),
        sa.CheckConstraint(
            "borrowing_limit IS NULL OR borrowing_limit >= 0", name=op.f("ck_cohort_quotas_borrowing_non_negative")
        ),
        sa.CheckConstraint(
            "lending_limit IS NULL OR lending_limit <= nominal", name=op.f("ck_cohort_quotas_lending_within_nominal")
        ),
        sa.CheckConstraint(
            "lending_limit IS NULL OR lending_limit >= 0", name=op.f("ck_cohort_quotas_lending_non_negative")
        ),
        sa.CheckConstraint("nominal >= 0", name=op.f("ck_cohort_quotas_nominal_non_negative")),
        sa.ForeignKeyConstraint(
            ["cohort"], ["cohorts.name"], name=op.f("fk_cohort_quotas_cohort_cohorts"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("cohort", "flavor", "resource", name=op.f("pk_cohort_quotas")),
    )
    op.create_table(
        "usage_ledger",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("workload_id", sa.BigInteger(), nullable=True),
        sa.Column("workload", sa.String(length=317), nullable=False),
        sa.Column("namespace", sa.String(length=63), nullable=False),
        sa.Column("cluster_queue", sa.String(length=253), nullable=False),
        sa.Column("local_queue", sa.String(length=253), nullable=True),
        sa.Column("flavor", sa.String(length=253), nullable=False),
        sa.Column("resource", sa.String(length=253), nullable=False),
        sa.Column("quantity", sa.Numeric(precision=38, scale=0), nullable=False),
        sa.Column(
            "labels", postgresql.JSONB(astext_type=sa.Text()), server_default=sa.text("'{}'::jsonb"), nullable=False
        ),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("ended_at IS NULL OR ended_at >= started_at", name=op.f("ck_usage_ledger_ends_after_start")),
        sa.CheckConstraint("quantity >= 0", name=op.f("ck_usage_ledger_quantity_non_negative")),
        sa.ForeignKeyConstraint(
            ["workload_id"], ["workloads.id"], name=op.f("fk_usage_ledger_workload_id_workloads"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_usage_ledger")),
    )
    op.create_index(
        "ix_usage_ledger_open",
        "usage_ledger",
        ["workload_id", "flavor", "resource"],
        unique=True,
        postgresql_where=sa.text("ended_at IS NULL"),
    )
    op.create_index("ix_usage_ledger_started_at", "usage_ledger", ["started_at"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_usage_ledger_started_at", table_name="usage_ledger")
    op.drop_index("ix_usage_ledger_open", table_name="usage_ledger", postgresql_where=sa.text("ended_at IS NULL"))
    op.drop_table("usage_ledger")
    op.drop_table("cohort_quotas")
    op.drop_table("cluster_queue_quotas")
    op.drop_index(op.f("ix_admissions_cluster_queue"), table_name="admissions")
    op.drop_table("admissions")
    op.drop_index("ix_workloads_pending_order", table_name="workloads", postgresql_where=sa.text("state = 'Pending'"))
    op.drop_index("ix_workloads_namespace_name", table_name="workloads")
    op.drop_table("workloads")
    op.drop_table("workload_priority_classes")
    op.drop_table("resource_flavors")
    op.drop_table("provisioning_request_configs")
    op.drop_index(op.f("ix_local_queues_cluster_queue"), table_name="local_queues")
    op.drop_table("local_queues")
    op.drop_table("leader_lease")
    op.drop_table("cohorts")
    op.drop_index(op.f("ix_cluster_queues_cohort"), table_name="cluster_queues")
    op.drop_table("cluster_queues")
    op.drop_index("ix_audit_log_object", table_name="audit_log")
    op.drop_index("ix_audit_log_at", table_name="audit_log")
    op.drop_table("audit_log")
    op.drop_table("admission_checks")
