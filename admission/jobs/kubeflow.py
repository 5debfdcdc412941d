"""Kubeflow training jobs: PyTorchJob, TFJob, JAXJob, XGBoostJob and PaddleJob (``kubeflow.org/v1``, the
training-operator's), MPIJob (``kubeflow.org/v2beta1``, the mpi-operator's).

All suspend through ``spec.runPolicy.suspend``, finish with a Succeeded or Failed condition,
and report active pods per replica type in ``status.replicaStatuses``.
"""

from __future__ import annotations

from admission.jobs.base import Integration
from admission.kube.client import Obj, ResourceRef


def _active(obj: Obj) -> int:
    statuses = (obj.get("status") or {}).get("replicaStatuses") or {}
    return sum(int((s or {}).get("active") or 0) for s in statuses.values() if isinstance(s, dict))


_DONE = ("Succeeded", "Failed")

PYTORCH = Integration(ResourceRef("kubeflow.org/v1", "PyTorchJob", "pytorchjobs"), _DONE, _active)
TF = Integration(ResourceRef("kubeflow.org/v1", "TFJob", "tfjobs"), _DONE, _active)
MPI = Integration(ResourceRef("kubeflow.org/v2beta1", "MPIJob", "mpijobs"), _DONE, _active)
JAX = Integration(ResourceRef("kubeflow.org/v1", "JAXJob", "jaxjobs"), _DONE, _active)
XGBOOST = Integration(ResourceRef("kubeflow.org/v1", "XGBoostJob", "xgboostjobs"), _DONE, _active)
PADDLE = Integration(ResourceRef("kubeflow.org/v1", "PaddleJob", "paddlejobs"), _DONE, _active)
ALL = (PYTORCH, TF, MPI, JAX, XGBOOST, PADDLE)
