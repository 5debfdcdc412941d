"""An elastic batch Job as a Kueue user runs it (``kueue.x-k8s.io/elastic-job: "true"``): kubectl
against the simulated cluster, the webhook over TLS, a controller replica, PostgreSQL.

Scaled down with ``kubectl patch``, its quota is freed at once and the job waiting for it starts;
scaled up, its running pod goes on while the added one waits behind Kueue's elastic-job scheduling
gate until quota frees; its Workload object and the GPU-hour ledger follow each size. Nothing here
knows Turnstile's internals but the ledger's rows, read as ``turnstile usage`` reads them."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from admission.sim.host import SimHost
from admission.store import database, tables
from tests.admission.controller.world import eventually
from tests.admission.runner import KUBECTL, kubectl, turnstile
from tests.e2e.test_pods import cluster, create, live, running

pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not on PATH")

ELASTIC_GATE = "kueue.x-k8s.io/elastic-job"
GPU_POD = {
    "restartPolicy": "Never",
    "containers": [
        {"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}
    ],
}


def job(name: str, parallelism: int, *, elastic: bool = False) -> dict[str, Any]:
    notes = {ELASTIC_GATE: "true"} if elastic else {}
    meta = {"name": name, "namespace": "ml", "labels": {"kueue.x-k8s.io/queue-name": "team-a"}, "annotations": notes}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
            "spec": {"parallelism": parallelism, "completions": 100, "template": {"spec": GPU_POD}}}  # fmt: skip


def gated_elastic(host: SimHost, prefix: str) -> set[str]:
    return {
        n
        for n, p in live(host, prefix).items()
        if ELASTIC_GATE in [g["name"] for g in p["spec"].get("schedulingGates") or []]
    }


async def _workload(host: SimHost, prefix: str) -> dict[str, Any] | None:
    code, out, err = await kubectl(host.kubeconfig, "get", "workloads", "-n", "ml", "-o", "json")
    assert code == 0, err
    return next((o for o in json.loads(out)["items"] if o["metadata"]["name"].startswith(prefix)), None)


async def _count(host: SimHost, prefix: str, n: int) -> dict[str, Any] | None:
    """The Workload object once it shows ``n`` pods admitted."""
    obj = await _workload(host, prefix)
    if obj is None or obj["spec"]["podSets"][0]["count"] != n:
        return None
    usage = obj["status"].get("admission", {}).get("podSetAssignments", [{}])[0].get("resourceUsage", {})
    return obj if usage.get("nvidia.com/gpu") == str(n) else None


async def _pending_event(host: SimHost, job: str) -> str | None:
    code, out, err = await kubectl(host.kubeconfig, "get", "events", "-n", "ml", "-o", "json")
    assert code == 0, err
    return next(
        (
            e["message"]
            for e in json.loads(out)["items"]
            if e["involvedObject"]["name"] == job and e["reason"] == "Pending" and "scaling up" in e["message"]
        ),
        None,
    )


async def _patch(host: SimHost, name: str, parallelism: int) -> None:
    body = json.dumps({"spec": {"parallelism": parallelism}})
    code, _, err = await kubectl(host.kubeconfig, "patch", "job", name, "-n", "ml", "--type=merge", "-p", body)
    assert code == 0, err


async def test_an_elastic_job_scales_down_and_up_without_being_requeued(tmp_path: Path, migrated_url: str) -> None:
    async with cluster(tmp_path, migrated_url) as (host, _kube):  # (team-a: 2 GPUs)
        assert (await create(host, job("train", 2, elastic=True)))[0] == 0
        await eventually(lambda: len(running(host, "train-")) == 2, what="the elastic job's 2 pods running")
        code, out, _ = await kubectl(host.kubeconfig, "get", "job", "train", "-n", "ml", "-o", "json")
        template = json.loads(out)["spec"]["template"]["spec"]
        assert {"name": ELASTIC_GATE} in template["schedulingGates"], "gated at creation, as Kueue's webhook does"
        first = await eventually(lambda: _count(host, "job-train-", 2), what="its Workload at 2 pods")
        assert (await create(host, job("waits", 1)))[0] == 0

        # down: one GPU freed at once, and the waiting job runs in it; train is not requeued
        await _patch(host, "train", 1)
        await eventually(lambda: len(running(host, "waits-")) == 1, what="the waiting job running in the freed GPU")
        down = await eventually(lambda: _count(host, "job-train-", 1), what="its Workload at 1 pod")
        assert down["metadata"]["uid"] == first["metadata"]["uid"], "the same Workload: resized, not requeued"
        assert len(running(host, "train-")) == 1

        # up: the added pod waits behind the gate while the running one goes on
        await _patch(host, "train", 2)
        await eventually(lambda: len(gated_elastic(host, "train-")) == 1, what="the added pod held by the gate")
        assert len(running(host, "train-")) == 1
        waiting = await _workload(host, "job-train-")
        assert waiting is not None and waiting["spec"]["podSets"][0]["count"] == 1, "not grown without quota"
        said = await eventually(lambda: _pending_event(host, "train"), what="a Pending Event saying why it waits")
        assert "scaling up to main: 2 waits for quota" in said and "the running pods go on" in said, said
        code, _, err = await kubectl(host.kubeconfig, "delete", "job", "waits", "-n", "ml")
        assert code == 0, err
        await eventually(
            lambda: len(running(host, "train-")) == 2, timeout=20, what="the growth admitted, its pod started"
        )
        await eventually(lambda: _count(host, "job-train-", 2), what="its Workload at 2 pods again")
        assert not gated_elastic(host, "train-")

        # its history, as `turnstile describe workload` prints it: admitted once, resized twice
        env = {**os.environ, "TURNSTILE_DATABASE_URL": migrated_url, "COLUMNS": "200"}
        described = turnstile("describe", "workload", "ml/train", env=env)
        assert described.returncode == 0, described.stderr
        history = described.stdout[described.stdout.index("History") :]
        assert history.count("Admitted") == 1 and "Evicted" not in history, history
        assert "Resized" in history and "to main: 1" in history and "to main: 2" in history, history

        # the ledger billed each size for the time it held it: 2 GPUs, then 1, then 2
        engine = database.make_engine(migrated_url)
        async with database.transaction(database.sessions(engine)) as s:
            rows = (
                await s.execute(
                    select(tables.UsageInterval.quantity, tables.UsageInterval.ended_at)
                    .where(
                        tables.UsageInterval.workload == "ml/train", tables.UsageInterval.resource == "nvidia.com/gpu"
                    )
                    .order_by(tables.UsageInterval.id)
                )
            ).all()
        await engine.dispose()
        assert [(q, ended is None) for q, ended in rows] == [(2000, False), (1000, False), (2000, True)]
