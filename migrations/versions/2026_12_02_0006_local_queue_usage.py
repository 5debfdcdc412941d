"""Admission fair sharing: each LocalQueue's decayed usage.

Why: Kueue orders a ClusterQueue's workloads by how much their LocalQueue used lately (admission
fair sharing) and keeps that history in memory and in the LocalQueue's status; Turnstile keeps it
here, so a restart or a fail-over to another replica loses none of it. One row per LocalQueue
(`namespace/name`): the decayed usage per resource (JSON, whole units) as of `updated_at`.

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
        "local_queue_usage",
        sa.Column("local_queue", sa.String(length=317), nullable=False),
        sa.Column(
            "consumed",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("local_queue", name=op.f("pk_local_queue_usage")),
    )


def downgrade() -> None:
    op.drop_table("local_queue_usage")
