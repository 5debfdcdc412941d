"""Whose children are parts (``queues.podsets.jobs.owned_by_parent``): only the enabled integrations'.

As Kueue's ``IsOwnerManagedByKueueForObject``, a Job whose controller is a JobSet is its JobSet's part
only where the JobSet integration is enabled; with it disabled, the Job is queued like any other
(suspended by the webhook, held by the controller), never left to run beside the quota. The webhook's
answers, its CEL match conditions and the controller's job views follow the same set."""

from __future__ import annotations

from typing import Any

import yaml

from admission.controller.watch.jobcache import JobCache
from admission.jobs import BY_KIND, enabled, owners_of
from admission.policy import Policy
from admission.webhook import configurations, pods, review
from queues.kueue import codec
from queues.model import Config
from tests.admission.webhook.test_server import CONFIG, job

BATCH_ONLY = owners_of(enabled("batch/job"))


def _child(name: str, kind: str = "JobSet", api_version: str = "jobset.x-k8s.io/v1alpha2") -> dict[str, Any]:
    obj = job(name)
    obj["metadata"].update(namespace="ml", uid=f"u-{name}")
    obj["metadata"]["ownerReferences"] = [
        {"apiVersion": api_version, "kind": kind, "name": "parent", "uid": "p", "controller": True}
    ]
    return obj


def test_a_child_of_a_kind_not_enabled_is_queued_on_its_own() -> None:
    config = Config.of([codec.parse(d) for d in yaml.safe_load_all(CONFIG)])
    batch = BY_KIND[("batch/v1", "Job")]
    every = review.mutate(_child("of-jobset"), "ml", config, batch, Policy())
    assert every.patch == [], "JobSet enabled: the Job is its part, left alone"
    alone = review.mutate(_child("of-jobset"), "ml", config, batch, Policy(owners=BATCH_ONLY))
    assert {"op": "add", "path": "/spec/suspend", "value": True} in alone.patch, "JobSet disabled: queued itself"
    checked = review.validate(
        "CREATE", _child("of-jobset"), None, "ml", config, batch, policy=Policy(owners=BATCH_ONLY)
    )
    assert checked.allowed


def test_an_appwrappers_pod_is_its_part_only_where_appwrappers_are_queued() -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "labels": {"workload.codeflare.dev/appwrapper": "aw"}},
    }
    assert pods.owned_by_job(pod)
    assert not pods.owned_by_job(pod, BATCH_ONLY)
    assert pods.owned_by_job(_child("of-job", "Job", "batch/v1"), BATCH_ONLY), "a Job's pods stay its"


def test_the_match_conditions_and_the_job_views_follow_the_enabled_kinds() -> None:
    (every,) = [c["expression"] for c in configurations.match_conditions("extended") if c["name"] == "not-a-jobs-pod"]
    (batch,) = [
        c["expression"]
        for c in configurations.match_conditions("extended", BATCH_ONLY)
        if c["name"] == "not-a-jobs-pod"
    ]
    assert "'jobset.x-k8s.io/v1alpha2/JobSet'" in every and "workload.codeflare.dev/appwrapper" in every
    assert "JobSet" not in batch and "appwrapper" not in batch and "'batch/v1/Job'" in batch
    for owners, part in ((owners_of(enabled(None)), True), (BATCH_ONLY, False)):
        cache = JobCache(owners=owners)
        cache.observe(BY_KIND[("batch/v1", "Job")], "ADDED", _child("of-jobset"))
        view = cache.views["u-of-jobset"]
        assert view.part is part and (cache.view("ml/of-jobset") is None) is part
