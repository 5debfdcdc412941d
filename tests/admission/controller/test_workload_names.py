"""Two jobs of different kinds with one name in one namespace: a workload is named by its job's
namespace and name, so one of them holds the name and the other is never queued until it is gone
(``JobCache.waiting``). Before, the second one ran on the first one's admission, its GPUs
uncounted, and both were marked finished when it ended."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from sqlalchemy import select

from admission.controller.observation import WORKLOAD_NAME_TAKEN
from admission.jobs import BY_KIND
from admission.store import database, tables
from tests.admission.controller.test_events import events
from tests.admission.controller.test_job_kinds import KINDS
from tests.admission.controller.world import CONFIG, JOBS, eventually, job, world

JOBSET = copy.deepcopy(next(k for k in KINDS if k["kind"] == "JobSet"))  # three pods of one GPU
JOBSET["metadata"]["name"] = "train"
JOBSET["metadata"]["annotations"] = {"turnstile.dev/sim-runtime": "600"}
JOBSETS = BY_KIND[(JOBSET["apiVersion"], JOBSET["kind"])].ref


async def stored(w: Any) -> list[tuple[str, str]]:
    async with database.transaction(w.sessions) as s:
        return [(k, state) for k, state in (await s.execute(select(tables.Workload.kind, tables.Workload.state))).all()]


async def test_a_job_of_another_kind_with_a_queued_jobs_name_waits_for_it(tmp_path: Path, migrated_url: str) -> None:
    async with world(tmp_path, migrated_url) as w:
        await w.apply(CONFIG)  # team-a: 8 GPUs
        w.start_controller("replica-1")
        await w.create(job("train", gpus=6, runtime=600))
        await eventually(lambda: _running(w, JOBS), what="the Job admitted")
        await w.kube.create(JOBSETS, "ml", copy.deepcopy(JOBSET))

        async def told() -> list[str]:
            return [m for who, reason, m in await events(w) if who == "train" and reason == WORKLOAD_NAME_TAKEN]

        (message,) = await eventually(told, what="the JobSet told its name is taken")
        assert "JobSet ml/train" in message and "which Job ml/train already holds" in message, message
        assert not await _running(w, JOBSETS), "never run on the Job's admission"
        assert await _running(w, JOBS) and await stored(w) == [("Job", "Admitted")]
        # The Job goes: the JobSet takes the name, is queued and admitted on quota of its own.
        await w.kube.delete(JOBS, "ml", "train")
        await eventually(lambda: _running(w, JOBSETS), what="the JobSet admitted once the Job is gone", timeout=15)
        assert sorted(await stored(w)) == [("Job", "Finished"), ("JobSet", "Admitted")]


async def test_two_such_jobs_seen_in_one_step_queue_one(tmp_path: Path, migrated_url: str) -> None:
    """Both exist before the controller starts, so its first step sees them together: one is queued,
    the other waits; never two workloads under one name."""
    async with world(tmp_path, migrated_url) as w:
        await w.apply(CONFIG)
        await w.create(job("train", gpus=2, runtime=600))
        await w.kube.create(JOBSETS, "ml", copy.deepcopy(JOBSET))
        w.start_controller("replica-1")

        async def one_admitted() -> list[tuple[str, str]] | None:
            rows = await stored(w)
            return rows if rows and all(state == "Admitted" for _, state in rows) else None

        (row,) = await eventually(one_admitted, what="one of them admitted")
        suspended = [(await w.kube.get(ref, "ml", "train"))["spec"]["suspend"] for ref in (JOBS, JOBSETS)]
        assert suspended == ([False, True] if row[0] == "Job" else [True, False]), (row, suspended)
        assert await eventually(lambda: _told(w), what="the other told its name is taken")


async def _told(w: Any) -> bool:
    return any(reason == WORKLOAD_NAME_TAKEN for _, reason, _ in await events(w))


async def test_a_finished_holder_gives_its_name_up(tmp_path: Path, migrated_url: str) -> None:
    async with world(tmp_path, migrated_url) as w:
        await w.apply(CONFIG)
        w.start_controller("replica-1")
        await w.create(job("train", gpus=6, runtime=100))  # (1 s at the sim's time scale: the JobSet is seen waiting)
        await eventually(lambda: _running(w, JOBS), what="the Job admitted")
        await w.kube.create(JOBSETS, "ml", copy.deepcopy(JOBSET))
        await eventually(lambda: _told(w), what="the JobSet told its name is taken while the Job runs")
        assert await _running(w, JOBS) and not await _running(w, JOBSETS)
        await eventually(lambda: _running(w, JOBSETS), what="the JobSet admitted once the Job finished", timeout=15)
        assert sorted(await stored(w)) == [("Job", "Finished"), ("JobSet", "Admitted")]


async def _running(w: Any, ref: Any) -> bool:
    return not (await w.kube.get(ref, "ml", "train"))["spec"]["suspend"]
