"""GPU-hour budgets end to end: edited with ``turnstile budget`` (refused when wrong, audited),
measured from the usage ledger by the controller, and enforced: a team over its budget waits with
reason ``BudgetExhausted`` while its running job goes on and another team's job is admitted."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner
from sqlalchemy import select

from admission.cli import budget as budget_cli
from admission.cli import main
from admission.policy import Policy
from admission.store import budgets, database, tables
from tests.admission.controller.world import CONFIG, World, eventually, job, world
from tests.admission.runner import turnstile


def env(url: str, tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "TURNSTILE_DATABASE_URL": url, "TURNSTILE_HOME": str(tmp_path / "home"),
            "TURNSTILE_ACTOR": "finops"}  # fmt: skip


def cli(url: str, tmp_path: Path, *args: str) -> Any:
    """``turnstile budget ...`` as a user runs it (a process of its own)."""
    return turnstile("budget", *args, env=env(url, tmp_path))


def quick(url: str, tmp_path: Path, *args: str) -> Any:
    """The same command in this process (click's runner: the same code, without a Python start-up
    each time); only for a test that has no event loop running."""
    return CliRunner().invoke(main.cli, ["budget", *args], env=env(url, tmp_path))


def team_job(name: str, team: str, gpus: int) -> dict[str, Any]:
    obj = job(name, gpus=gpus)
    obj["metadata"]["labels"]["team"] = team
    return obj


async def _row(w: World, name: str) -> Any:
    async with database.transaction(w.sessions) as s:
        return (await s.execute(select(tables.Workload).where(tables.Workload.name == name))).scalar_one_or_none()


def test_budget_edits_are_checked_and_audited(tmp_path: Path, migrated_url: str) -> None:
    negative = cli(migrated_url, tmp_path, "set", "--label", "team=alg-2", "--gpu-hours", "-5")
    assert negative.returncode == 2 and "--gpu-hours -5: must be >= 0" in negative.stderr, negative.stderr
    with pytest.raises(click.BadParameter, match="'cost-center' is not a ledger label"):
        budget_cli._labels(("cost-center=x",), ("team", "project"))
    with pytest.raises(ValueError, match="exactly one of --cluster-queue and --label"):
        budgets.make(cluster_queue=None, labels={}, gpu_hours=5, period="monthly")
    with pytest.raises(ValueError, match="--period 'soon': use monthly or a duration"):
        budgets.make(cluster_queue="team-a", labels={}, gpu_hours=5, period="soon")
    made = quick(migrated_url, tmp_path, "set", "--label", "team=alg-2", "--gpu-hours", "500")
    assert made.exit_code == 0 and made.output.strip() == "budget/label team=alg-2 created", made.output
    again = quick(migrated_url, tmp_path, "set", "--label", "team=alg-2", "--gpu-hours", "500")
    assert again.output.strip() == "budget/label team=alg-2 unchanged"
    raised = quick(migrated_url, tmp_path, "set", "--label", "team=alg-2", "--gpu-hours", "800", "--period", "168h")
    assert raised.output.strip() == "budget/label team=alg-2 configured"
    (listed,) = json.loads(quick(migrated_url, tmp_path, "list", "-o", "json").output)
    assert (listed["gpuHours"], listed["period"], listed["usedThisPeriod"], listed["exhausted"]) == (
        800.0, "168h", 0.0, False
    )  # fmt: skip
    # once spent, run new work at a lower priority instead of holding it: the priority goes with it
    alone = quick(migrated_url, tmp_path, "set", "--label", "team=alg-2", "--gpu-hours", "800", "--priority", "-10")
    assert alone.exit_code == 2 and "--priority N goes with --when-exhausted lower-priority" in alone.output
    lowered = quick(migrated_url, tmp_path, "set", "--label", "team=alg-2", "--gpu-hours", "800", "--period", "168h",
                    "--when-exhausted", "lower-priority", "--priority", "-10")  # fmt: skip
    assert lowered.output.strip() == "budget/label team=alg-2 configured", lowered.output
    (listed,) = json.loads(quick(migrated_url, tmp_path, "list", "-o", "json").output)
    assert (listed["whenExhausted"], listed["priority"]) == ("LowerPriority", -10)
    assert "priority -10" in quick(migrated_url, tmp_path, "list").output
    assert quick(migrated_url, tmp_path, "delete", "label team=alg-2").exit_code == 0
    gone = quick(migrated_url, tmp_path, "delete", "label team=alg-2")
    assert gone.exit_code == 1 and "not found" in gone.output
    env = {**os.environ, "TURNSTILE_DATABASE_URL": migrated_url, "TURNSTILE_HOME": str(tmp_path / "home")}
    history = turnstile("history", env=env).stdout
    assert history.count("gpubudget/label team=alg-2") == 4 and "finops" in history, history
    assert "lower_priority" in history  # (the change is in the audit log, before -> after)


async def test_a_team_over_its_budget_waits_and_its_running_work_goes_on(tmp_path: Path, migrated_url: str) -> None:
    async with world(tmp_path, migrated_url) as w:
        await w.apply(CONFIG)
        # 0.001 GPU-hours is 3.6 GPU-seconds: a 2-GPU job spends it in under two seconds
        made = await asyncio.to_thread(
            cli, migrated_url, tmp_path, "set", "--label", "team=alg-2", "--gpu-hours", "0.001"
        )
        assert made.returncode == 0, made.stderr
        controller = w.start_controller("replica-1", policy=Policy(reclaim_interval=0.3))
        await w.create(team_job("first", "alg-2", 2))
        await eventually(lambda: _admitted(w, "first"), what="the team's first job admitted")

        async def exhausted() -> bool:
            (b,) = json.loads((await asyncio.to_thread(cli, migrated_url, tmp_path, "list", "-o", "json")).stdout)
            return bool(b["exhausted"])

        await eventually(exhausted, timeout=20, what="the budget used up")
        # (the CLI measures the ledger itself: the leader's own look may come up to a look later, and
        # a job created before it would be admitted, rightly; wait until the leader knows)
        await eventually(lambda: controller.features.budgets.exhausted, timeout=5, what="the leader seeing it used up")
        await w.create(team_job("second", "alg-2", 2))
        await w.create(team_job("other", "vision", 2))
        await eventually(lambda: _admitted(w, "other"), what="another team's job admitted")

        async def held() -> Any:
            r = await _row(w, "second")
            return r if r is not None and r.reason == "BudgetExhausted" else None

        r = await eventually(held, timeout=10, what="the team's next job held by its budget")
        assert r.state == "Pending"
        assert r.message.startswith("GPU-hour budget (label team=alg-2) exhausted: 0.00"), r.message
        assert "of 0.001 GPU-hours used this period" in r.message, r.message
        assert "new work waits until the period ends (20" in r.message
        assert (await _row(w, "first")).state == "Admitted", "running work is never stopped by a budget"
        # said where the team looks: a Warning Event on its namespace (a budget is no Kubernetes object)
        (told,) = await eventually(lambda: _events(w, "ml", "Namespace"), what="a BudgetExhausted Event in ml")
        assert told["type"] == "Warning" and told["involvedObject"]["name"] == "ml", told
        assert told["message"].startswith("GPU-hour budget (label team=alg-2) exhausted"), told
        # raised: the held job goes at the next look
        raised = await asyncio.to_thread(
            cli, migrated_url, tmp_path, "set", "--label", "team=alg-2", "--gpu-hours", "100"
        )
        assert raised.returncode == 0, raised.stderr
        await eventually(lambda: _admitted(w, "second"), timeout=10, what="admitted once the budget was raised")
        # a ClusterQueue's budget is said on the ClusterQueue (its Events live in default)
        spent = await asyncio.to_thread(
            cli, migrated_url, tmp_path, "set", "--cluster-queue", "team-a", "--gpu-hours", "0.001"
        )
        assert spent.returncode == 0, spent.stderr
        (on_cq,) = await eventually(lambda: _events(w, "default", "ClusterQueue"), what="an Event on the ClusterQueue")
        assert on_cq["involvedObject"]["name"] == "team-a", on_cq
        assert on_cq["message"].startswith("GPU-hour budget (clusterQueue team-a) exhausted"), on_cq


async def _events(w: World, namespace: str, kind: str) -> list[dict[str, Any]]:
    """BudgetExhausted Events on objects of ``kind`` (a GPUBudgetWarning may come first, if a look
    saw the budget between 80 and 100 %)."""
    found = await w.kube.request("GET", f"/api/v1/namespaces/{namespace}/events")
    return [e for e in found["items"] if e["involvedObject"]["kind"] == kind and e["reason"] == "BudgetExhausted"]


async def _admitted(w: World, name: str) -> bool:
    r = await _row(w, name)
    return r is not None and r.state == "Admitted"
