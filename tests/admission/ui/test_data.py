"""The dashboard's JSON (``admission.ui.data``, ``admission.ui.server``) on real PostgreSQL:
quota bars' arithmetic, lending, pending pages in queue order, bad query parameters refused."""

from __future__ import annotations

import datetime as dt
from fractions import Fraction
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from sqlalchemy import text

from admission.store import config as config_store
from admission.store import database
from admission.store import workloads as store
from admission.ui import data
from admission.ui.server import Dashboard
from queues.kueue import codec
from queues.model import Admission
from queues.podsets import jobs

CONFIG = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: a100}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: lender}
spec:
  namespaceSelector: {}
  cohortName: pool
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors: [{name: a100, resources: [{name: nvidia.com/gpu, nominalQuota: "8"}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: borrower}
spec:
  namespaceSelector: {}
  cohortName: pool
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors: [{name: a100, resources: [{name: nvidia.com/gpu, nominalQuota: "2"}]}]
"""
NOW = dt.datetime(2026, 12, 2, tzinfo=dt.UTC)


def _record(name: str, gpus: int, priority: int = 0) -> store.Record:
    job = jobs.read_job({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": "ml", "labels": {"kueue.x-k8s.io/queue-name": "q"}},
        "spec": {"template": {"spec": {"containers": [
            {"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}},
    })  # fmt: skip
    return store.Record(f"uid-{name}", job, "q", priority, NOW)


async def test_bars_lending_and_pending_pages(tmp_path: Path, migrated_url: str) -> None:
    engine = database.make_engine(migrated_url)
    sessions = database.sessions(engine)
    try:
        async with database.transaction(sessions) as s:
            await config_store.apply(s, [codec.parse(d) for d in yaml.safe_load_all(CONFIG)], actor="test")
            await store.upsert(s, [_record("big", 5), *(_record(f"p{i}", 1, priority=i % 3) for i in range(7))])
        async with database.transaction(sessions) as s:
            snap = await store.load_snapshot(s)
            big = snap.ids["ml/big"]
            usage = {("a100", "nvidia.com/gpu"): 5000}
            admit = store.Admit(big, Admission("borrower", {"main": {"nvidia.com/gpu": "a100"}}, usage, True))
            await store.commit_cycle(s, admissions=[admit], now=NOW)
            await s.execute(
                text("UPDATE workloads SET cluster_queue = 'lender', reason = 'WaitingForQuota' "
                           "WHERE state = 'Pending'")
            )  # fmt: skip
        async with database.transaction(sessions) as s:
            overview = await data.overview(s)
        queues = {q["name"]: q for q in overview["clusterQueues"]}
        (borrower,) = queues["borrower"]["resources"]
        (lender,) = queues["lender"]["resources"]
        assert (borrower["used"], borrower["nominal"], borrower["borrowed"]) == (5000, 2000, 3000)
        assert lender["lent"] == 3000, "the cohort's borrowing is lent by its member with room"
        (gpus,) = overview["gpus"]
        assert (gpus["nominal"], gpus["inUse"], gpus["free"], gpus["idle"]) == (10.0, 5.0, 5.0, None)

        app = web.Application()
        Dashboard(sessions).routes(app)
        async with TestClient(TestServer(app)) as client:
            page: Any = await (await client.get("/ui/api/pending?queue=lender&offset=2&limit=3")).json()
            assert page["total"] == 7 and [w["position"] for w in page["items"]] == [3, 4, 5]
            priorities = [w["priority"] for w in page["items"]]
            assert priorities == sorted(priorities, reverse=True), "queue order: priority first"
            bad = await client.get("/ui/api/pending?queue=lender&offset=-1")
            assert bad.status == 400 and "offset -1: must be >= 0" in (await bad.json())["error"]
            missing = await client.get("/ui/api/workload?name=ml/nope")
            assert missing.status == 404 and "workload/ml/nope not found" in (await missing.json())["error"]
            index = await client.get("/ui/")
            assert index.status == 200 and "<title>Turnstile</title>" in await index.text()
    finally:
        await engine.dispose()


DRA_CONFIG = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: h100}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: claims}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [whole-gpus]
    flavors: [{name: h100, resources: [{name: whole-gpus, nominalQuota: "4"}]}]
"""


async def test_gpus_claimed_through_dra_are_on_the_gpu_bars_and_billed_as_the_cli_bills_them(
    migrated_url: str,
) -> None:
    """A DRA mapping's resource (``whole-gpus``) is a GPU only through the fractions ``turnstile
    usage`` bills with (a mapping of whole GPUs, ``TURNSTILE_GPU_FRACTIONS``): the dashboard is
    given them, so two claimed GPUs show on its GPU bars and in its GPU-hours, not zero."""
    engine = database.make_engine(migrated_url)
    sessions = database.sessions(engine)
    try:
        async with database.transaction(sessions) as s:
            await config_store.apply(s, [codec.parse(d) for d in yaml.safe_load_all(DRA_CONFIG)], actor="test")
            await store.upsert(s, [_record("claims", 0)])
        async with database.transaction(sessions) as s:
            snap = await store.load_snapshot(s)
            usage = {("h100", "whole-gpus"): 2000}
            admit = store.Admit(
                snap.ids["ml/claims"], Admission("claims", {"main": {"whole-gpus": "h100"}}, usage, False)
            )
            await store.commit_cycle(s, admissions=[admit], now=dt.datetime.now(dt.UTC) - dt.timedelta(hours=1))
        fractions = {"whole-gpus": Fraction(1)}
        async with database.transaction(sessions) as s:
            assert (await data.overview(s))["gpus"] == []  # (by its name alone, whole-gpus is no GPU)
            (gpus,) = (await data.overview(s, fractions=fractions))["gpus"]
            assert (gpus["flavor"], gpus["nominal"], gpus["inUse"], gpus["free"]) == ("h100", 4.0, 2.0, 2.0)
            assert (await data.usage(s, by="namespace", days=1))["groups"] == []
            (billed,) = (await data.usage(s, by="namespace", days=1, fractions=fractions))["groups"]
            assert billed["group"] == "ml" and 1.9 < billed["gpuHours"] < 2.1  # two GPUs for an hour

        app = web.Application()
        Dashboard(sessions, fractions=lambda: fractions).routes(app)
        async with TestClient(TestServer(app)) as client:
            page: Any = await (await client.get("/ui/api/overview")).json()
            assert [g["inUse"] for g in page["gpus"]] == [2.0]
            hours: Any = await (await client.get("/ui/api/usage?by=namespace&days=1")).json()
            assert [g["group"] for g in hours["groups"]] == ["ml"]
    finally:
        await engine.dispose()
