"""A GPU-hour budget may run new work at a lower priority once spent instead of holding it.

Why: holding a team's work back while GPUs sit free wastes them; ``lower_priority`` (NULL: hold,
as before) is the priority the budget's new work runs at once it is spent, so it queues behind
and is preempted by work of a higher priority (``queues.cycle.budget_priority``).

Locking risk: ADD COLUMN of a nullable column without a default is a catalog-only change
(brief ACCESS EXCLUSIVE lock on a small table, no rewrite).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("gpu_budgets", sa.Column("lower_priority", sa.Integer(), nullable=True))


def downgrade() -> None:
    op.drop_column("gpu_budgets", "lower_priority")
