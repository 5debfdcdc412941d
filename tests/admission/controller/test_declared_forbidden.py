"""A real API server refuses lists with 403 while RBAC loads (its first second) or when RBAC is
missing: that is not "Kueue's CRDs are not served", so the leader must not switch the install's
configuration source (nor delete anything); it waits until it may list again."""

from __future__ import annotations

from pathlib import Path

from admission.controller.objects.declared import Declared
from admission.controller.readiness import DatabaseHealth
from admission.kube import client as kube_client
from admission.kube.client import Kube
from admission.sim.host import write_kubeconfig
from admission.store import database


async def test_a_forbidden_list_changes_nothing(tmp_path: Path) -> None:
    # Nothing answers at either address: any request or query the step made would fail the test.
    kube = Kube(await kube_client.connect(write_kubeconfig(tmp_path / "kubeconfig", "http://127.0.0.1:9")))
    engine = database.make_engine("postgresql+asyncpg://nobody@127.0.0.1:9/none")
    try:
        declared = Declared(kube, database.sessions(engine), leading=lambda: True, database_health=DatabaseHealth())
        for informer in declared.informers.values():
            informer.synced.set()
        forbidden = declared.informers["ClusterQueue"]
        forbidden.absent = forbidden.forbidden = True
        declared.pending[("ClusterQueue", "team-a")] = [None]  # as if its DELETED had been delivered
        await declared.step()
        assert declared.source is None  # the source was neither read nor switched
        assert declared.pending == {("ClusterQueue", "team-a"): [None]}  # nothing applied or deleted
    finally:
        await kube.close()
        await engine.dispose()
