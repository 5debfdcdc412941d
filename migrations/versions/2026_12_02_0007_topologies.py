"""Kueue's Topology objects, stored like every other queue object.

Why: topology-aware placement reads a ResourceFlavor's `spec.topologyName` and the Topology it
names (levels of node labels). The controller mirrors Topology objects from the API server into
this table (as it does ResourceFlavors), `turnstile apply` writes them, audited, and the
scheduling core reads them with the rest of the configuration.

Locking risk: none. A new table.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "topologies",
        sa.Column("name", sa.String(length=253), nullable=False),
        sa.Column("manifest", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("generation", sa.BigInteger(), server_default=sa.text("1"), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_topologies")),
    )


def downgrade() -> None:
    op.drop_table("topologies")
