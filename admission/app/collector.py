"""The controller process's cyclic garbage collector, set for a long-lived server.

Why: CPython's defaults cost the controller about a fifth of its CPU per admission (``bench
controller``'s large scale, by hand, 2026-12-07: 1.0-1.6 s of full collections for 5,000
admissions). Two things made its full collections many and long:

- **What it walked.** Of the ~400,000 objects the collector tracks in a controller with 10,000
  pending workloads, ~310,000 are there once it is ready: modules, classes, kubernetes_asyncio's
  models, SQLAlchemy's and pydantic's schemas. Every full collection walked them all again
  (100-200 ms each). Once the replica is ready they are frozen (``gc.freeze``): never walked
  again. They live as long as the process anyway; one that dies later is still freed by
  reference counting, and one in a reference cycle is kept for good: at most what was alive at
  that one moment.
- **How often.** A step or a projection pass keeps a batch alive across many allocations (500
  workload rows of ~60 dicts and lists each). With the default young generation of 700
  allocations such a batch outlived two young collections and was promoted to the oldest
  generation, and every 25% of promotions there triggered a full collection. With a young
  generation of ``YOUNG`` allocations a batch dies young.

Nothing else changes: objects are freed by reference counting as they were; only cyclic garbage
waits longer, at most one young generation. Only the processes that are the command's alone set
it: ``turnstile controller`` (above) and ``turnstile simulate`` (its scenario frozen once read, a
young generation of 100,000 in engine core's run: ``admission.cli.main``); tests keep CPython's
defaults.
"""

from __future__ import annotations

import gc

YOUNG = 50_000  # allocations between young collections (CPython's default: 700)


def tune(young: int = YOUNG, middle: int | None = None, old: int | None = None) -> None:
    """The young generation sized for a batch (the controller's at its start: the first informer
    lists are one); ``middle`` and ``old`` as they were unless given."""
    _, was_middle, was_old = gc.get_threshold()
    gc.set_threshold(young, was_middle if middle is None else middle, was_old if old is None else old)


def freeze(*, collect: bool = True) -> int:
    """What is alive now (a ready replica's code and schemas; a read scenario) is never walked again.
    With ``collect``, the garbage so far is collected first, so none of it is kept for good (a
    command that paused the collector while it read knows there is little). Returns how many
    objects are frozen."""
    if collect:
        gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
