"""Stopping and resuming one workload (Kueue's ``spec.active``; ``turnstile stop|resume workload``).

The request is stored by whoever asks (``admission.store.activity``) and applied by the leader:
a stopped workload gives its quota back at once (its job is suspended, Evicted with Kueue's
reason ``Deactivated``) and is never admitted while stopped, across a controller restart; resumed,
it queues again. A request made while no controller runs is applied by the next leader.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

from sqlalchemy import select, text

from admission.store import activity, config, database, tables
from tests.admission.controller.test_restart import running, suspended
from tests.admission.controller.world import CONFIG, World, eventually, job, world
from tests.admission.runner import turnstile


async def _cli(w: World, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TURNSTILE_DATABASE_URL": w.url, "TURNSTILE_ACTOR": "alice"}
    return await asyncio.to_thread(turnstile, *args, env=env)


async def _ask(w: World, name: str, *, active: bool) -> config.Outcome:
    async with database.transaction(w.sessions) as s:
        return await activity.request(s, "ml", name, active=active, actor="alice")


async def _row(w: World, name: str) -> tuple[str, bool, str | None]:
    async with database.transaction(w.sessions) as s:
        row = (
            await s.execute(
                select(tables.Workload.state, tables.Workload.active, tables.Workload.reason).where(
                    tables.Workload.name == name
                )
            )
        ).one()
    return row.state, row.active, row.reason


async def _evictions(w: World, name: str) -> list[tuple[str, str]]:
    async with database.transaction(w.sessions) as s:
        rows = await s.execute(
            text(
                "SELECT e.reason, e.detail FROM workload_events e JOIN workloads w ON w.id = e.workload_id "
                "WHERE w.name = :name AND e.type = 'Evicted' ORDER BY e.id"
            ),
            {"name": name},
        )
        return [(r.reason, r.detail) for r in rows]


async def test_a_stopped_workload_frees_its_quota_stays_stopped_across_a_restart_and_resumes(
    tmp_path: Path, migrated_url: str
) -> None:
    async with world(tmp_path, migrated_url) as w:
        await w.apply(CONFIG)
        first = w.start_controller("replica-1")
        await w.create(job("train", gpus=8))
        await eventually(lambda: running(w, "train"), what="train to run")
        await w.create(job("next", gpus=8, runtime=300))  # 3 s at the time scale
        await w.create(job("later", gpus=8))

        stopped = await _cli(w, "stop", "workload", "ml/train")
        assert stopped.returncode == 0, stopped.stderr
        name = stopped.stdout.split()[0].removeprefix("workload/ml/")  # (as kubectl get workloads shows it)
        assert name.startswith("job-train-") and stopped.stdout.split()[1] == "stopped", stopped.stdout
        assert (await _ask(w, name, active=False)).result == "unchanged"  # (already asked: by its object name)
        await eventually(lambda: suspended(w, "train"), what="the stopped job to be suspended")
        await eventually(lambda: running(w, "next"), what="the next job to run in the quota it freed")
        assert await _evictions(w, "train") == [("Deactivated", "Deactivated")]
        state, active, reason = await _row(w, "train")
        assert (state, active, reason) == ("Pending", False, "Inactive")

        # A pending workload stopped while no controller runs: the next leader applies it.
        await w.stop_controller(first)
        assert (await _ask(w, "later", active=False)).result == "stopped"
        w.start_controller("replica-2")
        await eventually(lambda: _row(w, "later"), what="later's row")
        await eventually(
            lambda: _is(w, "later", ("Pending", False, "Inactive")), what="later stopped by the new leader"
        )

        # next finishes: neither stopped workload takes its quota.
        await eventually(lambda: _is(w, "next", ("Finished",)), timeout=20, what="next to finish")
        assert await suspended(w, "train") and await suspended(w, "later")
        assert (await _row(w, "train"))[:2] == ("Pending", False)

        resumed = await _cli(w, "resume", "wl", f"ml/{name}")
        assert resumed.returncode == 0 and resumed.stdout.strip() == f"workload/ml/{name} resumed", resumed
        await eventually(lambda: running(w, "train"), what="the resumed job to run again")
        assert (await _row(w, "later"))[:2] == ("Pending", False)
        async with database.transaction(w.sessions) as s:
            left = (await s.execute(select(tables.ActivityRequest.workload_id))).all()
            audited = (
                await s.execute(
                    select(tables.AuditEntry.actor, tables.AuditEntry.after).where(tables.AuditEntry.kind == "Workload")
                )
            ).all()
        assert left == [], "applied requests are taken"
        history = (await _cli(w, "history", f"workload/ml/{name}")).stdout
        assert f"alice  update  workload/ml/{name}" in history and "+  active: false" in history, history
        assert (await _cli(w, "history", "workload/ml/train")).stdout == history  # by its job's name too
        assert sorted((who, after["spec"]["active"]) for who, after in audited) == [
            ("alice", False),
            ("alice", False),
            ("alice", True),
        ]


async def _is(w: World, name: str, expected: tuple[object, ...]) -> bool:
    return (await _row(w, name))[: len(expected)] == expected
