"""Kubernetes Events on the jobs: what ``kubectl describe job`` shows of Turnstile's decisions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from admission.controller import events as module
from admission.controller.events import EventPoster
from admission.controller.objects.workload_projection import WORKLOADS
from admission.jobs import BY_KIND
from tests.admission.controller.world import CONFIG, JOBS, eventually, job, world


async def events(w: Any) -> list[tuple[str, str, str]]:
    listed = await w.kube.request("GET", "/api/v1/namespaces/ml/events")
    return [
        (e["involvedObject"]["name"], e["reason"], e["message"])
        for e in sorted(listed["items"], key=lambda e: int(e["metadata"]["resourceVersion"]))
        if e.get("source", {}).get("component") == "turnstile"
    ]


def reasons(seen: list[tuple[str, str, str]], name: str) -> list[str]:
    return [reason for who, reason, _ in seen if who == name]


async def test_events_tell_the_story_of_each_job_without_a_flood(tmp_path: Path, migrated_url: str) -> None:
    async with world(tmp_path, migrated_url) as w:
        await w.apply(CONFIG)  # team-a: 8 GPUs; lower priority is preempted within the queue
        w.start_controller("replica-1")
        await w.create(job("quick", gpus=4, runtime=1))
        await w.create(job("steady", gpus=4))
        await w.create(job("waits", gpus=4))

        async def story(check: Any) -> Any:
            seen = await events(w)
            return seen if check(seen) else None

        seen = await eventually(
            lambda: story(lambda s: "Admitted" in reasons(s, "waits")),
            what="waits to be admitted after quick",
            timeout=20,
        )
        assert reasons(seen, "quick") == ["Admitted", "Finished"]
        assert reasons(seen, "waits") == ["Pending", "Admitted"]  # one Pending, however often it was looked at
        (pending,) = [m for who, r, m in seen if who == "waits" and r == "Pending"]
        assert "team-a" in pending or "quota" in pending.lower()
        admitted = [m for who, r, m in seen if who == "steady" and r == "Admitted"]
        assert admitted == ["admitted by ClusterQueue team-a on flavor a100"]
        await w.create(job("urgent", gpus=4, priority="high"))
        seen = await eventually(
            lambda: story(lambda s: any(r == "Preempted" for _, r, _ in s)), what="a preemption", timeout=20
        )
        (victim, message) = next((who, m) for who, r, m in seen if r == "Preempted")
        urgent = (await w.kube.get(JOBS, "ml", "urgent"))["metadata"]["uid"]
        # named as kubectl, the CLI and the visibility API name it: its Workload object's name
        assert victim in ("steady", "waits") and f"preempted by ml/job-urgent-{urgent[:5]} (InClusterQueue)" in message

        async def preempted_condition() -> str | None:  # the victim's Workload object names urgent's alike
            listed = await w.kube.request("GET", WORKLOADS.path("ml"))
            for obj in listed.get("items") or []:
                if obj["metadata"]["name"].startswith(f"job-{victim}-"):
                    for c in obj["status"].get("conditions") or []:
                        if c["type"] == "Preempted":
                            return str(c["message"])
            return None

        said = await eventually(preempted_condition, what="the victim's Workload object Preempted")
        assert f"Preempted to accommodate a workload (ml/job-urgent-{urgent[:5]})" in said, said
        await eventually(lambda: story(lambda s: "Admitted" in reasons(s, "urgent")), what="urgent admitted")


def test_pending_events_on_a_new_reason_and_new_numbers_at_most_once_a_refresh() -> None:
    obj = job("j", gpus=4)
    obj["metadata"]["uid"] = "uid-1"
    view = BY_KIND[("batch/v1", "Job")].view(obj)
    now = [0.0]
    poster = EventPoster(None, instance="test", clock=lambda: now[0])  # type: ignore[arg-type]  # queued only

    def queued() -> list[str]:
        return [poster.queue.get_nowait().message for _ in range(poster.queue.qsize())]

    for message in ("needs 4, 2 free", "needs 4, 1 free", "needs 4, 3 free"):
        poster.pending(view, "WaitingForQuota", message)
    poster.refresh()  # (not due yet)
    assert queued() == ["WaitingForQuota: needs 4, 2 free"]
    now[0] += module.REFRESH
    poster.refresh()  # the numbers changed and stood still: the newest are posted, not left stale
    assert queued() == ["WaitingForQuota: needs 4, 3 free"]
    poster.refresh()
    poster.pending(view, "WaitingForQuota", "needs 4, 3 free")
    assert queued() == []
    poster.pending(view, "NamespaceNotAllowed", "namespace ml does not match")  # a new reason: at once
    poster.pending(view, "NamespaceNotAllowed", "namespace ml does not match")
    assert queued() == ["NamespaceNotAllowed: namespace ml does not match"]
    poster.forget("uid-1")  # admitted: a later wait is reported again
    poster.pending(view, "WaitingForQuota", "evicted")
    assert queued() == ["WaitingForQuota: evicted"]


def test_a_burst_of_decisions_posts_at_most_a_burst_of_events() -> None:
    obj = job("j", gpus=4)
    obj["metadata"]["uid"] = "uid-1"
    view = BY_KIND[("batch/v1", "Job")].view(obj)
    now = [100.0]
    # nothing is sent: queued only; the clock moves only when the test says (no load makes it flaky)
    poster = EventPoster(None, instance="test", clock=lambda: now[0])  # type: ignore[arg-type]
    for i in range(module.BURST + 500):  # e.g. a quota raise admitting thousands at once
        poster.post(view, "Admitted", f"admitted {i}")
    assert poster.queue.qsize() == module.BURST and poster.dropped == 500
    now[0] += 1.0  # a second later: RATE more may go
    for i in range(2 * int(module.RATE)):
        poster.post(view, "Admitted", f"later {i}")
    assert poster.queue.qsize() == module.BURST + int(module.RATE)
    assert poster.dropped == 500 + int(module.RATE)
