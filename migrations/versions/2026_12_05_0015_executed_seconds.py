"""How long each workload's job has run in its admissions that ended (Kueue's
``accumulatedPastExecutionTimeSeconds``).

Why: a workload evicted and admitted again carries the time it already ran, for its Workload
object's status and for ``kueue_execution_time_seconds`` (first admission to completion, across
evictions) when it finishes; kept here so a restart or fail-over does not forget it.

Locking risk: ADD COLUMN with a constant default is a catalogue change in PostgreSQL >= 11 (no
table rewrite); it takes an ACCESS EXCLUSIVE lock on ``workloads`` for that instant.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-05
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "workloads",
        sa.Column("executed_seconds", sa.Float(), server_default=sa.text("0"), nullable=False),
    )


def downgrade() -> None:
    op.drop_column("workloads", "executed_seconds")
