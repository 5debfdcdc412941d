"""Requests to stop or resume one workload (its ``spec.active``), until the leader applies them.

Why: ``turnstile stop workload`` / ``resume workload`` (kueuectl's verbs) are said by a person on
any machine while the leader holds the scheduler's state in memory; the request waits here (one
per workload, the newest wins) and the leader takes it in the transaction that stores its effect
(the workload's ``active`` flag, and the eviction when it held quota).

Locking risk: CREATE TABLE of a new, empty table; nothing else is touched.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-05
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "activity_requests",
        sa.Column("workload_id", sa.BigInteger(), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("actor", sa.String(253), nullable=False),
        sa.Column("requested_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.ForeignKeyConstraint(
            ["workload_id"],
            ["workloads.id"],
            name=op.f("fk_activity_requests_workload_id_workloads"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("workload_id", name=op.f("pk_activity_requests")),
    )


def downgrade() -> None:
    op.drop_table("activity_requests")
