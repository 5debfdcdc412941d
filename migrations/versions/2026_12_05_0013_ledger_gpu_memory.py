"""The ledger's GPU memory: each run's peak, its GPU's size and its mean, for right-sizing.

Why: ``turnstile rightsize`` tells which workloads would have fitted a smaller MIG slice from
what they used (dcgm-exporter's ``DCGM_FI_DEV_FB_USED`` and ``_FB_FREE``), so each run keeps its
busiest GPU's peak memory and size (MiB, None where nothing was measured) and the seconds its
memory was measured with those seconds times the MiB used (the mean's numerator), added by the
leader after each utilisation read and set whole when the run ends
(``admission.controller.features.metering``).

Locking risk: ADD COLUMN of a nullable column, or with a constant default, is a catalog-only
change on PostgreSQL 11+ (brief ACCESS EXCLUSIVE lock, no table rewrite).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-05
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("usage_ledger", sa.Column("memory_peak_mib", sa.Float(), nullable=True))
    op.add_column("usage_ledger", sa.Column("memory_total_mib", sa.Float(), nullable=True))
    op.add_column("usage_ledger", sa.Column("memory_seconds", sa.Float(), server_default=sa.text("0"), nullable=False))
    op.add_column(
        "usage_ledger", sa.Column("memory_mib_seconds", sa.Float(), server_default=sa.text("0"), nullable=False)
    )


def downgrade() -> None:
    op.drop_column("usage_ledger", "memory_mib_seconds")
    op.drop_column("usage_ledger", "memory_seconds")
    op.drop_column("usage_ledger", "memory_total_mib")
    op.drop_column("usage_ledger", "memory_peak_mib")
