"""A real Prometheus for tests (Debian's ``prometheus`` package), on loopback, scraping targets.

Tests that read metrics through Prometheus use it rather than a fake: the query language, the
scrape (relabelling ``pod`` to ``exported_pod`` where ``honor_labels`` is off, as a
ServiceMonitor's scrape does) and the HTTP API are the real ones; the starter is the one
``turnstile sim up`` uses (``admission.sim.prometheus``). Skipped with a clear message only where
the binary is absent (``.ci/run`` installs it).
"""

from __future__ import annotations

import pytest

from admission.sim.prometheus import binary, running

__all__ = ["needs_prometheus", "running"]

needs_prometheus = pytest.mark.skipif(
    binary() is None, reason="prometheus is not on PATH (apt-get install prometheus; .ci/run installs it)"
)
