"""The controller process's cyclic garbage collector, set for a long-lived server.

Why: CPython's defaults cost the controller about a fifth of its CPU per admission (``bench
controller``'s large scale, by hand, 2026-12-07: 1.0-1.4 s of full collections for 5,000
admissions). Two things made its full collections many and long:

- **What it walked.** Of the ~400,000 objects the collector tracks in a controller with 10,000
  pending workloads, ~310,000 are there once it is ready: modules, classes, kubernetes_asyncio's
  models, SQLAlchemy's and pydantic's schemas. Every full collection walked them all again
  (100-200 ms each). Once the replica is ready they are frozen (``gc.freeze``): never walked
  again, never freed (they live as long as the process anyway).
- **How often.** A step or a projection pass keeps a batch alive across many allocations (500
  workload rows of ~60 dicts and lists each). With the default young generation of 700
  allocations such a batch outlived two young collections and was promoted to the oldest
  generation, and every 25% of promotions there triggered a full collection. With a young
  generation of ``YOUNG`` allocations a batch dies young.

Nothing else changes: objects are freed by reference counting as they were; only cyclic garbage
waits longer, at most one young generation. Only ``turnstile controller`` does this (the process
is the controller's alone); tests and the simulator keep CPython's defaults.
"""

from __future__ import annotations

import gc

YOUNG = 50_000  # allocations between young collections (CPython's default: 700)


def tune() -> None:
    """The young generation sized for a batch (at process start: the first informer lists are one)."""
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG, middle, old)


def freeze() -> int:
    """What is alive now (the replica ready: its code and schemas) is never walked again; the garbage
    so far is collected first, so none of it is frozen. Returns how many objects were frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
