"""The controller image is reproducible: a base pinned by digest, dependencies installed by hash."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def test_the_base_image_is_pinned_by_digest() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    (base,) = re.findall(r"^ARG BASE=(\S+)$", dockerfile, re.M)
    assert re.fullmatch(r"python:3\.11-slim-bookworm@sha256:[0-9a-f]{64}", base), base
    assert [line.split()[1] for line in dockerfile.splitlines() if line.startswith("FROM ")] == ["${BASE}", "${BASE}"]


def test_every_dependency_is_locked_with_hashes_and_installed_by_them() -> None:
    lock = (ROOT / "requirements.lock").read_text()
    pinned = {_name(m) for m in re.findall(r"^([A-Za-z0-9_.-]+)==", lock, re.M)}
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    missing = sorted({_name(d) for d in declared} - pinned)
    assert missing == [], f"run `make lock`: {missing} not in requirements.lock"
    for block in re.split(r"\n(?=[A-Za-z0-9_.-]+==)", lock.split("\n\n", 1)[-1]):
        if "==" in block.split("\n", 1)[0]:
            assert "--hash=sha256:" in block, block.split("\n", 1)[0]
    assert "file://" not in lock and "--find-links" not in lock, "no machine-local index in the lock"
    assert "--require-hashes" in (ROOT / "Dockerfile").read_text()
