"""Partial admission and waitForPodsReady: how many pods were admitted, and when they were all Ready.

Why: a batch Job with `kueue.x-k8s.io/job-min-parallelism` may be admitted with fewer pods than it
asks for; the count admitted is part of the admission (kept in `workloads.assigned_flavors`, a
JSON document, as `counts`) and of the history the reports read (`workload_events.counts`).
waitForPodsReady evicts a workload whose pods are not all Ready in time, and one that was Ready
and lost a pod after its recovery timeout: whether it ever was Ready must survive a restart
(`workloads.pods_ready_at`).

Locking risk: low. Two nullable columns without defaults (catalog-only changes; the ACCESS
EXCLUSIVE locks on `workload_events` and `workloads` are held only for them).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("workload_events", sa.Column("counts", postgresql.JSONB(astext_type=sa.Text()), nullable=True))
    op.add_column("workloads", sa.Column("pods_ready_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column("workloads", "pods_ready_at")
    op.drop_column("workload_events", "counts")
