"""The controller end to end: jobs in the simulated cluster, decisions in PostgreSQL, enacted on the jobs."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

from sqlalchemy import select

from admission.store import database, tables
from tests.admission.controller.world import CONFIG, eventually, job, world
from tests.admission.runner import turnstile


async def states(w) -> dict[str, str]:  # type: ignore[no-untyped-def]
    async with database.transaction(w.sessions) as s:
        rows = await s.execute(select(tables.Workload.name, tables.Workload.state))
        return dict(rows.all())


async def test_a_queued_job_is_admitted_onto_its_flavor_runs_and_releases_its_quota(
    tmp_path: Path, migrated_url: str
) -> None:
    async with world(tmp_path, migrated_url) as w:
        await w.apply(CONFIG)
        w.start_controller("replica-1")
        await w.create(job("train", gpus=4, runtime=50, node_selector={"zone": "z1"}))

        async def started() -> dict | None:  # type: ignore[type-arg]
            j = await w.get("train")
            return j if not j["spec"]["suspend"] else None

        running = await eventually(started, what="the job to be unsuspended")
        pod = running["spec"]["template"]["spec"]
        assert pod["nodeSelector"] == {"zone": "z1", "gpu": "a100"}
        assert pod["tolerations"] == [{"key": "gpu", "operator": "Equal", "value": "a100", "effect": "NoSchedule"}]
        assert running["metadata"]["annotations"]["turnstile.dev/admission"].startswith("team-a/")
        assert (await states(w))["train"] in ("Admitted", "Finished")
        await eventually(lambda: states(w), what="the workload to finish")
        assert await eventually(lambda: _finished(w, "train"), what="quota released when the job completes", timeout=15)
        async with database.transaction(w.sessions) as s:
            admissions = (await s.execute(select(tables.Admission))).scalars().all()
            ledger = (await s.execute(select(tables.UsageInterval))).scalars().all()
        assert admissions == []
        assert [(r.workload, r.quantity, r.ended_at is not None) for r in ledger] == [("ml/train", 4000, True)]


async def _finished(w, name: str) -> bool:  # type: ignore[no-untyped-def]
    return (await states(w)).get(name) == "Finished"


async def test_over_quota_jobs_wait_and_start_in_turn(tmp_path: Path, migrated_url: str) -> None:
    async with world(tmp_path, migrated_url) as w:
        await w.apply(CONFIG)
        w.start_controller("replica-1")
        for i in range(3):
            await w.create(job(f"j{i}", gpus=4, runtime=30))

        async def admitted() -> list[str]:
            return sorted(n for n, s in (await states(w)).items() if s == "Admitted")

        assert await eventually(admitted, what="two admissions") == ["j0", "j1"]
        third = await w.get("j2")
        assert third["spec"]["suspend"] is True
        async with database.transaction(w.sessions) as s:
            row = (await s.execute(select(tables.Workload).where(tables.Workload.name == "j2"))).scalar_one()
        assert row.reason == "WaitingForQuota" and "nvidia.com/gpu" in (row.message or "")
        assert await eventually(lambda: _finished(w, "j2"), timeout=20, what="the third job to run after the first two")


async def test_a_preemptor_says_it_waits_for_its_victims_to_stop(tmp_path: Path, migrated_url: str) -> None:
    """Its quota is reserved at once, but its job starts only once the victims' pods are gone: the
    workload says so (QuotaReserved, Preempting, whom it waits for) and an Event on the job does."""
    async with world(tmp_path, migrated_url) as w:
        w.host.cluster.termination_seconds = 300  # the victims' pods take their whole grace period, 3 s
        await w.apply(CONFIG)
        w.start_controller("replica-1")
        for name in ("low-1", "low-2"):
            low = job(name, gpus=4)
            low["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 300
            await w.create(low)
        await eventually(lambda: _both_running(w), what="the low jobs to run")
        await w.create(job("urgent", gpus=8, priority="high"))
        row = await eventually(lambda: _preempting(w), what="the preemptor to say it waits")
        assert row.state == "Admitted" and (await w.get("urgent"))["spec"]["suspend"] is True
        assert row.message == "quota reserved; waiting for 2 preempted workloads to stop: ml/low-1, ml/low-2"

        # (read at once, while the victims' pods still stop: the CLI calls below take seconds on a loaded machine)
        async def said_so() -> list[tuple[str, str]] | None:
            events = await w.kube.request("GET", "/api/v1/namespaces/ml/events")
            said = [(e["reason"], e["message"]) for e in events["items"] if e["involvedObject"]["name"] == "urgent"]
            waits = any(m.startswith("Preempting: quota reserved; waiting for 2 preempted") for _, m in said)
            return said if waits and "QuotaReserved" in {r for r, _ in said} else None

        said = await eventually(said_so, what="the preemptor's Events")
        # quota reserved, not admitted, while it waits: Admitted is said when its job may start
        assert "Admitted" not in {r for r, _ in said} or await _started(w, "urgent"), said
        done = await asyncio.to_thread(
            turnstile, "get", "wl", "-n", "ml", env={**os.environ, "TURNSTILE_DATABASE_URL": w.url}
        )
        line = next(x for x in done.stdout.splitlines() if " urgent " in f" {x} ")
        assert "QuotaReserved" in line and "Preempting" in line, done.stdout
        # -o json: one Kueue-shaped Workload, quantities as Kubernetes writes them, why it was preempted
        shown = await asyncio.to_thread(
            turnstile, "get", "wl", "ml/low-1", "-o", "json", env={**os.environ, "TURNSTILE_DATABASE_URL": w.url}
        )
        low = json.loads(shown.stdout)
        assert low["kind"] == "Workload" and low["metadata"]["name"].startswith("job-low-1-"), low
        requests = low["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]["requests"]
        assert requests["nvidia.com/gpu"] == "4", requests
        conditions = {c["type"]: c for c in low["status"]["conditions"]}
        assert (
            conditions["Preempted"]["reason"] == "InClusterQueue"
            and "(ml/job-urgent-"
            in conditions["Preempted"]["message"]  # (urgent's Workload object, as kubectl names it)
        )
        assert low["metadata"]["ownerReferences"][0]["kind"] == "Job"
        assert "priorityClassRef" not in low["spec"], low["spec"]  # (no class gave low its priority)
        # the name kubectl shows (job-low-1-xxxxx) finds the same workload in the CLI
        described = await asyncio.to_thread(
            turnstile,
            "describe",
            "workload",
            f"ml/{low['metadata']['name']}",
            env={**os.environ, "TURNSTILE_DATABASE_URL": w.url},
        )
        assert (
            described.returncode == 0
            and f"Workload:      ml/low-1 (Job; its Workload object: {low['metadata']['name']})" in described.stdout
        ), described
        await eventually(lambda: _started(w, "urgent"), timeout=15, what="the preemptor to start once they stopped")
        await eventually(lambda: _reason_is(w, "urgent", "Admitted"), what="the wait no longer said once started")

        async def admitted_said() -> bool:
            events = await w.kube.request("GET", "/api/v1/namespaces/ml/events")
            return any(e["reason"] == "Admitted" and e["involvedObject"]["name"] == "urgent" for e in events["items"])

        await eventually(admitted_said, what="an Admitted Event once the victims stopped")
        # Kueue's spec.priorityClassRef: the WorkloadPriorityClass that gave urgent its priority
        env = {**os.environ, "TURNSTILE_DATABASE_URL": w.url}
        shown = await asyncio.to_thread(turnstile, "get", "wl", "ml/urgent", "-o", "json", env=env)
        ref = json.loads(shown.stdout)["spec"]["priorityClassRef"]
        assert ref == {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "high"}, ref


async def _reason_is(w, name: str, reason: str) -> bool:  # type: ignore[no-untyped-def]
    async with database.transaction(w.sessions) as s:
        row = (await s.execute(select(tables.Workload).where(tables.Workload.name == name))).scalar_one()
    return bool(row.reason == reason)


async def _both_running(w) -> bool:  # type: ignore[no-untyped-def]
    return all([not (await w.get(n))["spec"]["suspend"] for n in ("low-1", "low-2")])


async def _started(w, name: str) -> bool:  # type: ignore[no-untyped-def]
    return not (await w.get(name))["spec"]["suspend"]


async def _preempting(w):  # type: ignore[no-untyped-def]
    async with database.transaction(w.sessions) as s:
        row = (await s.execute(select(tables.Workload).where(tables.Workload.name == "urgent"))).scalar_one_or_none()
    return row if row is not None and row.reason == "Preempting" else None
