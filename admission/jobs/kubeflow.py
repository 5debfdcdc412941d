"""Kubeflow training jobs: PyTorchJob, TFJob, JAXJob, XGBoostJob and PaddleJob (``kubeflow.org/v1``, the
training-operator's), MPIJob (``kubeflow.org/v2beta1``, the mpi-operator's).

All suspend through ``spec.runPolicy.suspend``, finish with a Succeeded or Failed condition,
and report active pods per replica type in ``status.replicaStatuses``. Their pods are Ready when the
job's Running condition is True or a replica has succeeded (Kueue's reading).
"""

from __future__ import annotations

from admission.jobs.base import Integration
from admission.jobs.job_fields import condition_true
from admission.kube.client import Obj, ResourceRef
from queues.podsets.jobs import JobInfo


def _active(obj: Obj) -> int:
    statuses = (obj.get("status") or {}).get("replicaStatuses") or {}
    return sum(int((s or {}).get("active") or 0) for s in statuses.values() if isinstance(s, dict))


def _ready(obj: Obj, info: JobInfo) -> bool:
    statuses = (obj.get("status") or {}).get("replicaStatuses") or {}
    if any(int((s or {}).get("succeeded") or 0) > 0 for s in statuses.values() if isinstance(s, dict)):
        return True
    return condition_true(obj, ("Running",))


_DONE = ("Succeeded", "Failed")

PYTORCH = Integration(ResourceRef("kubeflow.org/v1", "PyTorchJob", "pytorchjobs"), _DONE, _active, pods_ready=_ready)
TF = Integration(ResourceRef("kubeflow.org/v1", "TFJob", "tfjobs"), _DONE, _active, pods_ready=_ready)
MPI = Integration(ResourceRef("kubeflow.org/v2beta1", "MPIJob", "mpijobs"), _DONE, _active, pods_ready=_ready)
JAX = Integration(ResourceRef("kubeflow.org/v1", "JAXJob", "jaxjobs"), _DONE, _active, pods_ready=_ready)
XGBOOST = Integration(ResourceRef("kubeflow.org/v1", "XGBoostJob", "xgboostjobs"), _DONE, _active, pods_ready=_ready)
PADDLE = Integration(ResourceRef("kubeflow.org/v1", "PaddleJob", "paddlejobs"), _DONE, _active, pods_ready=_ready)
ALL = (PYTORCH, TF, MPI, JAX, XGBOOST, PADDLE)
