"""Kueue's resource transformations and excluded prefixes (``queues.podsets.transformations``):
Kueue's own cases (``pkg/workload/workload_test.go``), the pod set as quota and nodes see it, the
store keeping both, and the scheduler admitting by the transformed requests."""

from __future__ import annotations

from typing import Any

import pytest

from admission.policy import parse_transformations
from admission.store.workloads import pod_sets_from_json, pod_sets_json
from queues import errors, quantity
from queues.cycle.scheduler import Admit, Scheduler
from queues.dra import charges, mappings
from queues.model import Config
from queues.podsets import jobs, transformations
from tests.queues.builders import CQ, flavor, local_queue
from tests.queues.builders import scheduler as make_scheduler

MIG_AND_VGPU = [
    {"input": "nvidia.com/mig-1g.5gb", "strategy": "Replace",
     "outputs": {"example.com/accelerator-memory": "5Ki", "example.com/credits": "10"}},
    {"input": "nvidia.com/mig-2g.10gb", "strategy": "Replace",
     "outputs": {"example.com/accelerator-memory": "10Ki", "example.com/credits": "15"}},
    {"input": "nvidia.com/gpu", "strategy": "Retain",
     "outputs": {"example.com/accelerator-memory": "40Ki", "example.com/credits": "100"}},
    {"input": "nvidia.com/vgpucores", "strategy": "Replace", "multiplyBy": "nvidia.com/vgpu",
     "outputs": {"nvidia.com/total-vgpucores": "1"}},
    {"input": "nvidia.com/vgpumem", "strategy": "Replace", "multiplyBy": "nvidia.com/vgpu",
     "outputs": {"nvidia.com/total-vgpumem": "1"}},
]  # fmt: skip
ALLOWANCE = [
    {"input": "nvidia.com/gpumem", "strategy": "Replace", "multiplyBy": "nvidia.com/gpu",
     "outputs": {"quota.example.com/gpu-memory-overage": "1"}},
    {"input": "nvidia.com/gpu", "strategy": "Retain", "outputs": {"quota.example.com/gpu-memory-overage": "-1024"}},
]  # fmt: skip


def units(requests: dict[str, str]) -> dict[str, int]:
    """Requests as a pod set holds them (milli-units)."""
    return {r: quantity.parse_milli(v) for r, v in requests.items()}


@pytest.mark.parametrize(
    ("config", "requests", "expected"),
    [
        pytest.param(MIG_AND_VGPU, {"nvidia.com/mig-1g.5gb": "2", "nvidia.com/mig-2g.10gb": "1", "cpu": "1"},
                     {"cpu": "1", "example.com/accelerator-memory": "20Ki", "example.com/credits": "35"}, id="mig"),
        pytest.param(MIG_AND_VGPU, {"nvidia.com/gpu": "1", "cpu": "2"},
                     {"cpu": "2", "nvidia.com/gpu": "1", "example.com/accelerator-memory": "40Ki",
                      "example.com/credits": "100"}, id="retain"),
        pytest.param(MIG_AND_VGPU, {"nvidia.com/vgpu": "2", "nvidia.com/vgpucores": "30", "nvidia.com/vgpumem": "2048"},
                     {"nvidia.com/vgpu": "2", "nvidia.com/total-vgpucores": "60", "nvidia.com/total-vgpumem": "4096"},
                     id="hami-multiply-by"),
        pytest.param(ALLOWANCE, {"nvidia.com/gpumem": "2048", "nvidia.com/gpu": "2"},
                     {"quota.example.com/gpu-memory-overage": "2048", "nvidia.com/gpu": "2"}, id="allowance-above"),
        pytest.param(ALLOWANCE, {"nvidia.com/gpumem": "1024", "nvidia.com/gpu": "2"},
                     {"quota.example.com/gpu-memory-overage": "0", "nvidia.com/gpu": "2"}, id="allowance-at"),
        pytest.param(ALLOWANCE, {"nvidia.com/gpumem": "512", "nvidia.com/gpu": "2"},
                     {"quota.example.com/gpu-memory-overage": "0", "nvidia.com/gpu": "2"}, id="allowance-under"),
        pytest.param([{"input": "example.com/credit", "strategy": "Replace", "outputs": {"example.com/gpu": "-1"}}],
                     {"example.com/gpu": "8", "example.com/credit": "3"}, {"example.com/gpu": "8"},
                     id="allowance-does-not-reach-a-direct-request"),
        pytest.param([{"input": "example.com/credit", "strategy": "Replace", "outputs": {"example.com/gpu": "1"}}],
                     {"example.com/gpu": "1", "example.com/credit": "1"}, {"example.com/gpu": "2"},
                     id="output-sharing-a-name-with-a-request-is-added"),
        pytest.param([{"input": "example.com/gpu", "outputs": {"example.com/gpu": "5"}}],
                     {"example.com/gpu": "1"}, {"example.com/gpu": "6"}, id="output-naming-its-retained-input"),
        pytest.param([{"input": "example.com/gpumem", "strategy": "Retain", "multiplyBy": "example.com/gpu",
                       "outputs": {"example.com/gpumem-quota": "1"}}],
                     {"example.com/gpumem": "1024", "example.com/gpu": "2"},
                     {"example.com/gpumem": "1024", "example.com/gpumem-quota": "2048", "example.com/gpu": "2"},
                     id="retain-with-multiply-by"),
        pytest.param([{"input": "example.com/gpumem", "multiplyBy": "cpu", "outputs": {"example.com/gpumem-quota": "1"}}],
                     {"example.com/gpumem": "1024", "cpu": "500m"},
                     {"example.com/gpumem": "1024", "example.com/gpumem-quota": "512", "cpu": "500m"},
                     id="multiplier-under-one"),
        pytest.param([{"input": "cpu", "strategy": "Replace", "outputs": {"example.com/cpu-credits": "3000"}},
                      {"input": "memory", "strategy": "Replace", "outputs": {"example.com/memory-credits": "3m"}}],
                     {"cpu": "100m", "memory": "100M"},
                     {"example.com/cpu-credits": "300", "example.com/memory-credits": "300k"}, id="milli-values"),
    ],
)  # fmt: skip
def test_kueues_cases(config: list[dict[str, Any]], requests: dict[str, str], expected: dict[str, str]) -> None:
    assert transformations.parse(config).requests(units(requests)) == units(expected)


def test_excluded_prefixes_are_not_counted_and_come_before_the_transformations() -> None:
    t = transformations.parse(
        [{"input": "example.com/credit", "outputs": {"example.com/gpu": "1"}}], ["example.com/", "ephemeral-"]
    )
    counted = t.requests(units({"example.com/credit": "3", "ephemeral-storage": "1Gi", "cpu": "1"}))
    assert counted == units({"cpu": "1"})


def test_a_pod_set_keeps_what_its_containers_asked_for_nodes_and_the_store_keeps_both() -> None:
    t = transformations.parse(MIG_AND_VGPU[3:])
    asked = units({"nvidia.com/vgpu": "2", "nvidia.com/vgpucores": "30"})
    (ps,) = t.apply((jobs.PodSet("main", 2, asked),))
    assert ps.requests == units({"nvidia.com/vgpu": "2", "nvidia.com/total-vgpucores": "60"})
    assert ps.node_requests == asked  # (a node has vGPU cores, not quota's totals)
    assert ps.total() == units({"nvidia.com/vgpu": "4", "nvidia.com/total-vgpucores": "120"})
    assert pod_sets_from_json(pod_sets_json([ps])) == (ps,)
    untouched = jobs.PodSet("other", 1, units({"cpu": "1"}))
    assert t.apply((untouched,)) == (untouched,) and untouched.container_requests is None


@pytest.mark.parametrize(
    ("config", "exclude", "field", "says"),
    [
        ([{"input": "a", "strategy": "Keep"}], None, "transformations[0].strategy", "Unsupported value: 'Keep'"),
        ([{"input": "a"}, {"input": "a"}], None, "transformations[1].input", "Duplicate value: 'a'"),
        ([{"strategy": "Retain"}], None, "transformations[0].input", "required"),
        ([{"input": "a", "output": {"b": "1"}}], None, "transformations[0].output", "unknown field"),
        ([{"input": "a", "outputs": {"b": "lots"}}], None, "transformations[0].outputs.b", "quantity"),
        ({"input": "a"}, None, "transformations", "must be a list"),
        (None, "example.com/", "excludeResourcePrefixes", "must be a list"),
        (None, [""], "excludeResourcePrefixes[0]", "prefix"),
    ],
)
def test_bad_configuration_names_the_field(config: Any, exclude: Any, field: str, says: str) -> None:
    with pytest.raises(errors.Invalid) as caught:
        transformations.parse(config, exclude)
    assert [e.path for e in caught.value.errors] == [field]
    assert says in caught.value.errors[0].message


def test_the_settings_read_kueues_yaml_and_refuse_a_bad_entry_by_name() -> None:
    t = parse_transformations(
        "- {input: nvidia.com/gpumem, strategy: Replace, multiplyBy: nvidia.com/gpu, outputs: {total-gpumem: 1}}",
        "example.com/, ephemeral-",
    )
    assert set(t.by_input) == {"nvidia.com/gpumem"} and t.exclude_prefixes == ("example.com/", "ephemeral-")
    assert not parse_transformations("", "")
    with pytest.raises(ValueError, match=r"transformations\[0\]\.strategy"):
        parse_transformations("[{input: a, strategy: replace}]", "")


def hami_job(name: str, vgpus: str, mem: str) -> jobs.JobInfo:
    limits = {"nvidia.com/gpu": vgpus, "nvidia.com/gpumem": mem}
    return jobs.read_job(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "namespace": "ns", "labels": {jobs.QUEUE_LABEL: "q"}},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]}}},
        }
    )


def test_the_scheduler_admits_by_the_totals_and_waits_for_quota_on_them() -> None:
    s = make_scheduler(
        flavor("hami"), CQ("cq").group(("hami", {"nvidia.com/gpu": 20, "total-gpumem": 8192})), queues={"q": "cq"}
    )
    t = transformations.parse(
        [{"input": "nvidia.com/gpumem", "strategy": "Replace", "multiplyBy": "nvidia.com/gpu",
          "outputs": {"total-gpumem": "1"}}]
    )  # fmt: skip
    s.intake.set_devices(charges.Devices.of(mappings.NONE, [], transformations=t))
    for seq, (name, vgpus, mem) in enumerate([("big", "2", "3072"), ("next", "1", "4096")]):
        s.submit(s.intake.workload_for(hami_job(name, vgpus, mem), seq=seq, now=0.0))
    assert [d.workload.key for d in s.schedule() if isinstance(d, Admit)] == ["ns/big"]
    waiting = s.workloads["ns/next"]
    assert waiting.reason == "WaitingForQuota" and "total-gpumem" in waiting.message
    assert s.workloads["ns/big"].admission is not None
    assert s.workloads["ns/big"].admission.usage == {
        ("hami", "nvidia.com/gpu"): 2000,
        ("hami", "total-gpumem"): 6144000,
    }


def test_new_transformations_after_a_restart_do_not_requeue_a_running_job() -> None:
    s = make_scheduler(
        flavor("hami"),
        CQ("cq").group(("hami", {"nvidia.com/gpu": 20, "nvidia.com/gpumem": 99999, "total-gpumem": 99999})),
        queues={"q": "cq"},
    )
    s.submit(s.intake.workload_for(hami_job("running", "2", "3072"), seq=1, now=0.0))
    assert [d.workload.key for d in s.schedule() if isinstance(d, Admit)] == ["ns/running"]
    t = transformations.parse(
        [{"input": "nvidia.com/gpumem", "strategy": "Replace", "multiplyBy": "nvidia.com/gpu",
          "outputs": {"total-gpumem": "1"}}]
    )  # fmt: skip
    s.intake.set_devices(charges.Devices.of(mappings.NONE, [], transformations=t))
    remade = s.intake.workload_for(hami_job("running", "2", "3072"), seq=2, now=1.0)
    assert remade.pod_sets[0].requests != s.workloads["ns/running"].pod_sets[0].requests
    assert s.retries.job_changed("ns/running", remade.pod_sets, remade.shape) is None
    grown = s.intake.workload_for(hami_job("running", "3", "3072"), seq=3, now=1.0)
    assert s.retries.job_changed("ns/running", grown.pod_sets, grown.shape) is not None  # (other pods: requeued)


def test_quota_check_strategy_is_kueues_and_a_bad_one_names_the_field() -> None:
    assert transformations.parse(None, None, "IgnoreUndeclared").ignore_undeclared
    assert not transformations.parse(None, None, "BlockUndeclared").ignore_undeclared
    assert not transformations.parse(None).ignore_undeclared, "BlockUndeclared is the default"
    with pytest.raises(errors.Invalid) as bad:
        transformations.parse(None, None, "IgnoreAll")
    assert [e.path for e in bad.value.errors] == ["quotaCheckStrategy"]
    assert "'IgnoreAll': must be BlockUndeclared or IgnoreUndeclared" in str(bad.value.errors[0])
    with pytest.raises(errors.Invalid) as both:
        transformations.parse(None, ["example.com/"], "IgnoreUndeclared")
    assert "excludeResourcePrefixes is not allowed when quotaCheckStrategy is IgnoreUndeclared" in str(
        both.value.errors[0]
    )
    assert parse_transformations("", "", "IgnoreUndeclared").ignore_undeclared
    assert parse_transformations("", "", "BlockUndeclared") is transformations.NONE


@pytest.mark.parametrize("ignore", [False, True])
def test_a_resource_the_cluster_queue_does_not_cover_blocks_unless_undeclared_resources_are_ignored(
    ignore: bool,
) -> None:
    """Kueue's quotaCheckStrategy: BlockUndeclared keeps a pod asking for a resource its ClusterQueue
    does not cover out (NoMatchingFlavor); IgnoreUndeclared admits it by the resources covered."""
    s = Scheduler(
        Config.of(
            [flavor("a100"), CQ("cq").group(("a100", {"nvidia.com/gpu": 8})).build(), local_queue("ns", "q", "cq")]
        ),
        ignore_undeclared=ignore,
    )
    job = hami_job("train", "2", "1024")  # (nvidia.com/gpumem: not covered by the queue)
    s.submit(s.intake.workload_for(job, seq=1, now=0.0))
    decided = s.schedule()
    wl = s.workloads["ns/train"]
    if ignore:
        assert [d.workload.key for d in decided if isinstance(d, Admit)] == ["ns/train"]
        assert wl.admission is not None and wl.admission.usage == {("a100", "nvidia.com/gpu"): 2000}
        s.set_config(s.config)  # (a new configuration keeps the strategy)
        assert s.snapshot.ignore_undeclared
    else:
        assert decided == [] and wl.reason == "NoMatchingFlavor"
        assert "requests nvidia.com/gpumem, which ClusterQueue cq does not provide" in wl.message
