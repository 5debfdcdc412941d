"""The event log takes ``Resized``: an elastic job's admission changed size while it ran.

Why: an elastic batch Job (``kueue.x-k8s.io/elastic-job``) is resized in place when its
parallelism changes (``queues.cycle.elastic``, ``admission.store.workloads.resize``); its history
says when and to how many pods, as ``Admitted``/``Evicted``/``Finished`` rows say the rest.

Locking risk: the CHECK constraint is replaced. The new one is added ``NOT VALID`` (an ACCESS
EXCLUSIVE lock on ``workload_events`` for an instant, no scan) and validated after (a SHARE UPDATE
EXCLUSIVE lock while the table is scanned: writes go on). Downgrade deletes the ``Resized`` rows
(the old constraint cannot hold them).

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-07
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_OLD = "type IN ('Admitted', 'Evicted', 'Finished')"
_NEW = "type IN ('Admitted', 'Evicted', 'Finished', 'Resized')"


def upgrade() -> None:
    op.execute("ALTER TABLE workload_events DROP CONSTRAINT ck_workload_events_type")
    op.execute(f"ALTER TABLE workload_events ADD CONSTRAINT ck_workload_events_type CHECK ({_NEW}) NOT VALID")
    op.execute("ALTER TABLE workload_events VALIDATE CONSTRAINT ck_workload_events_type")


def downgrade() -> None:
    op.execute("DELETE FROM workload_events WHERE type = 'Resized'")
    op.execute("ALTER TABLE workload_events DROP CONSTRAINT ck_workload_events_type")
    op.execute(f"ALTER TABLE workload_events ADD CONSTRAINT ck_workload_events_type CHECK ({_OLD})")
