"""The ledger's started and used GPU-hours: when a held admission's job began to run, and how
busy its GPUs were measured to be.

Why: a row's ``started_at``..``ended_at`` is quota *held* (requested), which includes waiting for
an admission check or for preempted workloads to stop; ``running_at`` is when Kubernetes showed
the job running under that admission (*started*). ``measured_seconds`` is how much of the run
DCGM data covered and ``busy_seconds`` that time weighted by the measured utilisation (*used*),
added by the leader after each utilisation read (``admission.controller.features.metering``).

Locking risk: ADD COLUMN of a nullable column, or with a constant default, is a catalog-only
change on PostgreSQL 11+ (brief ACCESS EXCLUSIVE lock, no table rewrite).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("usage_ledger", sa.Column("running_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column(
        "usage_ledger",
        sa.Column("measured_seconds", sa.Float(), server_default=sa.text("0"), nullable=False),
    )
    op.add_column(
        "usage_ledger",
        sa.Column("busy_seconds", sa.Float(), server_default=sa.text("0"), nullable=False),
    )


def downgrade() -> None:
    op.drop_column("usage_ledger", "busy_seconds")
    op.drop_column("usage_ledger", "measured_seconds")
    op.drop_column("usage_ledger", "running_at")
