"""Prioritized lists (``firstAvailable``: "one H100, else two A100s") charged to quota: which
alternative a pod gets is decided by the allocator after admission, so a pod set is charged, per
resource, the most any alternative takes (``queues.dra.charges``); never an alternative uncounted."""

from __future__ import annotations

from typing import Any

import pytest

from queues import errors
from queues.cycle.scheduler import Admit
from queues.dra import charges, claim_templates, mappings
from queues.podsets import jobs
from tests.queues.test_dra import COUNTED, MIG_CLASS, SLICE, job, scheduler, sub, submit, template

GIB = 2**30 * 1000  # one GiB in milli-units
BY_PRODUCT = mappings.parse(
    [
        {"name": "h100-gpus", "deviceClassNames": ["h100.nvidia.com"]},
        {"name": "a100-gpus", "deviceClassNames": ["a100.nvidia.com"]},
        {"name": "whole-gpus", "deviceClassNames": ["gpu.nvidia.com"]},
    ]
)


def first_available(*alternatives: dict[str, Any]) -> dict[str, Any]:
    return {"name": "gpus", "firstAvailable": list(alternatives)}


def charged(devices: charges.Devices) -> jobs.PodSet:
    (ps,) = devices.charge("ns", job("j", {"name": "gpus", "resourceClaimTemplateName": "t"}).pod_sets)
    return ps


def test_alternatives_of_one_resource_are_charged_the_largest() -> None:
    one_else_two = template("t", first_available(sub("one"), sub("two", count=2)))
    ps = charged(charges.Devices.of(BY_PRODUCT, [one_else_two]))
    assert ps.unaccounted is None
    assert ps.requests == {"cpu": 1000, "whole-gpus": 2000} and ps.devices == {"whole-gpus": 2000}


def test_alternatives_of_different_resources_are_each_charged() -> None:
    """One H100 else two A100s, each product its own quota: the allocator may give either, so the
    pod set holds both until Turnstile knows which (the docs say so)."""
    h100_else_a100 = template(
        "t", first_available(sub("h100", "h100.nvidia.com"), sub("a100", "a100.nvidia.com", count=2))
    )
    ps = charged(charges.Devices.of(BY_PRODUCT, [h100_else_a100]))
    assert ps.requests == {"cpu": 1000, "h100-gpus": 1000, "a100-gpus": 2000}


def test_partition_alternatives_are_charged_the_larger_counter() -> None:
    """One 3g partition (71424Mi) else two 1g partitions (2 x 16Gi = 32Gi): 71424Mi."""
    large = {"cel": {"expression": "device.attributes['gpu.nvidia.com'].profile == '3g.71gb'"}}
    small = {"cel": {"expression": "device.attributes['gpu.nvidia.com'].profile == '1g.18gb'"}}
    pick = first_available(
        sub("large", "mig.nvidia.com", selectors=[large]), sub("small", "mig.nvidia.com", count=2, selectors=[small])
    )
    ps = charged(charges.Devices.of(COUNTED, [template("t", pick)], MIG_CLASS, (SLICE,)))
    assert ps.requests["gpu.memory"] == 71424 * 2**20 * 1000
    two_small_else_one = first_available(
        sub("small", "mig.nvidia.com", count=2, selectors=[small]), sub("one", "mig.nvidia.com", selectors=[small])
    )
    ps = charged(charges.Devices.of(COUNTED, [template("t", two_small_else_one)], MIG_CLASS, (SLICE,)))
    assert ps.requests["gpu.memory"] == 32 * GIB


def test_an_alternative_no_device_can_serve_is_still_charged_but_all_short_waits() -> None:
    """The allocator takes any alternative that can be had: a list is short of devices only when
    every alternative is (then its pod could never be scheduled, and it takes no quota)."""
    none = {"cel": {"expression": "device.attributes['gpu.nvidia.com'].profile == '7g.141gb'"}}
    small = {"cel": {"expression": "device.attributes['gpu.nvidia.com'].profile == '1g.18gb'"}}
    mig_else = first_available(
        sub("huge", "mig.nvidia.com", selectors=[none]), sub("small", "mig.nvidia.com", selectors=[small])
    )
    ps = charged(charges.Devices.of(COUNTED, [template("t", mig_else)], MIG_CLASS, (SLICE,)))
    # (what huge consumes is unknown, and a partition published later could be given to it)
    assert ps.unaccounted is not None and "subrequest gpus/huge: no device of driver" in ps.unaccounted
    whole = first_available(sub("huge", selectors=[none]), sub("any"))
    ps = charged(charges.Devices.of(MAPPINGS_WITH_MIG, [template("t", whole)], ONE_CLASS, (SLICE,)))
    assert ps.unaccounted is None and ps.requests["whole-gpus"] == 1000
    neither = first_available(sub("huge", selectors=[none]), sub("four", count=4, selectors=[small]))
    ps = charged(charges.Devices.of(MAPPINGS_WITH_MIG, [template("t", neither)], ONE_CLASS, (SLICE,)))
    assert ps.unaccounted is not None and "whole-gpus" not in ps.requests
    assert ps.unaccounted.startswith(
        "spec.podSets[0].template.spec.resourceClaims[0].devices.requests[0].firstAvailable"
    )
    assert "no alternative can ever be allocated" in ps.unaccounted
    assert "0 device(s) match in the cluster but 1 requested" in ps.unaccounted
    assert "2 device(s) match in the cluster but 4 requested" in ps.unaccounted


MAPPINGS_WITH_MIG = mappings.parse([{"name": "whole-gpus", "deviceClassNames": ["gpu.nvidia.com"]}])
ONE_CLASS = {"gpu.nvidia.com": ("device.attributes['gpu.nvidia.com'].type == 'mig'",)}


def test_the_largest_alternative_is_what_waits_for_quota() -> None:
    """The ClusterQueue has 2 whole GPUs: a pod set of one pod, "one else two", is charged two, so
    a second such job waits (either of them may be given two)."""
    s = scheduler(charges.Devices.of(BY_PRODUCT, [template("t", first_available(sub("one"), sub("two", count=2)))]))
    claim = {"name": "gpus", "resourceClaimTemplateName": "t"}
    submit(s, job("first", claim), 1)
    submit(s, job("second", claim), 2)
    assert [d.workload.key for d in s.schedule() if isinstance(d, Admit)] == ["ns/first"]
    assert s.workloads["ns/second"].reason == "WaitingForQuota"


@pytest.mark.parametrize(
    ("request_", "field", "said"),
    [
        (
            {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com"}, "firstAvailable": [sub("a")]},
            "spec.spec.devices.requests[0]",
            "exactly one of exactly and firstAvailable",
        ),
        (first_available(sub("a"), sub("a")), "spec.spec.devices.requests[0].firstAvailable[1].name", "duplicate"),
        (first_available(), "spec.spec.devices.requests[0].firstAvailable", "1 to 8 subrequests"),
        (first_available(*(sub(f"s{i}") for i in range(9))), "spec.spec.devices.requests[0].firstAvailable", "1 to 8"),
        (first_available({"name": "a"}), "spec.spec.devices.requests[0].firstAvailable[0].deviceClassName", "required"),
        (first_available(sub("a", count=0)), "spec.spec.devices.requests[0].firstAvailable[0].count", ">= 1"),
    ],
)
def test_a_bad_prioritized_list_is_refused_naming_the_field(request_: dict[str, Any], field: str, said: str) -> None:
    with pytest.raises(errors.Invalid) as caught:
        template("t", request_)
    assert any(p.path == field and said in p.message for p in caught.value.errors), caught.value.errors


def test_subrequests_are_named_as_the_allocator_names_them() -> None:
    (request,) = template("t", first_available(sub("h100"), sub("a100", count=2))).requests
    assert request.first_available and [a.name for a in request.alternatives] == ["gpus/h100", "gpus/a100"]
    assert request.alternatives[1] == claim_templates.DeviceRequest("gpus/a100", "gpu.nvidia.com", count=2)
