"""Long-lived tasks must stop when cancelled: no ``asyncio.wait_for`` in ``admission/``.

On Python 3.11 ``asyncio.wait_for`` can swallow a cancellation that arrives in the same loop
iteration as the awaited thing finishing (gh-86296, fixed in 3.12 by rebuilding it on
``asyncio.timeout``). A loop that swallowed its cancellation runs on, and whoever awaits it at
shutdown waits for ever: it happened to the LISTEN connection's ping (a replica that never
finished stopping). ``async with asyncio.timeout(...)`` has no such window.
"""

from __future__ import annotations

import ast
from pathlib import Path

ADMISSION = Path(__file__).resolve().parents[2] / "admission"


def test_no_wait_for_in_admission() -> None:
    found = []
    for path in sorted(ADMISSION.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and node.attr == "wait_for":
                found.append(f"{path.relative_to(ADMISSION.parent)}:{node.lineno}")
    assert not found, f"use `async with asyncio.timeout(...)` instead of asyncio.wait_for: {found}"
