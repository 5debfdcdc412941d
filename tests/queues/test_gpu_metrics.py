"""Joining dcgm-exporter's series to pods (``queues.gpus.gpu_metrics``) and a ClusterQueue's
idle-reclaim annotation (``queues.efficiency.annotation_policy``)."""

from __future__ import annotations

from typing import Any

import pytest

from queues import efficiency, errors
from queues.gpus.gpu_metrics import combine, combine_ranges, pod_of
from queues.kueue import api, codec, validation


def sample(value: str, **labels: str) -> dict[str, Any]:
    return {"metric": {"__name__": "x", **labels}, "value": [1764700000.0, value]}


def points(*values: tuple[float, str], **labels: str) -> dict[str, Any]:
    return {"metric": labels, "values": [[t, v] for t, v in values]}


def test_a_run_is_the_mean_of_its_pods_points_within_it() -> None:
    active = [
        points((10, "0.2"), (11, "0.4"), (12, "0.6"), (20, "1.0"), pod="a", namespace="ml"),
        points((11, "0.8"), (12, "NaN"), exported_pod="b", exported_namespace="ml", pod="exporter"),
    ]
    util = [points((11, "0.9"), pod="a", namespace="ml"), points((11, "0.5"), (12, "0.7"), pod="c", namespace="ml")]
    samples = combine_ranges(active, util)
    assert samples.run_mean([("ml", "a")], 10, 12) == pytest.approx(0.4)  # engine activity wins; 20 is after it
    assert samples.run_mean([("ml", "a"), ("ml", "b")], 11, 12) == pytest.approx((0.4 + 0.6 + 0.8) / 3)  # NaN dropped
    assert samples.run_mean([("ml", "c")], 0, 100) == pytest.approx(0.6)  # no engine activity: utilisation
    assert samples.run_mean([("ml", "a")], 13, 19) is None, "no point within the run: unknown, never idle"
    assert samples.run_mean([("ml", "gone")], 0, 100) is None


def test_engine_activity_wins_and_a_pod_is_the_mean_of_its_gpus() -> None:
    active = [
        sample("0.1", pod="a", namespace="ml", gpu="0"),
        sample("0.3", pod="a", namespace="ml", gpu="1"),
        # through a ServiceMonitor: pod/namespace are the exporter's, the workload's are exported_*
        sample("0.5", pod="dcgm-exporter-x", namespace="gpu-operator", exported_pod="b", exported_namespace="ml"),
    ]
    util = [sample("0.9", pod="a", namespace="ml"), sample("0.42", pod="c", namespace="ml")]
    reading = combine(active, util)
    assert reading.by_pod == {("ml", "a"): 0.2, ("ml", "b"): 0.5, ("ml", "c"): 0.42}
    assert reading.series == 5 and reading.unjoined == 0
    assert reading.mean([("ml", "a"), ("ml", "b"), ("ml", "gone")]) == 0.35
    assert reading.mean([("ml", "gone")]) is None, "no series: unknown, never idle"


def test_series_that_name_no_pod_or_no_number_are_not_joined() -> None:
    reading = combine([sample("0.1", gpu="0"), sample("NaN", pod="a", namespace="ml"), {"metric": {}}], [])
    assert reading.by_pod == {} and reading.unjoined == 3
    assert pod_of({"pod": "p"}) is None and pod_of({"exported_pod": "p", "namespace": "ml"}) == ("ml", "p")


def cluster_queue(annotation: str) -> api.ClusterQueue:
    obj = codec.parse(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": "research", "annotations": {efficiency.POLICY_ANNOTATION: annotation}},
            "spec": {"namespaceSelector": {}, "resourceGroups": []},
        }
    )  # fmt: skip  (parsing validates: a bad annotation raises errors.Invalid with its path)
    assert isinstance(obj, api.ClusterQueue)
    return obj


def test_a_cluster_queues_policy_annotation_is_read_or_refused_with_its_path() -> None:
    good = cluster_queue('{"threshold": 0.2, "window": "15m", "action": "deactivate", "maxKeep": "2h"}')
    (policy,) = efficiency.annotated_policies([good])
    assert (policy.cluster_queue, policy.threshold, policy.window, policy.action, policy.max_keep) == (
        "research",
        0.2,
        900.0,
        "deactivate",
        7200.0,
    )
    assert policy.grace == 600.0 and policy.only_when_contended, "the scenario's defaults"
    assert validation.validate(good) == []
    path = "metadata.annotations[turnstile.dev/idle-reclaim]"
    for text, problem in (
        ('{"threshold": 3}', f"{path}.threshold: must be a fraction from 0 to 1"),
        ('{"action": "kill"}', f"{path}.action: must be one of warn, requeue, deactivate, not 'kill'"),
        ('{"windw": "5m"}', f"{path}.windw: unknown field"),
        ("{threshold: 0.3}", f"{path}: not JSON"),
        ("[1]", f"{path}: must be a JSON object"),
    ):
        with pytest.raises(errors.Invalid) as refused:
            cluster_queue(text)
        assert any(str(e).startswith(problem) for e in refused.value.errors), (text, refused.value.errors)
        assert efficiency.annotation_policy("research", text)[0] is None, "never half-read"
