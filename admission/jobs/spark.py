"""The Spark operator's SparkApplication (``sparkoperator.k8s.io/v1beta2``, operator v2.4 and later,
which suspends): ``spec.suspend``; pod sets ``driver`` and ``executor`` (``queues.podsets.sparkapps``).

How it says it is over and whether its pods still run, from the operator's status (as Kueue reads it):

- finished when ``status.applicationState.state`` is ``COMPLETED``, ``FAILED`` or
  ``SUBMISSION_FAILED``;
- its pods run while that state is anything but a not-yet-submitted, ``SUSPENDED`` or finished one
  (``SUSPENDING`` is the operator deleting the driver: its pods still hold their nodes);
- its pods are Ready when the state is ``RUNNING`` (the driver runs) and as many executors as
  ``spec.executor.instances`` say ``RUNNING`` or ``COMPLETED`` in ``status.executorState`` (Kueue's
  reading: the app state alone turns ``RUNNING`` while executors still wait for nodes).

Its scheduling directives are written into ``spec.driver`` and ``spec.executor`` (the Spark pod
specs), not into pod templates: ``queues.podsets.layouts.SPARK``.
"""

from __future__ import annotations

from admission.jobs.base import Integration
from admission.kube.client import Obj, ResourceRef
from queues.podsets import sparkapps
from queues.podsets.jobs import JobInfo

_IDLE = ("", "NEW", "SUSPENDED", "COMPLETED", "FAILED", "SUBMISSION_FAILED")
_DONE = ("COMPLETED", "FAILED", "SUBMISSION_FAILED")


def _state(obj: Obj) -> str:
    return str(((obj.get("status") or {}).get("applicationState") or {}).get("state") or "")


def _active(obj: Obj) -> int:
    return int(_state(obj) not in _IDLE)


def _finished(obj: Obj) -> bool:
    return _state(obj) in _DONE


def _ready(obj: Obj, info: JobInfo) -> bool:
    if _state(obj) != "RUNNING":
        return False
    wanted = next((ps.count for ps in info.pod_sets if ps.name == sparkapps.EXECUTOR), 0)
    executors = (obj.get("status") or {}).get("executorState") or {}
    running = sum(1 for s in executors.values() if s in ("RUNNING", "COMPLETED")) if isinstance(executors, dict) else 0
    return running >= wanted


SPARKAPPLICATION = Integration(
    ResourceRef(sparkapps.API_VERSION, "SparkApplication", "sparkapplications"),
    (),
    _active,
    _finished,
    pods_ready=_ready,
)
