"""waitForPodsReady (``queues.podsready``): Kueue's configuration, deadlines, backoff and the eviction."""

from __future__ import annotations

from typing import Any

import pytest

from queues import errors, podsready
from tests.queues.builders import CQ, flavor, make_workload
from tests.queues.builders import scheduler as make_scheduler


def test_defaults_are_kueues_v1beta2_ones() -> None:
    policy = podsready.parse(None)
    assert (policy.enable, policy.timeout, policy.recovery_timeout) == (True, 1800.0, 1800.0)
    assert (policy.backoff_base_seconds, policy.backoff_max_seconds, policy.backoff_limit_count) == (60, 3600, None)
    assert [policy.backoff(n) for n in (1, 2, 3, 7, 8)] == [60, 120, 240, 3600, 3600]


def test_durations_and_recovery_default_to_the_timeout() -> None:
    policy = podsready.parse({"timeout": "1h30m", "requeuingStrategy": {"backoffLimitCount": 2}})
    assert (policy.timeout, policy.recovery_timeout, policy.backoff_limit_count) == (5400, 5400, 2)
    assert podsready.parse({"timeout": 90, "recoveryTimeout": "500ms"}).recovery_timeout == 0.5
    assert not podsready.parse({"enable": False}).enable


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"timeout": 0}, "waitForPodsReady.timeout: must be longer than 0"),
        ({"timeout": "0s"}, "waitForPodsReady.timeout: must be longer than 0"),
        ({"timeout": "soon"}, "waitForPodsReady.timeout: must be a duration such as 5m"),
        ({"blockAdmission": True}, "waitForPodsReady.blockAdmission: is not supported"),
        ({"requeuingStrategy": {"backoffLimitCount": -1}}, "waitForPodsReady.requeuingStrategy.backoffLimitCount"),
        ({"requeuingStrategy": {"timestamp": "Now"}}, "waitForPodsReady.requeuingStrategy.timestamp: must be"),
        ({"timout": "5m"}, "waitForPodsReady.timout: unknown field"),
    ],
)
def test_bad_configuration_names_the_field(raw: dict[str, Any], expected: str) -> None:
    with pytest.raises(errors.Invalid) as info:
        podsready.parse(raw)
    assert any(str(e).startswith(expected) for e in info.value.errors), info.value.errors


def test_deadline_from_the_start_or_from_the_lost_pod() -> None:
    policy = podsready.WaitForPodsReady(timeout=300, recovery_timeout=60)
    assert policy.deadline(100, False, None) == 400
    assert policy.deadline(100, False, 1000) == 1060
    assert policy.deadline(100, True, None) is None
    assert podsready.DISABLED.deadline(100, False, None) is None


def test_a_late_workload_is_evicted_requeued_with_backoff_then_deactivated() -> None:
    s = make_scheduler(flavor("a100"), CQ("a").group(("a100", {"gpu": 8})), queues={"q": "a"})
    policy = podsready.WaitForPodsReady(timeout=300, backoff_limit_count=1)
    wl = make_workload("gang").request(gpu=8).submit(s)
    s.schedule()
    assert wl.started and wl.started_at == 0.0
    s.now = 300
    evict = s.pods_ready_timeout(wl.key, policy)
    assert evict is not None and (evict.reason, evict.detail) == ("PodsReadyTimeout", "Timeout")
    assert wl.admission is None and wl.requeue_at == 360 and wl.retries == 1
    assert (wl.reason, wl.message) == (
        "PodsReadyTimeout",
        "Exceeded the PodsReady timeout ns/gang; queues again after a 60s backoff (retry 1)",
    )
    assert s.schedule() == [], "it backs off"
    s.now = 360
    s.schedule()
    assert wl.admission is not None and wl.started_at == 360
    s.now = 700
    evict = s.pods_ready_timeout(wl.key, policy, recovery=True)
    assert evict is not None and evict.detail == "RequeuingLimitExceeded"
    assert not wl.active and wl.reason == "Inactive"
    assert "requeued 1 times, the limit (backoffLimitCount)" in wl.message
    assert s.pods_ready_timeout(wl.key, policy) is None, "a workload that is not running is not evicted"
