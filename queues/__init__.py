"""Turnstile's pure scheduling core.

Everything here is deterministic, synchronous and free of I/O: what queues, quotas and
workloads are, and every scheduling decision. ``admission`` (the running system) imports
this package; this package never imports ``admission`` or any I/O library. The rule is a
checked contract (import-linter, run by ``make test``).
"""
