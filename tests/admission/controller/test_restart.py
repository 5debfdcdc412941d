"""Restarts and relists: a new controller (or an informer that lists again) finds existing jobs in
every state and converges, as the README promises.

The simulated API server lists built-in kinds as the real one does (no ``kind``/``apiVersion`` on
the items), so a controller that depended on an item's TypeMeta would ignore every existing batch
Job after a restart: admitted work would keep its quota forever and nothing would start.

A controller without enactor workers (``workers=0``) commits decisions but never patches a job:
stopping it leaves exactly what a crash between the commit and the patch leaves.
"""

from __future__ import annotations

import time
from pathlib import Path

from sqlalchemy import select

from admission.sim.server.faults import Faults
from admission.store import database, tables
from tests.admission.controller.world import CONFIG, World, eventually, job, world


async def states(w: World) -> dict[str, str]:
    async with database.transaction(w.sessions) as s:
        return dict((await s.execute(select(tables.Workload.name, tables.Workload.state))).all())


async def running(w: World, name: str) -> bool:
    j = await w.get(name)
    return not j["spec"]["suspend"] and int((j.get("status") or {}).get("active") or 0) > 0


async def suspended(w: World, name: str) -> bool:
    j = await w.get(name)
    return bool(j["spec"]["suspend"]) and not (j.get("status") or {}).get("active")


async def test_a_restart_finds_jobs_in_every_state_and_converges(tmp_path: Path, migrated_url: str) -> None:
    async with world(tmp_path, migrated_url) as w:
        await w.apply(CONFIG)
        first = w.start_controller("replica-1")
        # Running, and one that will finish while no controller runs.
        await w.create(job("low-1", gpus=4))
        await w.create(job("short", gpus=4, runtime=150))  # 1.5 s at the time scale of 0.01
        await eventually(lambda: running(w, "low-1"), what="low-1 to run")
        await eventually(lambda: running(w, "short"), what="short to run")
        await w.stop_controller(first)
        assert (await states(w))["short"] == "Admitted"
        await eventually(lambda: _complete(w, "short"), timeout=15, what="short to complete with no controller")

        # A controller that commits but never patches: a crash between commit and patch.
        frozen = w.start_controller("replica-2", workers=0)
        await w.create(job("high", gpus=8, priority="high"))  # evicts low-1 in the store only
        await w.create(job("waiting", gpus=8))  # pending behind high
        await eventually(lambda: _state_is(w, "high", "Admitted"), what="high admitted in the store")
        assert (await states(w))["low-1"] == "Pending"
        assert await running(w, "low-1"), "nothing was enacted: the evicted job still runs"
        assert await suspended(w, "high"), "nothing was enacted: the admitted job is still suspended"
        await w.stop_controller(frozen)

        # The restart: every existing job is listed (items without TypeMeta) and reconciled.
        w.start_controller("replica-3")
        await eventually(lambda: _state_is(w, "short", "Finished"), what="the finished job's quota released")
        await eventually(lambda: suspended(w, "low-1"), what="the evicted job to be suspended")
        await eventually(lambda: running(w, "high"), timeout=15, what="the admitted job to start once low-1 stopped")
        assert await suspended(w, "waiting")
        final = await states(w)
        assert (final["low-1"], final["waiting"], final["high"]) == ("Pending", "Pending", "Admitted")
        async with database.transaction(w.sessions) as s:
            held = (await s.execute(select(tables.Admission.workload_id))).scalars().all()
        assert len(held) == 1, "only high holds quota"


async def test_a_relist_after_410_keeps_every_job_known(tmp_path: Path, migrated_url: str) -> None:
    async with world(tmp_path, migrated_url) as w:
        await w.apply(CONFIG)
        controller = w.start_controller("replica-1")
        await w.create(job("first", gpus=8, runtime=150))
        await eventually(lambda: running(w, "first"), what="first to run")
        await w.create(job("second", gpus=8, runtime=50))
        await eventually(lambda: _state_is(w, "second", "Pending"), what="second to wait")
        relists = sum(i.relists for i in controller.informers)
        w.host.server.store.compact()  # the next watch from an old resourceVersion gets 410 Gone
        w.host.server.drop_watches()
        await eventually(
            lambda: sum(i.relists for i in controller.informers) > relists, what="the informers to list again"
        )
        # Every job is still known: the first finishes and releases its quota, the second starts.
        await eventually(lambda: _state_is(w, "first", "Finished"), timeout=15, what="first to finish")
        await eventually(lambda: _state_is(w, "second", "Finished"), timeout=15, what="second to run and finish")


async def _complete(w: World, name: str) -> bool:
    j = await w.get(name)
    return any(
        c.get("type") == "Complete" and c.get("status") == "True"
        for c in (j.get("status") or {}).get("conditions") or []
    )


async def _state_is(w: World, name: str, state: str) -> bool:
    return (await states(w)).get(name) == state


async def test_repeated_preemptions_send_nothing_the_api_server_refuses(tmp_path: Path, migrated_url: str) -> None:
    """Every eviction is a suspend and then a restore computed from the job as it is: none is sent
    twice, so the controller's own calls get no 4xx through a run full of preemptions. The watch
    lags writes as a real API server's watch cache does, so the answer to a write regularly
    arrives before the events of the Job controller's earlier status updates."""
    async with world(tmp_path, migrated_url, faults=Faults(watch_delay=0.03)) as w:
        await w.apply(CONFIG)
        controller = w.start_controller("replica-1")
        names = [f"low-{i}" for i in range(6)]
        for name in names:
            await w.create(job(name, gpus=4, runtime=200))  # 2 s, from 0 again after each eviction
        for wave in range(4):
            await eventually(lambda: _lows_hold_the_quota(w), what="low jobs to hold the whole quota")
            names.append(f"high-{wave}")
            await w.create(job(names[-1], gpus=8, runtime=20, priority="high"))
            await eventually(lambda n=names[-1]: _state_is(w, n, "Finished"), timeout=15, what=f"{names[-1]} to run")
        for name in names:
            await eventually(lambda n=name: _state_is(w, n, "Finished"), timeout=30, what=f"{name} to finish")
        async with database.transaction(w.sessions) as s:
            evictions = (
                await s.execute(select(tables.WorkloadEvent.id).where(tables.WorkloadEvent.type == "Evicted"))
            ).all()
        assert len(evictions) >= 8, "every high job preempted both low jobs of its wave"
        # (GET 404: the lists of kinds this cluster does not serve, Kueue's CRDs; nothing else refused)
        refused = {k: n for k, n in w.controller_kube.answers.items() if 400 <= k[1] < 500 and k != ("GET", 404)}
        assert refused == {}, f"the controller's calls were refused: {refused}"
        assert controller.enactor.patches > 0


async def _lows_hold_the_quota(w: World) -> bool:
    async with database.transaction(w.sessions) as s:
        held = (
            await s.execute(
                select(tables.Workload.name, tables.Admission.quantity).join(
                    tables.Workload, tables.Workload.id == tables.Admission.workload_id
                )
            )
        ).all()
    return sum(q for name, q in held if name.startswith("low-")) >= 8000


async def test_a_new_term_acts_at_once(tmp_path: Path, migrated_url: str) -> None:
    """A term used to wait ~5 s before its first patch (its lease looked unconfirmed after a slow
    start). Now a replica asks for the lease only once it has listed everything, and confirms it
    again right after the term begins: a job waiting at the restart starts within a second."""
    async with world(tmp_path, migrated_url) as w:
        await w.apply(CONFIG)
        frozen = w.start_controller("replica-1", workers=0)  # admits in the store, patches nothing
        await w.create(job("waiting", gpus=4))
        await eventually(lambda: _state_is(w, "waiting", "Admitted"), what="admitted in the store")
        await w.stop_controller(frozen)
        controller = w.start_controller("replica-2", lease_ttl=15.0)
        await eventually(lambda: controller.term is not None, timeout=10, what="a new term")
        began = time.monotonic()
        await eventually(lambda: running(w, "waiting"), timeout=5, what="the job started by the new term")
        assert time.monotonic() - began < 1.0, "the new term waited before acting"
