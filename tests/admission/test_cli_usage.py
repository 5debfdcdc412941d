"""``turnstile usage`` as a user runs it: GPU-hours per team last week and what they cost."""

from __future__ import annotations

import asyncio
import csv
import datetime as dt
import io
import json
import os
import subprocess
from fractions import Fraction
from pathlib import Path

import pytest

from admission.store import card_fractions, database, lease, tables
from tests.admission.runner import turnstile

GPU = "nvidia.com/gpu"
MIG = "nvidia.com/mig-1g.10gb"
SHARED = "nvidia.com/gpu.shared"


@pytest.fixture
def ledger_url(migrated_url: str) -> str:
    now = dt.datetime.now(dt.UTC)

    def row(
        team: str,
        flavor: str,
        resource: str,
        milli: int,
        start_h: float,
        end_h: float,
        ran_h: float | None = 0.0,  # hours after its admission its job ran (None: never)
        measured: tuple[float, float] = (0.0, 0.0),  # (hours measured, mean utilisation)
    ) -> tables.UsageInterval:
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
            running_at=None if ran_h is None else now - dt.timedelta(hours=start_h - ran_h),
            measured_seconds=measured[0] * 3600,
            busy_seconds=measured[0] * 3600 * measured[1],
        )

    store(
        migrated_url,
        [
            # 4 GPUs x 10 h, two days ago; ran after an hour's admission check, 25 % busy
            row("alg-2", "a100", GPU, 4000, 50, 40, ran_h=1, measured=(9, 0.25)),
            row("alg-2", "h100", GPU, 1000, 30, 28, ran_h=None),  # 1 GPU x 2 h, preempted before it ran
            row("alg-2", "a100", "cpu", 16000, 50, 40),  # 16 cores x 10 h
            row("vision", "a100", GPU, 8000, 5, 4),  # 8 GPUs x 1 h
            row("vision", "a100", GPU, 8000, 24 * 20, 24 * 19),  # three weeks ago: outside 7d
            row("vision", "a100-mig", MIG, 7000, 3, 1, measured=(2, 0.5)),  # 7 slices x 2 h, half busy
            row("vision", "a100-ts", SHARED, 4000, 3, 1),  # 4 time-sliced replicas x 2 h
        ],
    )
    return migrated_url


def store(url: str, rows: list[tables.UsageInterval]) -> None:
    """``rows`` put into the ledger in one transaction."""

    async def add() -> None:
        engine = database.make_engine(url)
        try:
            async with database.transaction(database.sessions(engine)) as s:
                s.add_all(rows)
        finally:
            await engine.dispose()

    asyncio.run(add())


def held(flavor: str, resource: str, milli: int, since: dt.datetime) -> tables.UsageInterval:
    """Job ``ml/job`` held ``milli`` of ``resource`` from ``since`` (running all along) until an hour ago."""
    return tables.UsageInterval(
        workload="ml/job", namespace="ml", cluster_queue="cq", local_queue="q", flavor=flavor, resource=resource,
        quantity=milli, labels={}, started_at=since, ended_at=dt.datetime.now(dt.UTC) - dt.timedelta(hours=1),
        running_at=since, measured_seconds=0.0, busy_seconds=0.0,
    )  # fmt: skip


def run(url: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TURNSTILE_DATABASE_URL": url, "TURNSTILE_HOME": str(tmp_path / "home")}
    return turnstile("usage", *args, env=env)


def test_gpu_hours_of_a_team_last_week_and_their_cost(ledger_url: str, tmp_path: Path) -> None:
    prices = ("--price", "a100=3.20", "--price", "a100-mig=3.20", "--price", "a100-ts=3.20")
    done = run(ledger_url, tmp_path, "--by", "label:team", "--since", "7d", *prices, "-o", "json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)["rows"]
    assert rows[:5] == [  # GPU-hours first, then by group
        {"group": "alg-2", "clusterQueue": "cq-alg-2", "flavor": "a100", "resource": GPU, "hours": 40.0,
         "gpuHours": 40.0, "cost": 128.0, "requestedHours": 40.0, "startedHours": 36.0, "usedHours": 9.0,
         "efficiency": 0.25},
        {"group": "alg-2", "clusterQueue": "cq-alg-2", "flavor": "h100", "resource": GPU, "hours": 2.0,
         "gpuHours": 2.0, "cost": None, "requestedHours": 2.0, "startedHours": 0.0, "usedHours": None,
         "efficiency": None},
        {"group": "vision", "clusterQueue": "cq-vision", "flavor": "a100", "resource": GPU, "hours": 8.0,
         "gpuHours": 8.0, "cost": 25.6, "requestedHours": 8.0, "startedHours": 8.0, "usedHours": None,
         "efficiency": None},  # no DCGM data: unknown, never idle
        {"group": "vision", "clusterQueue": "cq-vision", "flavor": "a100-mig", "resource": MIG, "hours": 14.0,
         "gpuHours": 2.0, "cost": 6.4, "requestedHours": 2.0, "startedHours": 2.0, "usedHours": 1.0,
         "efficiency": 0.5},  # 14 slice-hours of 1g.10gb are 2 card-hours; half busy: 1 card-hour used
        {"group": "vision", "clusterQueue": "cq-vision", "flavor": "a100-ts", "resource": SHARED, "hours": 8.0,
         "gpuHours": 2.0, "cost": 6.4, "requestedHours": 2.0, "startedHours": 2.0, "usedHours": None,
         "efficiency": None},  # 8 replica-hours at 4 replicas per card
    ]  # fmt: skip
    assert rows[5]["resource"] == "cpu" and rows[5]["gpuHours"] is None and rows[5]["cost"] is None
    assert len(rows) == 6  # the run three weeks ago is outside the window
    table = run(ledger_url, tmp_path, "--by", "label:team", "--since", "7d", *prices)
    assert table.returncode == 0
    lines = table.stdout.splitlines()
    assert lines[0].split() == [
        "TEAM", "CLUSTERQUEUE", "FLAVOR", "RESOURCE", "HOURS", "GPU-HOURS", "STARTED", "USED", "EFF", "COST", "(USD)"
    ]  # fmt: skip
    assert lines[1].split() == ["alg-2", "cq-alg-2", "a100", GPU, "40.00", "40.00", "36.00", "9.00", "25%", "128.00"]
    assert lines[2].split() == ["alg-2", "cq-alg-2", "h100", GPU, "2.00", "2.00", "0.00", "-", "-", "-"]
    assert lines[-1].startswith("total: 54.00 GPU-hours held, 48.00 started, 10.00 used where measured, 166.40 USD")
    by_ns = run(ledger_url, tmp_path, "--by", "namespace", "--since", "30d", "-o", "csv")
    parsed = list(csv.DictReader(io.StringIO(by_ns.stdout)))
    assert list(parsed[0]) == ["group", "clusterQueue", "flavor", "resource", "hours", "gpuHours", "cost",
                               "requestedHours", "startedHours", "usedHours", "efficiency"]  # fmt: skip
    assert {(r["group"], r["flavor"], r["resource"]): float(r["hours"]) for r in parsed if r["resource"] == GPU} == {
        ("ml-alg-2", "a100", GPU): 40.0,
        ("ml-alg-2", "h100", GPU): 2.0,
        ("ml-vision", "a100", GPU): 200.0,  # 8 GPUs x 1 h, and x 24 h three weeks ago
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--fraction", "nvidia.com/mig-1g.10gb=2"], "RESOURCE=FRACTION of a card"),
        (["--fraction", "mig 1g=1/7"], "RESOURCE=FRACTION of a card"),  # (not a resource name)
        (["--fraction", "=1/7"], "RESOURCE=FRACTION of a card"),
        (["--price", "a100"], "FLAVOR=USD_PER_GPU_HOUR"),
        (["--price", "a100=-1"], "FLAVOR=USD_PER_GPU_HOUR"),
        (["--by", "team"], "label:KEY"),
        (["--since", "yesterday"], "30m, 12h, 7d or 4w"),
    ],
)
def test_bad_options_say_how_to_write_them(ledger_url: str, tmp_path: Path, args: list[str], message: str) -> None:
    done = run(ledger_url, tmp_path, *args)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr


def test_a_resource_price_and_a_fraction_override(ledger_url: str, tmp_path: Path) -> None:
    """An A30's MIG slice is a quarter card (override); a resource's own price is per resource-hour."""
    done = run(
        ledger_url, tmp_path, "--since", "7d", "--fraction", f"{MIG}=1/4", "--price", f"{SHARED}=0.5", "-o", "json"
    )
    assert done.returncode == 0, done.stderr
    rows = {r["resource"]: r for r in json.loads(done.stdout)["rows"] if r["group"] == "ml-vision"}
    assert rows[MIG]["gpuHours"] == 3.5 and rows[MIG]["cost"] is None
    assert rows[SHARED]["gpuHours"] == 2.0 and rows[SHARED]["cost"] == 4.0  # 8 replica-hours x 0.50
    env_set = {**os.environ, "TURNSTILE_DATABASE_URL": ledger_url, "TURNSTILE_HOME": str(tmp_path / "home"),
               "TURNSTILE_GPU_FRACTIONS": f"{SHARED}=1/8"}  # fmt: skip
    from_env = turnstile("usage", "--since", "7d", "-o", "json", env=env_set)
    shared = next(r for r in json.loads(from_env.stdout)["rows"] if r["resource"] == SHARED)
    assert shared["gpuHours"] == 1.0


def test_plot_of_gpu_hours_and_efficiency_per_team(ledger_url: str, tmp_path: Path) -> None:
    """One column per day: alg-2 ran two days ago at 25 %, vision today (MIG half busy, the
    rest unmeasured); all on one scale, efficiency unknown where nothing was measured."""
    done = run(ledger_url, tmp_path, "--by", "label:team", "--since", "7d", "--every", "1d", "--plot")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("GPU-hours started and GPU efficiency by team, one column per 1d")
    rows = {line.split()[0]: line for line in lines if line.startswith(("alg-2", "vision"))}
    header = next(line for line in lines if line.startswith("TEAM"))
    hours_at, eff_at = header.index("GPU-HOURS"), header.index("EFFICIENCY")
    alg = rows["alg-2"][hours_at : hours_at + 7]
    vision = rows["vision"][hours_at : hours_at + 7]
    assert alg.strip() and alg[-1] == " " and vision[-1] != " "  # alg-2 nothing today, vision only today
    assert "█" in alg + vision and rows["alg-2"].split()[-1] == "25%" and rows["vision"].split()[-1] == "50%"
    assert rows["alg-2"][eff_at : eff_at + 7].strip() in ("▃", "▃▃")  # a quarter busy: ▃ of ▁..█
    assert "36.00" in rows["alg-2"] and "12.00" in rows["vision"]  # GPU-hours started (cards)
    bad = run(ledger_url, tmp_path, "--since", "30d", "--every", "1m", "--plot")
    assert bad.returncode == 2 and "at most 200" in bad.stderr and "Traceback" not in bad.stderr


def test_memory_is_shown_in_gib_hours_not_byte_hours(migrated_url: str, tmp_path: Path) -> None:
    now = dt.datetime.now(dt.UTC)

    store(migrated_url, [held("a100", "memory", 256 * 2**30 * 1000, now - dt.timedelta(hours=3))])
    table = run(migrated_url, tmp_path, "--since", "1d")
    assert table.returncode == 0, table.stderr
    (row,) = [line.split() for line in table.stdout.splitlines() if " memory " in f" {line} "]
    assert row[4:6] == ["512.00", "GiB"], row  # 256 GiB x 2 h


def test_h200_slices_are_billed_by_their_geometry_and_a_guess_is_warned(migrated_url: str, tmp_path: Path) -> None:
    """An hour of four H200 1g.35gb slices is one card-hour (a quarter each: only four fit), not 4/7;
    a profile of no known card is billed g / 7 with a warning naming it and the fix."""
    now = dt.datetime.now(dt.UTC)

    slices = (("nvidia.com/mig-1g.35gb", 4000), ("nvidia.com/mig-2g.30gb", 1000))
    store(migrated_url, [held("h200", resource, milli, now - dt.timedelta(hours=2)) for resource, milli in slices])
    done = run(migrated_url, tmp_path, "--since", "1d", "-o", "json")
    assert done.returncode == 0, done.stderr
    rows = {r["resource"]: r["gpuHours"] for r in json.loads(done.stdout)["rows"]}
    assert rows == {"nvidia.com/mig-1g.35gb": 1.0, "nvidia.com/mig-2g.30gb": round(2 / 7, 4)}
    assert done.stderr.count("warning:") == 1 and "nvidia.com/mig-2g.30gb is not a MIG profile" in done.stderr
    said = run(migrated_url, tmp_path, "--since", "1d", "--fraction", "nvidia.com/mig-2g.30gb=1/3")
    assert said.returncode == 0 and "warning" not in said.stderr


def test_dra_partitions_billed_as_the_leader_read_them_off_the_devices(migrated_url: str, tmp_path: Path) -> None:
    """``gpu.memory`` (MIG partitions charged by memory through DRA) has no part of a card in its name:
    the leader recorded it off the H200s' ResourceSlices (1/140Gi), so 70 GiB for 2 h is one card-hour,
    without TURNSTILE_GPU_FRACTIONS; the operator's own fraction still wins."""
    now = dt.datetime.now(dt.UTC)

    async def record() -> None:
        engine = database.make_engine(migrated_url)
        try:
            async with database.transaction(database.sessions(engine)) as s:
                fence = await lease.acquire(s, holder="replica-1", ttl=dt.timedelta(minutes=1))
                assert fence is not None
                await card_fractions.put(s, {"gpu.memory": Fraction(1, 140 * 2**30)}, fence=fence)
        finally:
            await engine.dispose()

    store(migrated_url, [held("h200", "gpu.memory", 70 * 2**30 * 1000, now - dt.timedelta(hours=3))])
    before = run(migrated_url, tmp_path, "--since", "1d", "-o", "json")
    assert [r["gpuHours"] for r in json.loads(before.stdout)["rows"]] == [None]  # (nothing says what part yet)
    asyncio.run(record())
    done = run(migrated_url, tmp_path, "--since", "1d", "-o", "json")
    assert done.returncode == 0, done.stderr
    assert [r["gpuHours"] for r in json.loads(done.stdout)["rows"]] == [1.0]
    told = run(migrated_url, tmp_path, "--since", "1d", "-o", "json", "--fraction", "gpu.memory=1/70Gi")
    assert [r["gpuHours"] for r in json.loads(told.stdout)["rows"]] == [2.0]
    table = run(migrated_url, tmp_path, "--since", "1d")
    (row,) = [line.split() for line in table.stdout.splitlines() if " gpu.memory " in f" {line} "]
    assert row[4:7] == ["140.00", "GiB", "1.00"], row  # (memory in GiB-hours, not byte-hours; one card-hour)


def test_rightsize_without_memory_data_suggests_nothing_and_says_why(migrated_url: str, tmp_path: Path) -> None:
    """A ledger whose runs have no GPU memory (no dcgm-exporter data) is not judged; bad options
    are refused with how to write them."""
    now = dt.datetime.now(dt.UTC)

    store(migrated_url, [
                tables.UsageInterval(
                    workload="ml/job", namespace="ml", cluster_queue="cq", local_queue="q", flavor="a100",
                    resource="nvidia.com/gpu", quantity=4000, labels={}, started_at=now - dt.timedelta(hours=3),
                    ended_at=now - dt.timedelta(hours=1), running_at=now - dt.timedelta(hours=3),
                    measured_seconds=7200.0, busy_seconds=720.0,
                )
    ])  # fmt: skip
    env = {**os.environ, "TURNSTILE_DATABASE_URL": migrated_url, "TURNSTILE_HOME": str(tmp_path / "home")}
    table = turnstile("rightsize", "--since", "1d", env=env)
    assert table.returncode == 0, table.stderr
    assert table.stdout.startswith("no GPU memory measured between"), table.stdout
    body = json.loads(turnstile("rightsize", "--since", "1d", "--by", "label:team", "-o", "json", env=env).stdout)
    assert body["workloads"] == [] and body["groups"] == [] and body["total"]["workloadsMeasured"] == 0
    bad = turnstile("rightsize", "--by", "team", env=env)
    assert bad.returncode == 2 and "label:KEY" in bad.stderr, bad.stderr


MIG_OFFERED = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: h200-mig}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: cq-a}
spec:
  resourceGroups:
  - coveredResources: [nvidia.com/mig-1g.18gb, nvidia.com/mig-1g.35gb, nvidia.com/mig-3g.71gb]
    flavors:
    - name: h200-mig
      resources:
      - {name: nvidia.com/mig-1g.18gb, nominalQuota: "7"}
      - {name: nvidia.com/mig-1g.35gb, nominalQuota: "4"}
      - {name: nvidia.com/mig-3g.71gb, nominalQuota: "2"}
"""


def test_rightsize_judges_each_resource_of_a_workload_and_counts_workloads_once(
    migrated_url: str, tmp_path: Path
) -> None:
    """A workload holding two slice sizes gets a verdict per size but counts once; a workload that
    moved ClusterQueue on one resource is one verdict on its whole peak; groups and totals agree."""
    now = dt.datetime.now(dt.UTC)

    def row(workload: str, cq: str, resource: str, peak_gib: float, hours_ago: float) -> tables.UsageInterval:
        return tables.UsageInterval(
            workload=workload, namespace=workload.partition("/")[0], cluster_queue=cq, local_queue="q",
            flavor="h200-mig", resource=resource, quantity=1000, labels={"team": "vision"},
            started_at=now - dt.timedelta(hours=hours_ago), ended_at=now - dt.timedelta(hours=hours_ago - 1),
            running_at=now - dt.timedelta(hours=hours_ago), measured_seconds=3600.0, busy_seconds=360.0,
            memory_peak_mib=peak_gib * 1024, memory_total_mib=71 * 1024, memory_seconds=3600.0,
            memory_mib_seconds=3600.0 * peak_gib * 1024 / 2,
        )  # fmt: skip

    store(
        migrated_url,
        [
            row("ml/two-sizes", "cq-a", "nvidia.com/mig-3g.71gb", 20, 5),  # 3g.71gb: a 1g.35gb would do
            row("ml/two-sizes", "cq-a", "nvidia.com/mig-1g.35gb", 8, 5),  # 1g.35gb: a 1g.18gb would do
            row("ml/moved", "cq-a", "nvidia.com/mig-3g.71gb", 8, 4),  # 8 GiB here, then 25 GiB after a move:
            row("ml/moved", "cq-b", "nvidia.com/mig-3g.71gb", 25, 2),  # only a 1g.35gb holds its peak
            row("ml/full", "cq-a", "nvidia.com/mig-1g.18gb", 15, 3),  # the smallest slice: nothing smaller
        ],
    )
    env = {**os.environ, "TURNSTILE_DATABASE_URL": migrated_url, "TURNSTILE_HOME": str(tmp_path / "home")}
    (tmp_path / "mig.yaml").write_text(MIG_OFFERED)
    assert turnstile("apply", "-f", str(tmp_path / "mig.yaml"), env=env).returncode == 0
    done = turnstile("rightsize", "--since", "1d", "--by", "label:team", "--all", "-o", "json", env=env)
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    verdicts = {(w["workload"], w["resource"]): w["suggestion"] for w in body["workloads"]}
    assert verdicts == {
        ("two-sizes", "nvidia.com/mig-3g.71gb"): "nvidia.com/mig-1g.35gb",
        ("two-sizes", "nvidia.com/mig-1g.35gb"): "nvidia.com/mig-1g.18gb",
        ("moved", "nvidia.com/mig-3g.71gb"): "nvidia.com/mig-1g.35gb",
        ("full", "nvidia.com/mig-1g.18gb"): None,
    }
    (moved,) = [w for w in body["workloads"] if w["workload"] == "moved"]
    assert moved["peakGiB"] == 25 and moved["gpuHours"] == 1.0 and moved["clusterQueue"] == "cq-b"
    # (an H200's 3g.71gb is half a card, a 1g.35gb a quarter, a 1g.18gb a seventh: each row an hour)
    held = 0.5 + 0.25 + 0.5 + 0.5 + 1 / 7
    saved = (0.5 - 0.25) + (0.25 - 1 / 7) + 2 * (0.5 - 0.25)
    total = body["total"]
    assert (total["workloadsMeasured"], total["workloadsFitting"]) == (3, 2), total
    assert total["gpuHours"] == pytest.approx(held) and total["gpuHoursSaved"] == pytest.approx(saved)
    assert [(g["group"], g["workloads"], g["fitting"]) for g in body["groups"]] == [("vision", 3, 2)]
    assert sum(w["gpuHoursSaved"] for w in body["workloads"]) == pytest.approx(saved)
    top = turnstile("rightsize", "--since", "1d", "--limit", "1", "-o", "json", env=env)
    assert [(w["workload"], w["resource"]) for w in json.loads(top.stdout)["workloads"]] == [
        ("moved", "nvidia.com/mig-3g.71gb")
    ]  # (half a card-hour saved over its two hours; two-sizes' resources a quarter and 3/28)
