"""Kubernetes' own OpenAPI schemas for built-in kinds, bundled with Turnstile for the simulated API server.

The simulated cluster refuses a built-in object the real server would refuse (``admission.sim.
validation``) and merges strategic patches by the kinds' patch metadata; both read Kubernetes' JSON
schemas. They used to come from ``kubernetes-validate``, a test-only extra of 108 MB (every Kubernetes
release's schemas), so a plain ``pip install`` could not run ``turnstile demo``, ``sim up`` or
``simulate --engine cluster`` (issue 33). The one release the simulated server models is bundled
instead: ``kubernetes-schemas-v1.35.0.json.gz`` (419 KB), the files of kubernetes-validate 1.37.0's
``kubernetes-json-schema/v1.35.0-local-strict`` (strict: unknown fields are errors) as one JSON object,
file name to contents. They are generated from Kubernetes' OpenAPI by yannh/kubernetes-json-schema
(Apache-2.0, as Kubernetes).

``python -m admission.sim.server.schema.kube_schemas`` rewrites the bundle from an installed kubernetes-validate
(``make schemas``); ``tests/admission/sim/test_kube_schemas.py`` holds the bundle equal to it, file
for file, so the two cannot drift apart unnoticed.
"""

from __future__ import annotations

import functools
import gzip
import json
import sys
from importlib import resources
from pathlib import Path
from typing import Any

VERSION = "1.35.0"  # the Kubernetes release whose schemas the simulated API server checks
DIRECTORY = f"v{VERSION}-local-strict"
BUNDLE = f"kubernetes-schemas-v{VERSION}.json.gz"


@functools.cache
def _bundle() -> dict[str, Any]:
    with resources.files("admission.sim.server.schema").joinpath(BUNDLE).open("rb") as raw, gzip.open(raw) as text:
        loaded: dict[str, Any] = json.load(text)
    return loaded


def contents(name: str) -> Any:
    """One schema file's contents (``pod-v1.json``, ``_definitions.json``); FileNotFoundError if the
    release has no such file (a kind Kubernetes does not define)."""
    try:
        return _bundle()[name]
    except KeyError:
        raise FileNotFoundError(f"{DIRECTORY}/{name}") from None


def names() -> list[str]:
    return sorted(_bundle())


def from_kubernetes_validate() -> dict[str, Any]:
    """The same files read from an installed kubernetes-validate (the bundle's source)."""
    folder = resources.files("kubernetes_validate").joinpath("kubernetes-json-schema", DIRECTORY)
    return {entry.name: json.loads(entry.read_text()) for entry in folder.iterdir() if entry.name.endswith(".json")}


def write(path: Path) -> int:
    """Write the bundle from kubernetes-validate; returns its size in bytes."""
    raw = json.dumps(from_kubernetes_validate(), sort_keys=True, separators=(",", ":")).encode()
    data = gzip.compress(raw, compresslevel=9, mtime=0)  # (mtime 0: the same input gives the same bytes)
    path.write_bytes(data)
    return len(data)


if __name__ == "__main__":
    target = Path(__file__).with_name(BUNDLE)
    sys.stdout.write(f"{target}: {write(target):,} bytes\n")
