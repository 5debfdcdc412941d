"""Fair sharing in the running controller: the setting turns it on (Kueue's fairSharing block),
the shares show in ``/metrics`` under Kueue's names, and a queue that borrows least gets its
quota back by fair-sharing preemption, over the simulated cluster with the real client."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from admission import views
from admission.controller.monitoring.metrics import Metrics
from admission.policy import DEFAULT_POLICY, parse_fair_sharing
from admission.store import fair_usage
from queues.kueue import fair_sharing_config
from tests.admission.controller.test_metrics import scrape, value
from tests.admission.controller.world import eventually, job, world

CONFIG = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: a100}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Cohort
metadata: {name: all}
spec: {}
"""
for team, weight in (("team-a", "1"), ("team-b", "1")):
    CONFIG += f"""---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: {team}}}
spec:
  cohortName: all
  namespaceSelector: {{}}
  fairSharing: {{weight: "{weight}"}}
  preemption: {{withinClusterQueue: LowerPriority, reclaimWithinCohort: Any}}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors: [{{name: a100, resources: [{{name: nvidia.com/gpu, nominalQuota: "4"}}]}}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{name: {team}, namespace: ml}}
spec: {{clusterQueue: {team}}}
"""


def test_the_setting_is_kueues_block() -> None:
    assert parse_fair_sharing("") is None
    assert parse_fair_sharing("{}") == fair_sharing_config.FairSharing()
    assert parse_fair_sharing("preemptionStrategies: [LessThanInitialShare]") == fair_sharing_config.FairSharing(
        True, ("LessThanInitialShare",)
    )
    with pytest.raises(ValueError, match=r"fairSharing\.preemptionStrategies"):
        parse_fair_sharing("{preemptionStrategies: [Whatever]}")


async def test_shares_show_in_metrics_and_the_queue_borrowing_least_gets_its_quota_back(
    tmp_path: Path, migrated_url: str
) -> None:
    async with world(tmp_path, migrated_url) as w:
        await w.apply(CONFIG)
        policy = dataclasses.replace(DEFAULT_POLICY, fair_sharing=fair_sharing_config.FairSharing())
        controller = w.start_controller("replica-1", policy=policy)
        for i in range(4):
            await w.create(job(f"a{i}", gpus=2))

        async def running(names: tuple[str, ...]) -> bool:
            jobs = [await w.get(n) for n in names]
            return all(j["spec"]["suspend"] is False for j in jobs)

        await eventually(lambda: running(("a0", "a1", "a2", "a3")), what="team-a to borrow all 8 GPUs")
        async with w.sessions() as session:  # what `turnstile describe workload` plans with
            recorded = await fair_usage.get_setting(session)
        assert parse_fair_sharing(recorded) == fair_sharing_config.FairSharing(), recorded
        metrics = Metrics(controller)
        samples = scrape(metrics)
        # team-a borrows 4 of the 8 its cohort could lend it: 500 per mille; team-b borrows nothing
        assert value(samples, "kueue_cluster_queue_weighted_share", cluster_queue="team-a") == 500
        assert value(samples, "kueue_cluster_queue_weighted_share", cluster_queue="team-b") == 0
        assert value(samples, "kueue_cohort_weighted_share", cohort="all") == 0
        async with w.sessions() as session:  # what `turnstile describe clusterqueue` prints
            shown = await views.describe(session, "ClusterQueue", "team-a")
            other = await views.describe(session, "ClusterQueue", "team-b")
        assert "Fair share: weight 1, weighted share 500: borrows 50% of what its cohort can lend" in shown, shown
        assert "Fair share: weight 1, share 0 (borrows nothing)" in other, other

        await w.create(job("b0", gpus=4, queue="team-b"))
        await eventually(lambda: running(("b0",)), what="team-b to reclaim its 4 GPUs")
        evicted = [
            j["metadata"]["name"] for j in [await w.get(n) for n in ("a0", "a1", "a2", "a3")] if j["spec"]["suspend"]
        ]
        assert len(evicted) == 2, evicted  # exactly what team-b lent, no more
        samples = scrape(metrics)
        assert value(samples, "kueue_cluster_queue_weighted_share", cluster_queue="team-a") == 0
