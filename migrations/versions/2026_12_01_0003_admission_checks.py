"""Admission checks: a workload's checks still to pass, its retries, when it queues again, whether active.

Why: two-phase admission (ProvisioningRequest checks). A workload holding quota whose checks
have not all passed must stay suspended across a controller restart; a workload waiting out a
retry backoff must queue again when it ends, not at once; a rejected one stays deactivated.
The scheduler's memory of these is rebuilt from PostgreSQL like everything else.

Locking risk: low. Four columns with constant defaults (PostgreSQL >= 11 adds them without
rewriting the table); the ACCESS EXCLUSIVE lock on `workloads` is held only for the catalog
change.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "workloads",
        sa.Column(
            "checks", postgresql.JSONB(astext_type=sa.Text()), server_default=sa.text("'[]'::jsonb"), nullable=False
        ),
    )
    op.add_column("workloads", sa.Column("retries", sa.Integer(), server_default=sa.text("0"), nullable=False))
    op.add_column("workloads", sa.Column("requeue_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("workloads", sa.Column("active", sa.Boolean(), server_default=sa.text("true"), nullable=False))


def downgrade() -> None:
    op.drop_column("workloads", "active")
    op.drop_column("workloads", "requeue_at")
    op.drop_column("workloads", "retries")
    op.drop_column("workloads", "checks")
