"""Fair sharing's history: each queue's decayed usage.

Why: Kueue orders a ClusterQueue's workloads by how much their LocalQueue used lately (admission
fair sharing) and keeps that history in memory and in the LocalQueue's status; Turnstile keeps it
here, and the ClusterQueues' history that its usage-aware fair sharing orders by, so a restart or
a fail-over to another replica loses none of it. One row per queue (a LocalQueue's
`namespace/name`, a ClusterQueue's name): the decayed usage (JSON, whole units) as of `updated_at`.

Locking risk: none. A new table, written only by the controller's leader.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "usage_history",
        sa.Column("queue", sa.String(length=317), nullable=False),
        sa.Column(
            "consumed",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("queue", name=op.f("pk_usage_history")),
    )


def downgrade() -> None:
    op.drop_table("usage_history")
