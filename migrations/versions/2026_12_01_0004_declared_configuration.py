"""Declared configuration: which source of truth is in force, and ClusterQueues being deleted.

Why: queues as Kubernetes objects. In a cluster that serves Kueue's CRDs the Kubernetes objects
are what admins declare and the controller reconciles them into these tables; the admin CLI must
know that (it then refuses to write and names the kubectl command), so the mode is recorded here
(`settings`, one row per key). A ClusterQueue deleted with kubectl is kept by its finalizer while
admitted workloads use it; meanwhile it admits nothing new (Kueue's Terminating), which the
scheduler must see after a restart too (`cluster_queues.deleting_at`).

Locking risk: low. A new small table, and one nullable column without a default (a catalog-only
change; the ACCESS EXCLUSIVE lock on `cluster_queues` is held only for it).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "settings",
        sa.Column("key", sa.String(length=63), nullable=False),
        sa.Column("value", sa.String(length=253), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_settings")),
    )
    op.add_column("cluster_queues", sa.Column("deleting_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column("cluster_queues", "deleting_at")
    op.drop_table("settings")
