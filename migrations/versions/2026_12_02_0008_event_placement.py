"""Where an admission placed its pods, on the workload's Admitted event.

Why: topology-aware placement decides, per pod set, how many pods run on each node; the
workload row keeps the current placement (``assigned_flavors.placement``), and the history keeps
each admission's, so `turnstile simulate --engine cluster` reports it as engine core does
(each Admitted event's ``placement``) and `describe workload` can show where earlier admissions
ran after a node was lost.

Locking risk: ADD COLUMN of a nullable column without a default is a catalog-only change
(brief ACCESS EXCLUSIVE lock, no table rewrite).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("workload_events", sa.Column("placement", postgresql.JSONB(astext_type=sa.Text()), nullable=True))


def downgrade() -> None:
    op.drop_column("workload_events", "placement")
