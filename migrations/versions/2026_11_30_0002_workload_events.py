"""Workload events: every admission, eviction and finish, for history, Events and engine cluster reports.

Why: `turnstile describe workload` shows a workload's admissions and evictions (why, by
whom), and `turnstile simulate --engine cluster` reports the controller's decisions from
them; both need the decisions as they were committed, not reconstructed afterwards.

Locking risk: low. It creates one new table with its indexes; no existing table is locked
beyond the brief SHARE ROW EXCLUSIVE lock that the foreign key to `workloads` takes.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "workload_events",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("workload_id", sa.BigInteger(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("type", sa.String(length=16), nullable=False),
        sa.Column("cluster_queue", sa.String(length=253), nullable=True),
        sa.Column("flavors", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("borrowing", sa.Boolean(), nullable=True),
        sa.Column("reason", sa.String(length=63), nullable=True),
        sa.Column("detail", sa.String(length=63), nullable=True),
        sa.Column("by_workload", sa.String(length=317), nullable=True),
        sa.CheckConstraint("type IN ('Admitted', 'Evicted', 'Finished')", name=op.f("ck_workload_events_type")),
        sa.ForeignKeyConstraint(
            ["workload_id"],
            ["workloads.id"],
            name=op.f("fk_workload_events_workload_id_workloads"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_workload_events")),
    )
    op.create_index("ix_workload_events_at", "workload_events", ["at"], unique=False)
    op.create_index("ix_workload_events_workload", "workload_events", ["workload_id", "id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_workload_events_workload", table_name="workload_events")
    op.drop_index("ix_workload_events_at", table_name="workload_events")
    op.drop_table("workload_events")
