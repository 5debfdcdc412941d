"""The bundled Kubernetes schemas are kubernetes-validate's v1.35 files, and the simulated API server
validates with them alone: a plain ``pip install`` (no test extra) runs the simulated cluster (issue 33)."""

from __future__ import annotations

import subprocess
import sys

from admission.sim.server.schema import kube_schemas


def test_the_bundle_is_kubernetes_validates_files_one_for_one() -> None:
    upstream = kube_schemas.from_kubernetes_validate()
    assert kube_schemas.names() == sorted(upstream), "run `make schemas`"
    for name, body in upstream.items():
        assert kube_schemas.contents(name) == body, f"{name} differs: run `make schemas`"


def test_the_simulated_server_validates_built_in_kinds_without_kubernetes_validate() -> None:
    probe = """
import sys
sys.modules["kubernetes_validate"] = None  # as on a plain install: importing it fails
from admission.sim.server.schema import validation
from admission.sim.server.objects import ApiError, Resource
pod = Resource(group="", version="v1", plural="pods", kind="Pod", namespaced=True)
good = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
assert validation.schema(pod, good, "Strict") == []
try:
    validation.schema(pod, {**good, "spec": {"containers": [{"name": "c", "image": "busybox", "ports": [{"containerPort": "x"}]}]}})
except ApiError as exc:
    print("refused", exc.code, exc.message)
else:
    print("accepted")
"""
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True).stdout
    assert out.startswith("refused 422"), out
    assert "spec.containers[0].ports[0].containerPort" in out, out
