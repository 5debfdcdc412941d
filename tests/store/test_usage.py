"""The ledger report in exact arithmetic: clipping to the window, open intervals, every grouping."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from admission.store import database, tables
from admission.store import usage as ledger

T0 = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
GPU = "nvidia.com/gpu"


def interval(
    ns: str, cq: str, flavor: str, resource: str, milli: int, start_h: float, end_h: float | None, team: str | None
) -> tables.UsageInterval:
    return tables.UsageInterval(
        workload=f"{ns}/job",
        namespace=ns,
        cluster_queue=cq,
        local_queue="q",
        flavor=flavor,
        resource=resource,
        quantity=milli,
        labels={"team": team} if team else {},
        started_at=T0 + dt.timedelta(hours=start_h),
        ended_at=None if end_h is None else T0 + dt.timedelta(hours=end_h),
    )


async def test_report_clips_counts_open_intervals_and_groups(sessions: async_sessionmaker[AsyncSession]) -> None:
    async with database.transaction(sessions) as s:
        s.add_all(
            [
                interval("ml-a", "team-a", "a100", GPU, 2000, 0, 3, "vision"),  # 2 GPUs for 3 h
                interval("ml-a", "team-a", "a100", GPU, 4000, 5, 5.25, "vision"),  # preempted after 15 min
                interval("ml-a", "team-a", "a100", "cpu", 500, 0, 3, "vision"),  # half a core for 3 h
                interval("ml-b", "team-b", "h100", GPU, 1000, -10, 2, "nlp"),  # began before the window
                interval("ml-b", "team-b", "a100", GPU, 8000, 9, None, None),  # still running
                interval("ml-c", "team-b", "a100", GPU, 1000, -5, -1, "nlp"),  # ended before the window
            ]
        )
    since, until = T0, T0 + dt.timedelta(hours=10)
    async with database.transaction(sessions) as s:
        by_ns = await ledger.report(s, by="namespace", since=since, until=until)
        by_cq = await ledger.report(s, by="clusterqueue", since=since, until=until)
        by_team = await ledger.report(s, by="label:team", since=since, until=until)
    hours = {(r.group, r.flavor, r.resource): r.hours for r in by_ns}
    assert hours == {
        ("ml-a", "a100", GPU): Decimal(2 * 3) + Decimal(4) * Decimal("0.25"),  # 7
        ("ml-a", "a100", "cpu"): Decimal("1.5"),
        ("ml-b", "h100", GPU): Decimal(2),  # clipped at the window's start
        ("ml-b", "a100", GPU): Decimal(8),  # open: counts up to the window's end (1 h x 8)
    }
    assert {(r.group, r.resource): r.hours for r in by_cq if r.resource == GPU and r.flavor == "a100"} == {
        ("team-a", GPU): Decimal(7),
        ("team-b", GPU): Decimal(8),
    }
    teams = {(r.group, r.flavor, r.resource): r.hours for r in by_team}
    assert teams[("vision", "a100", GPU)] == 7 and teams[("nlp", "h100", GPU)] == 2
    assert teams[(ledger.NO_LABEL, "a100", GPU)] == 8


def test_groupings_are_checked() -> None:
    assert ledger.parse_by("label:team") == "label:team"
    for bad in ("team", "label:", "cq"):
        with pytest.raises(ValueError, match="namespace, clusterqueue or label:KEY"):
            ledger.parse_by(bad)


async def test_started_and_used_hours_and_buckets(sessions: async_sessionmaker[AsyncSession]) -> None:
    """Requested counts the quota held; started from when the job ran; used is the measured
    share of the run weighted by utilisation, clipped with the window; nothing measured is None."""
    waited = interval("ml-a", "team-a", "a100", GPU, 2000, 0, 4, "vision")  # held 4 h by 2 GPUs
    waited.running_at = T0 + dt.timedelta(hours=1)  # an admission check took the first hour
    waited.measured_seconds, waited.busy_seconds = 3 * 3600.0, 0.25 * 3 * 3600  # 25 % over all 3 h run
    unmeasured = interval("ml-b", "team-b", "h100", GPU, 1000, 0, 2, "nlp")
    unmeasured.running_at = T0
    never_ran = interval("ml-c", "team-c", "a100", GPU, 1000, 0, 1, "infra")  # preempted while it waited
    async with database.transaction(sessions) as s:
        s.add_all([waited, unmeasured, never_ran])
    async with database.transaction(sessions) as s:
        whole = await ledger.report(s, by="label:team", since=T0, until=T0 + dt.timedelta(hours=10))
        half = await ledger.report(
            s, by="label:team", since=T0 + dt.timedelta(hours=2.5), until=T0 + dt.timedelta(hours=10)
        )
        buckets = await ledger.report(
            s, by="label:team", since=T0, until=T0 + dt.timedelta(hours=4), bucket=dt.timedelta(hours=2)
        )
    rows = {r.group: r for r in whole}
    vision = rows["vision"]
    assert (vision.hours, vision.started, vision.measured) == (Decimal(8), Decimal(6), Decimal(6))
    assert _near(vision.used, Decimal("1.5")) and _near(vision.efficiency, Decimal("0.25"))
    assert rows["nlp"].started == 2 and rows["nlp"].used is None and rows["nlp"].efficiency is None
    assert rows["infra"].hours == 1 and rows["infra"].started == 0 and rows["infra"].used is None
    # from 2.5 h: half of vision's run remains, so half of what was measured of it
    clipped = {r.group: r for r in half}["vision"]
    assert (clipped.hours, clipped.started) == (Decimal(3), Decimal(3)) and _near(clipped.used, Decimal("0.75"))
    by_bucket = {(r.group, r.bucket): r for r in buckets}
    first, second = T0, T0 + dt.timedelta(hours=2)
    assert by_bucket[("vision", first)].hours == 4 and by_bucket[("vision", first)].started == 2
    assert by_bucket[("vision", second)].started == 4 and _near(by_bucket[("vision", second)].used, 1)
    assert _near(by_bucket[("vision", first)].used, Decimal("0.5"))  # (a third of the run: 2 GPUs x 1 h x 25 %)
    assert ("nlp", second) not in by_bucket  # ended at 2 h: nothing in the second bucket
    assert ("infra", first) in by_bucket and ("infra", second) not in by_bucket


def _near(value: Decimal | None, expected: Decimal | int) -> bool:
    """Used hours come from measured seconds (floats) and shares of a run: equal to a micro-hour."""
    return value is not None and abs(value - expected) < Decimal("0.000001")


async def test_a_budget_counts_a_dra_mapping_of_whole_gpus_and_what_it_is_told_is_a_card(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """GPU-hours (docs/dra.md): ``whole-gpus`` mapped from gpu.nvidia.com is a card per unit; a
    resource given a part of a card (TURNSTILE_GPU_FRACTIONS) counts that part; cpu counts nothing."""
    from fractions import Fraction

    from admission.store import budgets
    from queues.dra import mappings

    async with database.transaction(sessions) as s:
        s.add_all(
            [
                interval("ml-d", "dra", "h100", "whole-gpus", 2000, 0, 3, "vision"),  # 2 cards for 3 h
                interval("ml-d", "dra", "h100", "mig-devices", 7000, 0, 1, "vision"),  # 7 slices of 1/7 for 1 h
                interval("ml-d", "dra", "h100", "cpu", 4000, 0, 3, "vision"),
            ]
        )
    fractions = {
        **mappings.parse([{"name": "whole-gpus", "deviceClassNames": ["gpu.nvidia.com"]}]).card_fractions(),
        "mig-devices": Fraction(1, 7),
    }
    budget = budgets.make(cluster_queue="dra", labels={}, gpu_hours=100, period="720h")
    async with database.transaction(sessions) as s:
        used = await budgets.used_hours(
            s, budget, T0 + dt.timedelta(hours=3), anchor=T0.timestamp(), fractions=fractions
        )
        untold = await budgets.used_hours(s, budget, T0 + dt.timedelta(hours=3), anchor=T0.timestamp())
    assert used == pytest.approx(2 * 3 + 1)
    assert untold == 0  # (without the mappings, neither is known to be a GPU)
