"""Running the ``turnstile`` command as a user does: a real process, its output and exit status."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


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
