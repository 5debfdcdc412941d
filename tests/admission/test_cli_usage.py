"""``turnstile usage`` as a user runs it: GPU-hours per team last week and what they cost."""

from __future__ import annotations

import asyncio
import csv
import datetime as dt
import io
import json
import os
import subprocess
from pathlib import Path

import pytest

from admission.store import database, tables
from tests.admission.runner import turnstile

GPU = "nvidia.com/gpu"


@pytest.fixture
def ledger_url(migrated_url: str) -> str:
    now = dt.datetime.now(dt.UTC)

    def row(team: str, flavor: str, resource: str, milli: int, start_h: float, end_h: float) -> tables.UsageInterval:
        return tables.UsageInterval(
            workload=f"ml-{team}/job",
            namespace=f"ml-{team}",
            cluster_queue=f"cq-{team}",
            local_queue="q",
            flavor=flavor,
            resource=resource,
            quantity=milli,
            labels={"team": team},
            started_at=now - dt.timedelta(hours=start_h),
            ended_at=now - dt.timedelta(hours=end_h),
        )

    async def fill() -> None:
        engine = database.make_engine(migrated_url)
        async with database.transaction(database.sessions(engine)) as s:
            s.add_all(
                [
                    row("alg-2", "a100", GPU, 4000, 50, 40),  # 4 GPUs x 10 h, two days ago
                    row("alg-2", "h100", GPU, 1000, 30, 28),  # 1 GPU x 2 h
                    row("alg-2", "a100", "cpu", 16000, 50, 40),  # 16 cores x 10 h
                    row("vision", "a100", GPU, 8000, 5, 4),  # 8 GPUs x 1 h
                    row("vision", "a100", GPU, 8000, 24 * 20, 24 * 19),  # three weeks ago: outside 7d
                ]
            )
        await engine.dispose()

    asyncio.run(fill())
    return migrated_url


def run(url: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TURNSTILE_DATABASE_URL": url, "TURNSTILE_HOME": str(tmp_path / "home")}
    return turnstile("usage", *args, env=env)


def test_gpu_hours_of_a_team_last_week_and_their_cost(ledger_url: str, tmp_path: Path) -> None:
    done = run(ledger_url, tmp_path, "--by", "label:team", "--since", "7d", "--price", "a100=3.20", "-o", "json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)["rows"]
    assert rows[:4] == [  # GPU-hours first, then by group
        {"group": "alg-2", "clusterQueue": "cq-alg-2", "flavor": "a100", "resource": GPU, "hours": 40.0, "cost": 128.0},
        {"group": "alg-2", "clusterQueue": "cq-alg-2", "flavor": "h100", "resource": GPU, "hours": 2.0, "cost": None},
        {"group": "vision", "clusterQueue": "cq-vision", "flavor": "a100", "resource": GPU, "hours": 8.0, "cost": 25.6},
        {
            "group": "alg-2",
            "clusterQueue": "cq-alg-2",
            "flavor": "a100",
            "resource": "cpu",
            "hours": 160.0,
            "cost": None,
        },
    ]
    assert len(rows) == 4  # the run three weeks ago is outside the window
    table = run(ledger_url, tmp_path, "--by", "label:team", "--since", "7d", "--price", "a100=3.20")
    assert table.returncode == 0
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["TEAM", "CLUSTERQUEUE", "FLAVOR", "RESOURCE", "HOURS", "COST", "(USD)"]
    assert lines[1].split() == ["alg-2", "cq-alg-2", "a100", GPU, "40.00", "128.00"]
    assert lines[-1].startswith("total: 50.00 GPU-hours, 153.60 USD")
    by_ns = run(ledger_url, tmp_path, "--by", "namespace", "--since", "30d", "-o", "csv")
    parsed = list(csv.DictReader(io.StringIO(by_ns.stdout)))
    assert {(r["group"], r["flavor"], r["resource"]): float(r["hours"]) for r in parsed if r["resource"] == GPU} == {
        ("ml-alg-2", "a100", GPU): 40.0,
        ("ml-alg-2", "h100", GPU): 2.0,
        ("ml-vision", "a100", GPU): 200.0,  # 8 GPUs x 1 h, and x 24 h three weeks ago
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--price", "a100"], "FLAVOR=USD_PER_GPU_HOUR"),
        (["--price", "a100=-1"], "FLAVOR=USD_PER_GPU_HOUR"),
        (["--by", "team"], "label:KEY"),
        (["--since", "yesterday"], "30m, 12h, 7d or 4w"),
    ],
)
def test_bad_options_say_how_to_write_them(ledger_url: str, tmp_path: Path, args: list[str], message: str) -> None:
    done = run(ledger_url, tmp_path, *args)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr
