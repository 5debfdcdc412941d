"""DRA claims charged to quota (``queues.dra``): Kueue's ResourceClaimTemplate path, and never a
claim admitted uncounted."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from admission.store.workloads import pod_sets_from_json, pod_sets_json
from queues import errors
from queues.cycle.scheduler import Admit, Scheduler
from queues.dra import charges, mappings, slices
from queues.gpus import gpu_units
from queues.podsets import jobs
from tests.queues.builders import CQ, flavor
from tests.queues.builders import scheduler as make_scheduler

MAPPINGS = mappings.parse([{"name": "whole-gpus", "deviceClassNames": ["gpu.nvidia.com"]}])


def template(name: str, *requests: dict[str, Any], namespace: str = "ns") -> charges.ClaimTemplate:
    return charges.ClaimTemplate.from_object(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"spec": {"devices": {"requests": list(requests)}}},
        }
    )


def gpus(count: int | None = None, device_class: str = "gpu.nvidia.com", **extra: Any) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": device_class, **extra}
    if count is not None:
        exactly["count"] = count
    return {"name": "gpus", "exactly": exactly}


def sub(name: str, device_class: str = "gpu.nvidia.com", **extra: Any) -> dict[str, Any]:
    """A ``firstAvailable`` subrequest."""
    return {"name": name, "deviceClassName": device_class, **extra}


def job(name: str, *claims: dict[str, str], cpu: str = "1") -> jobs.JobInfo:
    return jobs.read_job(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "namespace": "ns", "labels": {jobs.QUEUE_LABEL: "q"}},
            "spec": {
                "template": {
                    "spec": {
                        "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
                        "resourceClaims": list(claims),
                    }
                }
            },
        }
    )


def scheduler(devices: charges.Devices) -> Scheduler:
    s = make_scheduler(flavor("h100"), CQ("cq").group(("h100", {"cpu": 16, "whole-gpus": 2})), queues={"q": "cq"})
    s.intake.set_devices(devices)
    return s


def submit(s: Scheduler, info: jobs.JobInfo, seq: int) -> None:
    s.submit(s.intake.workload_for(info, seq=seq, now=0.0))


def test_devices_claimed_through_a_template_are_charged_and_a_second_claim_waits_for_quota() -> None:
    s = scheduler(charges.Devices.of(MAPPINGS, [template("two", gpus(2))]))
    claim = {"name": "gpus", "resourceClaimTemplateName": "two"}
    submit(s, job("first", claim), 1)
    submit(s, job("second", claim), 2)
    admitted = [d.workload.key for d in s.schedule() if isinstance(d, Admit)]
    assert admitted == ["ns/first"]
    first = s.workloads["ns/first"]
    assert first.pod_sets[0].requests == {"cpu": 1000, "whole-gpus": 2000}
    second = s.workloads["ns/second"]
    assert second.reason == "WaitingForQuota" and "whole-gpus" in second.message


def test_a_request_without_count_is_one_device_and_requests_add_up() -> None:
    both = template("both", gpus(), {"name": "more", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 3}})
    charged = charges.Devices.of(MAPPINGS, [both]).charge(
        "ns", job("j", {"name": "g", "resourceClaimTemplateName": "both"}).pod_sets
    )
    assert charged[0].requests["whole-gpus"] == 4000 and charged[0].unaccounted is None


@pytest.mark.parametrize(
    ("claim", "templates", "said"),
    [
        (
            {"name": "gpus", "resourceClaimTemplateName": "mig"},
            [template("mig", gpus(1, "mig.nvidia.com"))],
            '"DeviceClass mig.nvidia.com is not mapped in DRA configuration for podset main"',
        ),
        (
            {"name": "gpus", "resourceClaimTemplateName": "absent"},
            [],
            "Not found: ResourceClaimTemplate ns/absent (pod set main, claim gpus)",
        ),
        (
            {"name": "gpus", "resourceClaimName": "shared"},
            [],
            "names ResourceClaim shared directly",
        ),
        (
            {"name": "gpus", "resourceClaimTemplateName": "all"},
            [template("all", gpus(device_class="gpu.nvidia.com", allocationMode="All"))],
            "allocationMode All asks for every matching device of DeviceClass gpu.nvidia.com",
        ),
        (
            {"name": "gpus", "resourceClaimTemplateName": "admin"},
            [template("admin", gpus(1, adminAccess=True))],
            "adminAccess requests are not charged",
        ),
        (
            {"name": "gpus", "resourceClaimTemplateName": "either"},
            [template("either", {"name": "gpus", "firstAvailable": [sub("big"), sub("mig", "mig.nvidia.com")]})],
            'DeviceClass mig.nvidia.com is not mapped in DRA configuration for podset main" (claim gpus, '
            "ResourceClaimTemplate ns/either, request gpus/mig)",
        ),
        (
            {"name": "gpus", "resourceClaimTemplateName": "either"},
            [template("either", {"name": "gpus", "firstAvailable": [sub("one"), sub("all", allocationMode="All")]})],
            "request gpus (pod set main, claim gpus): subrequest gpus/all: allocationMode All",
        ),
    ],
)
def test_a_claim_that_cannot_be_counted_waits_misconfigured_with_the_reason(
    claim: dict[str, str], templates: list[charges.ClaimTemplate], said: str
) -> None:
    s = scheduler(charges.Devices.of(MAPPINGS, templates))
    submit(s, job("j", claim), 1)
    assert s.schedule() == []
    wl = s.workloads["ns/j"]
    assert wl.admission is None and wl.reason == "Misconfigured"
    assert said in wl.message and "pod" in wl.message
    assert wl.pod_sets[0].requests == {"cpu": 1000}  # nothing charged, nothing admitted


def test_a_waiting_claim_is_charged_once_its_template_and_mapping_exist() -> None:
    s = scheduler(charges.Devices())
    submit(s, job("j", {"name": "gpus", "resourceClaimTemplateName": "two"}), 1)
    assert s.schedule() == [] and s.workloads["ns/j"].reason == "Misconfigured"
    s.intake.set_devices(charges.Devices.of(mappings.NONE, [template("two", gpus(2))]))  # still unmapped
    assert s.schedule() == [] and "not mapped" in s.workloads["ns/j"].message
    s.intake.set_devices(charges.Devices.of(MAPPINGS, [template("two", gpus(2))]))
    assert [d.workload.key for d in s.schedule() if isinstance(d, Admit)] == ["ns/j"]
    assert s.workloads["ns/j"].pod_sets[0].requests == {"cpu": 1000, "whole-gpus": 2000}


def test_the_store_keeps_the_claims_and_why_they_were_not_charged() -> None:
    held = charges.Devices().charge("ns", job("j", {"name": "gpus", "resourceClaimTemplateName": "two"}).pod_sets)
    again = pod_sets_from_json(pod_sets_json(held))
    assert again == held and again[0].unaccounted and again[0].claims[0].template == "two"


SOURCE = {"name": "memory", "driver": "gpu.nvidia.com", "deviceSelector": {"cel": {"expression": "true"}}}


@pytest.mark.parametrize(
    ("raw", "path", "said"),
    [
        (
            [{"name": "gpus", "deviceClassNames": ["a.example.com"], "sources": [{"capacity": {"name": "memory"}}]}],
            "[0].sources[0].capacity.driver",
            "required",
        ),
        (
            [{"name": "g", "deviceClassNames": ["a"], "sources": [{"capacity": dict(SOURCE, name="9 memory")}]}],
            "[0].sources[0].capacity.name",
            "C identifier",
        ),
        (
            [{"name": "g", "deviceClassNames": ["a"], "sources": [{"capacity": SOURCE, "counter": SOURCE}]}],
            "[0].sources[0]",
            "exactly one source type",
        ),
        (
            [{"name": "g", "deviceClassNames": ["a"], "sources": [{"capacity": SOURCE}, {"counter": SOURCE}]}],
            "[0].sources",
            "cannot mix counter and capacity",
        ),
        (
            [{"name": "g", "deviceClassNames": ["a"], "sources": [{"counter": SOURCE}, {"counter": SOURCE}]}],
            "[0].sources",
            "at most one counter source",
        ),
        (
            [{"name": "g", "deviceClassNames": ["a"], "sources": [{"capacity": dict(SOURCE, weight=2)}]}],
            "[0].sources[0].capacity.weight",
            "unknown field",
        ),
        ([{"name": "gpus", "deviceClassNames": ["a.example.com"], "sources": []}], "[0].sources", "one source"),
        (
            [{"name": "m", "deviceClassNames": ["a"], "sources": [{"counter": {"name": "memory", "driver": "d"}}]}],
            "[0].sources[0].counter.deviceSelector.cel.expression",
            "required",
        ),
        (
            [
                {
                    "name": "m",
                    "deviceClassNames": ["a"],
                    "sources": [
                        {
                            "counter": {
                                "name": "memory",
                                "driver": "d",
                                "deviceSelector": {"cel": {"expression": "device.driver =="}},
                            }
                        }
                    ],
                }
            ],
            "[0].sources[0].counter.deviceSelector.cel.expression",
            "does not compile",
        ),
        ([{"name": "gpus"}], "[0].deviceClassNames", "required"),
        ([{"name": "Bad Name", "deviceClassNames": ["a"]}], "[0].name", "resource name"),
        (
            [
                {"name": "a", "deviceClassNames": ["x.example.com"]},
                {"name": "b", "deviceClassNames": ["x.example.com"]},
            ],
            "[1].deviceClassNames[0]",
            "already charged as a",
        ),
        ([{"name": "a", "deviceClassNames": ["x"], "extra": 1}], "[0].extra", "unknown field"),
    ],
)
def test_bad_mappings_are_refused_naming_the_field(raw: Any, path: str, said: str) -> None:
    with pytest.raises(errors.Invalid) as caught:
        mappings.parse(raw)
    assert any(e.path == f"deviceClassMappings{path}" and said in e.message for e in caught.value.errors), str(
        caught.value
    )


def test_a_pod_claim_names_exactly_one_source() -> None:
    with pytest.raises(errors.Invalid, match="exactly one of resourceClaimName or resourceClaimTemplateName"):
        job("j", {"name": "gpus", "resourceClaimName": "a", "resourceClaimTemplateName": "b"})


def test_a_resource_of_whole_gpus_is_billed_a_card_per_unit_and_others_only_when_told() -> None:
    both = mappings.parse(
        [
            {"name": "whole-gpus", "deviceClassNames": ["gpu.nvidia.com"]},
            {"name": "mig-devices", "deviceClassNames": ["mig.nvidia.com"]},
        ]
    )
    assert both.card_fractions() == {"whole-gpus": 1}
    assert gpu_units.parse_fractions(["mig-devices=1/7"]) == {"mig-devices": Fraction(1, 7)}
    # a resource charged by memory (counter or capacity sources) is billed a card per card's worth
    assert gpu_units.parse_fractions(["gpu.memory=1/140Gi"]) == {"gpu.memory": Fraction(1, 140 * 2**30)}
    with pytest.raises(ValueError, match=r"gpu\.memory=1/140Gi"):
        gpu_units.parse_fractions(["gpu.memory=1/lots"])


# ----- partitionable devices: charged by a counter they consume (Kueue's counter sources) ----------

COUNTED = mappings.parse(
    [
        {
            "name": "gpu.memory",
            "deviceClassNames": ["mig.nvidia.com"],
            "sources": [
                {
                    "counter": {
                        "name": "memory",
                        "driver": "gpu.nvidia.com",
                        "deviceSelector": {"cel": {"expression": "true"}},
                    }
                }
            ],
        }
    ]
)
MIG_CLASS = {"mig.nvidia.com": ("device.attributes['gpu.nvidia.com'].type == 'mig'",)}


def partition(name: str, profile: str, memory: str | None) -> dict[str, Any]:
    device: dict[str, Any] = {"name": name, "attributes": {"type": {"string": "mig"}, "profile": {"string": profile}}}
    if memory is not None:
        device["consumesCounters"] = [{"counterSet": "gpu-0", "counters": {"memory": {"value": memory}}}]
    return device


def published(*devices: dict[str, Any], generation: int = 1, count: int = 1, name: str = "s0") -> slices.Slice:
    return slices.Slice.from_object(
        {
            "metadata": {"name": name},
            "spec": {
                "driver": "gpu.nvidia.com",
                "nodeName": "n1",
                "pool": {"name": "n1", "generation": generation, "resourceSliceCount": count},
                "devices": list(devices),
            },
        }
    )


def mig(count: int = 1, profile: str | None = None) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": "mig.nvidia.com", "count": count}
    if profile:
        exactly["selectors"] = [{"cel": {"expression": f"device.attributes['gpu.nvidia.com'].profile == '{profile}'"}}]
    return {"name": "mig", "exactly": exactly}


def charge(request: dict[str, Any], *cluster: slices.Slice) -> jobs.PodSet:
    devices = charges.Devices.of(COUNTED, [template("t", request)], MIG_CLASS, cluster)
    (ps,) = devices.charge("ns", job("j", {"name": "mig", "resourceClaimTemplateName": "t"}).pod_sets)
    return ps


SLICE = published(
    partition("small-0", "1g.18gb", "16Gi"),
    partition("small-1", "1g.18gb", "16Gi"),
    partition("large-0", "3g.71gb", "71424Mi"),
)


def test_a_partition_is_charged_what_it_consumes_of_its_counter_times_the_count() -> None:
    assert charge(mig(2, "1g.18gb"), SLICE).requests["gpu.memory"] == 2 * 16 * 2**30 * 1000
    assert charge(mig(1, "3g.71gb"), SLICE).requests["gpu.memory"] == 71424 * 2**20 * 1000


def test_a_request_matching_several_profiles_is_charged_the_largest() -> None:
    assert charge(mig(1), SLICE).requests["gpu.memory"] == 71424 * 2**20 * 1000


@pytest.mark.parametrize(
    ("request_", "cluster", "said"),
    [
        (mig(1), (), "no device of driver gpu.nvidia.com"),
        (mig(1, "1g.18gb"), (published(partition("p", "1g.18gb", None)),), "consumes no counter memory"),
        (mig(1), (published(partition("p", "1g.18gb", "16Gi"), count=2),), "no device of driver"),  # (incomplete)
        # a request's own selectors are checked against the devices first (Kueue's CEL check)
        (mig(1, "1g.18gb"), (), "insufficient matching devices for CEL selector in DeviceClass mig.nvidia.com: 0"),
        (mig(3, "1g.18gb"), (SLICE,), "2 device(s) match in the cluster but 3 requested"),
    ],
)
def test_a_counter_charge_that_cannot_be_known_waits(
    request_: dict[str, Any], cluster: tuple[slices.Slice, ...], said: str
) -> None:
    ps = charge(request_, *cluster)
    assert ps.unaccounted is not None and said in ps.unaccounted
    assert "gpu.memory" not in ps.requests


def test_only_a_pools_latest_generation_counts() -> None:
    old = published(partition("p", "1g.18gb", "16Gi"), generation=1, name="old")
    new = published(partition("p", "1g.18gb", "20Gi"), generation=2, name="new")
    assert charge(mig(1, "1g.18gb"), old, new).requests["gpu.memory"] == 20 * 2**30 * 1000


def test_a_scenarios_node_may_list_the_resource_slices_its_driver_publishes() -> None:
    from queues.simulation import scenario

    doc: dict[str, Any] = {
        "name": "s",
        "manifests": [],
        "jobs": [],
        "nodes": [
            {
                "name": "n1",
                "resourceSlices": [{"driver": "gpu.nvidia.com", "devices": [partition("p0", "1g.18gb", "16Gi")]}],
            }
        ],
    }
    parsed = scenario.parse(doc)
    (obj,) = parsed.device_objects
    assert obj["spec"]["nodeName"] == "n1" and obj["spec"]["pool"] == {
        "name": "n1",
        "generation": 1,
        "resourceSliceCount": 1,
    }
    assert [(d.node, d.name, d.consumes) for d in parsed.devices.published] == [("n1", "p0", {"memory": "16Gi"})]
    doc["nodes"][0]["resourceSlices"] = [{"devices": []}]
    doc["nodes"][0]["gpus"] = 8
    with pytest.raises(errors.Invalid) as caught:
        scenario.parse(doc)
    paths = {e.path for e in caught.value.errors}
    assert {"nodes[0].resourceSlices[0].driver", "nodes[0].gpus"} <= paths, paths


def test_a_claims_charge_is_quota_not_a_nodes_capacity() -> None:
    """Devices come from ResourceSlices: a node's allocatable capacity is asked for the containers'
    requests only (placement, the kube-scheduler model), so a node fits the pod (examples/dra-mig.yaml:
    with a node, every job runs to its end, none waits out waitForPodsReady)."""
    ps = charge(mig(1, "1g.18gb"), SLICE)
    assert ps.devices == {"gpu.memory": 16 * 2**30 * 1000} and "gpu.memory" not in ps.node_requests
    from pathlib import Path

    from admission.cli import documents
    from queues.simulation import scenario, simulator

    path = Path(__file__).resolve().parents[2] / "examples" / "dra-mig.yaml"
    report = simulator.Simulation(scenario.parse(documents.load_single(str(path)))).run().to_json("core")
    assert not [e for e in report["events"] if e["type"] == "Evicted"]
    assert {k: w["state"] for k, w in report["workloads"].items()} == dict.fromkeys(
        ["ml/large-a", "ml/any-b", "ml/small-c", "ml/small-d"], "Finished"
    )


# ----- shared devices: charged what an allocation takes of their capacity (Kueue's capacity sources) ----

GiB = 2**30 * 1000  # milli-units of a GiB
SHARED = mappings.parse(
    [{"name": "gpu.memory", "deviceClassNames": ["gpu.nvidia.com"], "sources": [{"capacity": SOURCE}]}]
)
STEPS = {"default": "10Gi", "validRange": {"min": "10Gi", "step": "10Gi", "max": "80Gi"}}


def shared_gpu(name: str, policy: dict[str, Any] | None = STEPS, memory: str = "80Gi", **more: Any) -> dict[str, Any]:
    dimension: dict[str, Any] = {"value": memory}
    if policy is not None:
        dimension["requestPolicy"] = policy
    return {"name": name, "allowMultipleAllocations": True, "capacity": {"memory": dimension, **more}}


def shared(count: int, memory: str | None = None) -> dict[str, Any]:
    extra = {"capacity": {"requests": {"memory": memory}}} if memory else {}
    return gpus(count, **extra)


def shared_charge(request: dict[str, Any], *devices: dict[str, Any], using: mappings.Mappings = SHARED) -> jobs.PodSet:
    cluster = published(*devices)
    made = charges.Devices.of(using, [template("t", request)], {"gpu.nvidia.com": ()}, (cluster,))
    (ps,) = made.charge("ns", job("j", {"name": "gpus", "resourceClaimTemplateName": "t"}).pod_sets)
    return ps


@pytest.mark.parametrize(
    ("request_", "devices", "charged"),
    [
        (shared(1, "15Gi"), [shared_gpu("g0")], 20 * GiB),  # rounded up to min + n * step
        (shared(2, "15Gi"), [shared_gpu("g0"), shared_gpu("g1")], 2 * 20 * GiB),  # times the count
        (shared(1, "1Gi"), [shared_gpu("g0")], 10 * GiB),  # at least min
        (shared(1), [shared_gpu("g0")], 10 * GiB),  # the policy's default
        (shared(1), [shared_gpu("g0", None)], 80 * GiB),  # no policy: the whole dimension
        (shared(1, "30Gi"), [shared_gpu("g0", {"validValues": ["10Gi", "40Gi", "80Gi"]})], 40 * GiB),
        (shared(1, "30Gi"), [shared_gpu("g0", {"validValues": ["32Gi"]}), shared_gpu("g1")], 32 * GiB),  # the most
    ],
)
def test_a_shared_device_is_charged_what_one_allocation_takes_of_its_capacity(
    request_: dict[str, Any], devices: list[dict[str, Any]], charged: int
) -> None:
    ps = shared_charge(request_, *devices)
    assert ps.unaccounted is None and ps.requests["gpu.memory"] == charged


def test_capacity_sources_of_one_mapping_add_up() -> None:
    cores = dict(SOURCE, name="cores")
    both = mappings.parse(
        [
            {
                "name": "gpu.memory",
                "deviceClassNames": ["gpu.nvidia.com"],
                "sources": [{"capacity": SOURCE}, {"capacity": cores}],
            }
        ]
    )
    device = shared_gpu("g0", cores={"value": "100", "requestPolicy": {"default": "25"}})
    assert shared_charge(shared(1), device, using=both).requests["gpu.memory"] == 10 * GiB + 25_000


@pytest.mark.parametrize(
    ("request_", "devices", "said"),
    [
        (shared(2), [shared_gpu("g0")], "insufficient matching devices for capacity driver gpu.nvidia.com: 1"),
        (shared(1), [{"name": "g0", "allowMultipleAllocations": True}], "no capacity dimension 'memory'"),
        (shared(1, "100Gi"), [shared_gpu("g0")], "cannot be satisfied by any matched device's RequestPolicy"),
        (shared(1, "50Gi"), [shared_gpu("g0", {"validValues": ["10Gi", "40Gi"]})], "RequestPolicy"),
    ],
)
def test_a_capacity_charge_that_cannot_be_known_waits(
    request_: dict[str, Any], devices: list[dict[str, Any]], said: str
) -> None:
    ps = shared_charge(request_, *devices)
    assert ps.unaccounted is not None and said in ps.unaccounted, ps.unaccounted
    assert "gpu.memory" not in ps.requests


def test_a_capacity_request_must_be_a_quantity() -> None:
    with pytest.raises(errors.Invalid, match=r"exactly\.capacity\.requests\.memory"):
        charges.ClaimTemplate.from_object(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": "t", "namespace": "ns"},
                "spec": {"spec": {"devices": {"requests": [shared(1, "lots")]}}},
            }
        )


def test_a_claims_selectors_must_be_met_by_devices_in_the_cluster_each_counted_once() -> None:
    """Kueue's ``validateCELSelectorsAgainstDevices``: a request with selectors of its own takes no
    quota while fewer devices in the cluster's ResourceSlices match than it asks for (a pod that could
    never be scheduled), and two requests of one claim cannot count the same device; requests
    without selectors of their own are not checked (whole GPUs, here)."""
    large = {"cel": {"expression": "device.attributes['gpu.nvidia.com'].profile == '3g.71gb'"}}
    one_class = {"gpu.nvidia.com": ("device.attributes['gpu.nvidia.com'].type == 'mig'",)}

    def charged(*requests: dict[str, Any]) -> jobs.PodSet:
        made = charges.Devices.of(MAPPINGS, [template("t", *requests)], one_class, (SLICE,))
        (ps,) = made.charge("ns", job("j", {"name": "gpus", "resourceClaimTemplateName": "t"}).pod_sets)
        return ps

    assert charged(dict(gpus(1, selectors=[large]), name="a")).requests["whole-gpus"] == 1000
    ps = charged(dict(gpus(1, selectors=[large]), name="a"), dict(gpus(1, selectors=[large]), name="b"))
    assert ps.unaccounted is not None and "whole-gpus" not in ps.requests
    assert ps.unaccounted.startswith("spec.podSets[0].template.spec.resourceClaims[0].devices.requests[1].exactly")
    assert "request b" in ps.unaccounted and "0 device(s) match in the cluster but 1 requested" in ps.unaccounted
    assert charged(gpus(5)).requests["whole-gpus"] == 5000  # (no selectors of its own: not checked)


def test_gpu_hour_budgets_count_a_mapping_of_whole_gpus() -> None:
    """examples/dra-gpus.yaml with a budget on its ClusterQueue: two jobs held whole-gpus: 2 for 120 s
    and 60 s, 0.1 GPU-hours (a mapping of NVIDIA's whole-GPU DeviceClass is a card per unit, in
    budgets and idle reclaim as on the ledger)."""
    from pathlib import Path

    from admission.cli import documents
    from queues.simulation import scenario, simulator

    path = Path(__file__).resolve().parents[2] / "examples" / "dra-gpus.yaml"
    doc = documents.load_single(str(path))
    doc["budgets"] = [{"clusterQueue": "gpus", "gpuHours": 10, "period": "1h"}]
    report = simulator.Simulation(scenario.parse(doc)).run().to_json("core")
    assert report["summary"]["budgets"][0]["usedThisPeriod"] == 0.1


def test_gpu_hour_budgets_bill_mig_partitions_by_the_memory_their_cards_hold() -> None:
    """examples/dra-mig.yaml with a budget: partitions charged by memory are billed as their part of
    an H200's 140Gi, read off its ResourceSlice, with no TURNSTILE_GPU_FRACTIONS: 69.75Gi for 120 s
    and 60 s, 16Gi for 60 s twice, 14,475 GiB-seconds, 0.029 GPU-hours."""
    from pathlib import Path

    from admission.cli import documents
    from queues.simulation import scenario, simulator

    path = Path(__file__).resolve().parents[2] / "examples" / "dra-mig.yaml"
    doc = documents.load_single(str(path))
    doc["budgets"] = [{"clusterQueue": "mig", "gpuHours": 10, "period": "1h"}]
    parsed = scenario.parse(doc)
    assert parsed.devices.card_fractions() == {"gpu.memory": Fraction(1, 140 * 2**30)}
    report = simulator.Simulation(parsed).run().to_json("core")
    assert report["summary"]["budgets"][0]["usedThisPeriod"] == round(14475 / 140 / 3600, 2) == 0.03
