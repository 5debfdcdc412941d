"""GPU-hour budgets, per ClusterQueue or per team label, per period.

Why: a platform team caps what a team or queue may run in a month (Kueue has had this request
open since 2022, kubernetes-sigs/kueue#28). A budget is an admin edit like a quota: kept here,
audited in `audit_log` (kind `GPUBudget`), edited with `turnstile budget`; the controller
compares it with the usage ledger and holds new work of an exhausted budget back
(`BudgetExhausted`); running work is never stopped by it.

Locking risk: none. A new table.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "gpu_budgets",
        sa.Column("name", sa.String(length=317), nullable=False),
        sa.Column("cluster_queue", sa.String(length=253), nullable=True),
        sa.Column(
            "labels", postgresql.JSONB(astext_type=sa.Text()), server_default=sa.text("'{}'::jsonb"), nullable=False
        ),
        sa.Column("gpu_hours", sa.Numeric(), nullable=False),
        sa.Column("period", sa.String(length=32), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint("gpu_hours >= 0", name=op.f("ck_gpu_budgets_gpu_hours_non_negative")),
        sa.CheckConstraint(
            "(cluster_queue IS NULL) <> (labels = '{}'::jsonb)", name=op.f("ck_gpu_budgets_one_selector")
        ),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_gpu_budgets")),
    )


def downgrade() -> None:
    op.drop_table("gpu_budgets")
