"""Who asked to delete a queue object: the deleting user, for the audit log.

Why: a Kueue queue object deleted with kubectl is removed from PostgreSQL by the leader when it
reconciles the deletion, and was audited under the object's last editor. The DELETE admission
review is the only place the deleting user is known (it cannot change the object); the webhook
replica that receives it writes the user here, and the reconciler takes it (deleting the row) in
the transaction that deletes the object and writes its audit entry.

Locking risk: CREATE TABLE of a new, empty table; nothing else is touched.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-04
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "deletion_requests",
        sa.Column("kind", sa.String(63), nullable=False),
        sa.Column("name", sa.String(253 + 64), nullable=False),
        sa.Column("uid", sa.String(64), nullable=False),
        sa.Column("actor", sa.String(253), nullable=False),
        sa.Column("requested_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.PrimaryKeyConstraint("kind", "name", name=op.f("pk_deletion_requests")),
    )


def downgrade() -> None:
    op.drop_table("deletion_requests")
