"""What one command may spend: wall time and memory, ended with a clear refusal when it is passed.

Input is bounded in bytes and shape before it is read (``yaml_builder.Limits``, named per kind
of input in ``documents``: the bytes of a file, the documents in it, the items of a list, nesting,
aliases). Input under those caps can still ask
for minutes and gigabytes: tens of thousands of queue objects, a scenario of a hundred thousand
jobs. So ``apply`` and ``simulate`` run under ``bounded``: a watchdog thread that, once the command
has run longer than its ``--max-seconds`` or holds more memory than its ``--max-memory``, says
which bound was passed and what to do instead, and ends the process with status 1 (the operation
was refused). Ending the process closes its database connection, so an open transaction rolls
back: nothing is half-applied.

The watchdog reads the process's resident memory from ``/proc/self/statm`` every quarter second
(elsewhere, the peak from ``getrusage``), so a burst shorter than that may pass unseen; the bound
is a guard against runaway input, not an accounting of every byte.
"""

from __future__ import annotations

import contextlib
import os
import resource
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import click

GIB = 1024**3
LOOK_EVERY = 0.25  # seconds between the watchdog's looks


@dataclass(frozen=True, slots=True)
class Bounds:
    seconds: float
    memory: int  # bytes of resident memory

    def describe(self) -> str:
        return f"{self.seconds:g} s and {self.memory / GIB:g} GiB"


def options(*, seconds: float, memory_gib: float) -> Callable[[Callable[..., object]], Callable[..., object]]:
    """``--max-seconds`` and ``--max-memory`` for a command, with its defaults."""

    def wrap(command: Callable[..., object]) -> Callable[..., object]:
        command = click.option(
            "--max-memory",
            type=click.FloatRange(min=0, min_open=True),
            default=memory_gib,
            show_default=True,
            help="GiB of memory the command may hold; past it, it stops and says so (nothing is applied).",
        )(command)
        return click.option(
            "--max-seconds",
            type=click.FloatRange(min=0, min_open=True),
            default=seconds,
            show_default=True,
            help="Seconds the command may run; past them, it stops and says so (nothing is applied).",
        )(command)

    return wrap


def resident() -> int:
    """This process's resident memory in bytes."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # (the peak, in KiB on Linux)


def _refuse(line: str) -> None:
    sys.stderr.write(f"error: {line}\n")
    sys.stderr.flush()
    os._exit(1)  # (from the watchdog thread: the main thread may be deep in a computation)


@contextlib.contextmanager
def bounded(what: str, bounds: Bounds, *, hint: str) -> Iterator[None]:
    """Run the block under ``bounds``; ``what`` names the work, ``hint`` what to do when it is too much."""
    done = threading.Event()
    started = time.monotonic()

    def watch() -> None:
        while not done.wait(LOOK_EVERY):
            held = resident()
            if held > bounds.memory:
                _refuse(
                    f"{what}: stopped: it needed more than {bounds.memory / GIB:g} GiB of memory (--max-memory; "
                    f"{held / GIB:.2f} GiB held); {hint}"
                )
            if time.monotonic() - started > bounds.seconds:
                _refuse(f"{what}: stopped after {bounds.seconds:g} s (--max-seconds); {hint}")

    watchdog = threading.Thread(target=watch, name="bounds", daemon=True)
    watchdog.start()
    try:
        yield
    finally:
        done.set()
