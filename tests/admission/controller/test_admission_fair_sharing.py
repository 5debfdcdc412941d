"""Admission fair sharing in the running controller: the setting turns it on (Kueue's
admissionFairSharing block); a LocalQueue that used nothing goes before an older workload of one
that did; the history is in PostgreSQL and a new term (restart, fail-over) takes it back."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from admission import views
from admission.policy import DEFAULT_POLICY, parse_admission_fair_sharing
from admission.store import database, fair_usage
from queues.cycle import usage_history
from tests.admission.controller.world import GPU, JOBS, eventually, job, world

CONFIG = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: a100}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: shared}
spec:
  namespaceSelector: {}
  admissionScope: {admissionMode: UsageBasedAdmissionFairSharing}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors: [{name: a100, resources: [{name: nvidia.com/gpu, nominalQuota: "4"}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: team-a, namespace: ml}
spec: {clusterQueue: shared}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: team-b, namespace: ml}
spec: {clusterQueue: shared}
"""


def test_the_setting_is_kueues_block() -> None:
    assert parse_admission_fair_sharing("") is None
    assert parse_admission_fair_sharing("{usageHalfLifeTime: 1h}") == usage_history.AdmissionFairSharing(3600.0)
    with pytest.raises(ValueError, match=r"admissionFairSharing\.usageHalfLifeTime: required"):
        parse_admission_fair_sharing("{usageSamplingInterval: 1m}")


async def test_the_least_used_local_queue_goes_first_and_its_history_survives_a_new_term(
    tmp_path: Path, migrated_url: str
) -> None:
    async with world(tmp_path, migrated_url) as w:
        await w.apply(CONFIG)
        afs = usage_history.AdmissionFairSharing(half_life=3600.0, sampling_interval=60.0)
        policy = dataclasses.replace(DEFAULT_POLICY, admission_fair_sharing=afs)
        controller = w.start_controller("replica-1", policy=policy)

        async def running(name: str) -> bool:
            return (await w.get(name))["spec"]["suspend"] is False

        await w.create(job("a0", gpus=4))  # runs until deleted
        await eventually(lambda: running("a0"), what="a0 to run")
        await w.create(job("a1", gpus=4))  # older than b1, from the LocalQueue that used 4 GPUs
        await w.create(job("b1", gpus=4, queue="team-b"))
        await asyncio.sleep(0.5)
        assert not await running("a1") and not await running("b1")  # both wait for a0's GPUs
        await w.kube.delete(JOBS, "ml", "a0")
        await eventually(lambda: running("b1"), timeout=20.0, what="b1 (team-b used nothing) to go first")
        assert not await running("a1")

        await w.stop_controller(controller)
        async with database.transaction(w.sessions) as s:
            stored = await fair_usage.load(s)
        assert stored["ml/team-a"][0][GPU] > 0 and stored["ml/team-b"][0][GPU] > 0, stored
        async with w.sessions() as session:  # what `turnstile describe localqueue ml/team-a` prints
            shown = await views.describe(session, "LocalQueue", "ml/team-a")
        assert f"Usage history (admission fair sharing): {GPU} " in shown, shown

        replica = w.start_controller("replica-2", policy=policy)
        await eventually(lambda: replica.term is not None, what="replica-2 to lead")
        assert replica.term is not None and replica.term.scheduler.usage is not None
        taken_back = replica.term.scheduler.usage.consumed("ml/team-a", replica.term.scheduler.now)
        assert taken_back[GPU] > 0, "the history was read back, not started afresh"
