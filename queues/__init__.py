"""Turnstile's pure scheduling core.

Everything here is deterministic, synchronous and free of I/O: what queues, quotas and
workloads are, and every scheduling decision. ``admission`` (the running system) imports
this package; this package never imports ``admission`` or any I/O library. The rule is a
checked contract (import-linter, run by ``make test``).

Packages by concept: ``kueue`` (Kueue's objects and validation), ``podsets`` (what a job asks
for), ``cycle`` (the scheduling cycle and its collaborators), ``placement`` (nodes and topology),
``gpus`` (what the GPUs did), ``simulation`` (scenarios and engine core); the shared model
(``model``, ``quotas``, ``decisions``, ``status``, ``work``) and small utilities sit at the top.
"""
