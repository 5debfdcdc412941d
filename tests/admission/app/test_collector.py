"""The controller process's collector (``admission.app.collector``), in a process of its own: the
settings are process-wide, and freezing this test process's objects would keep them for good."""

from __future__ import annotations

import subprocess
import sys
import textwrap

PROGRAM = textwrap.dedent(
    """
    import gc, weakref
    from admission.app import collector

    young, middle, old = gc.get_threshold()
    assert young < collector.YOUNG, gc.get_threshold()
    collector.tune()
    assert gc.get_threshold() == (collector.YOUNG, middle, old), gc.get_threshold()

    class Node:
        pass

    def cycle():
        a, b = Node(), Node()
        a.other, b.other = b, a
        return weakref.ref(a)

    before = cycle()  # garbage at the time of freezing: collected first, never frozen
    kept = Node()  # alive at the time of freezing: frozen
    frozen = collector.freeze()
    assert before() is None, "garbage from before was frozen"
    assert frozen == gc.get_freeze_count() > 1000, frozen  # (the modules, classes and functions so far)
    assert not any(o is kept for o in gc.get_objects()), "a live object was walked after the freeze"
    after = cycle()  # cyclic garbage made afterwards is still collected
    assert after() is not None
    gc.collect()
    assert after() is None, "a cycle made after the freeze was not collected"
    print("ok")
    """
)


def test_the_collector_freezes_what_lives_and_still_collects_cycles() -> None:
    done = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
