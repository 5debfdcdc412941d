"""Where an install's queue configuration is declared: in PostgreSQL, or as Kubernetes objects.

One source of truth per install, so the two paths never disagree:

- ``database`` (the default; ``turnstile simulate``, a database-only setup, a cluster without
  Kueue's CRDs): ``turnstile apply/quota/stop/resume/delete`` write PostgreSQL, as always;
- ``kubernetes`` (a cluster serving Kueue's CRDs, ``kueue.x-k8s.io/v1beta2``): the objects in
  the cluster are what admins declare (kubectl, Argo CD, Flux, RBAC). The controller reconciles
  each into PostgreSQL through the same validated, audited path (``admission.controller.objects.declared``)
  and the CLI's writing commands refuse, naming the kubectl command to run instead.

The controller switches an install to ``kubernetes`` when it finds the CRDs served (first
exporting what PostgreSQL holds, so nothing declared before is lost), and back to ``database``
when they are removed (deleting a CRD deletes its objects; PostgreSQL keeps the configuration).
Each switch is in the audit log.
"""

from __future__ import annotations

from sqlalchemy import func
from sqlalchemy.ext.asyncio import AsyncSession

from admission.store import config, tables

SETTING = "config_source"
DATABASE, KUBERNETES = "database", "kubernetes"


async def get(session: AsyncSession) -> str:
    row = await session.get(tables.Setting, SETTING, populate_existing=True)
    return row.value if row is not None else DATABASE


async def put(session: AsyncSession, value: str, *, actor: str, why: str) -> bool:
    """Declare the configuration's source; True if it changed (audited, listeners told)."""
    if value not in (DATABASE, KUBERNETES):
        raise ValueError(f"config_source must be {DATABASE} or {KUBERNETES}, not {value!r}")
    await config.lock(session)
    row = await session.get(tables.Setting, SETTING, populate_existing=True)
    before = row.value if row is not None else DATABASE
    if before == value:
        return False
    if row is None:
        session.add(tables.Setting(key=SETTING, value=value))
    else:
        row.value = value
        row.updated_at = func.now()
    session.add(
        tables.AuditEntry(
            actor=actor,
            action="update",
            kind="Setting",
            name=SETTING,
            before={"value": before},
            after={"value": value, "why": why},
        )
    )
    await config.notify(session, f"Setting/{SETTING}")
    await session.flush()
    return True


async def require_database(session: AsyncSession, instead: str) -> None:
    """Refuse a CLI edit when Kubernetes declares the configuration; ``instead`` is the kubectl
    command that makes the same change there."""
    if await get(session) == KUBERNETES:
        raise config.Refused(
            "this install declares its queues as Kubernetes objects (kueue.x-k8s.io/v1beta2), so edits go "
            f"through the API server, where they are validated and audited with your user name; run: {instead}"
        )
