"""Running the ``turnstile`` command as a user does: a real process, its output and exit status."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KUBECTL = shutil.which("kubectl")


def turnstile(
    *args: str, stdin: str | None = None, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "admission.cli.main", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        input=stdin,
        env=dict(env) if env is not None else None,
        timeout=120,
    )


async def kubectl(config: Path, *args: str, stdin: str | None = None) -> tuple[int, str, str]:
    """Run kubectl (tests using it skip when ``KUBECTL`` is None) against ``config``: (status, out, err)."""
    assert KUBECTL is not None
    proc = await asyncio.create_subprocess_exec(
        KUBECTL,
        "--kubeconfig",
        str(config),
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(stdin.encode() if stdin else None), timeout=30)
    return proc.returncode or 0, out.decode(), err.decode()
