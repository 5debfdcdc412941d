"""Cron schedules as the simulated CronJob controller reads them (``admission.sim.operators.cronjobs.Schedule``)."""

from __future__ import annotations

import datetime as dt

import pytest

from admission.sim.operators.cronjobs import Schedule


def at(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC)


def test_fields_steps_ranges_lists_and_macros() -> None:
    every_15 = Schedule("*/15 9-17 * * 1-5")
    assert every_15.next(at("2026-12-04T17:50:00")) == at("2026-12-07T09:00:00")  # Friday evening -> Monday
    assert Schedule("@daily").next(at("2026-12-02T10:00:00")) == at("2026-12-03T00:00:00")
    assert Schedule("0 0 1,15 * *").next(at("2026-12-02T00:00:00")) == at("2026-12-15T00:00:00")
    assert Schedule("0 12 * * 7").matches(at("2026-12-06T12:00:00")), "7 is Sunday too"


def test_day_of_month_or_weekday_when_both_are_restricted() -> None:
    either = Schedule("0 0 13 * 5")  # the 13th, or any Friday
    assert either.matches(at("2026-12-04T00:00:00")) and either.matches(at("2026-12-13T00:00:00"))


def test_latest_runs_only_the_most_recent_missed_time() -> None:
    hourly = Schedule("@hourly")
    assert hourly.latest(at("2026-12-02T08:30:00"), at("2026-12-02T11:10:00")) == at("2026-12-02T11:00:00")
    assert hourly.latest(at("2026-12-02T11:00:00"), at("2026-12-02T11:59:00")) is None


@pytest.mark.parametrize("text", ["* * * *", "61 * * * *", "*/0 * * * *", "5-1 * * * *", "@sometimes"])
def test_bad_schedules_say_what_is_wrong(text: str) -> None:
    with pytest.raises(ValueError):
        Schedule(text)
