"""The Grafana dashboard in ``manifests/grafana``: valid JSON that reads only metrics Turnstile exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
METRIC = r"(?:kueue|turnstile)_[a-z_]+"


def test_the_grafana_dashboard_reads_only_metrics_turnstile_exports() -> None:
    dashboard = json.loads((ROOT / "manifests" / "grafana" / "turnstile-dashboard.json").read_text())
    # (the families are named in the controller's metrics modules: metrics.py, workload_metrics.py, ...)
    source = "".join(p.read_text() for p in (ROOT / "admission" / "controller").rglob("*metrics.py"))
    exported = set(re.findall(rf'"({METRIC})"', source))
    used: set[str] = set()
    for panel in dashboard["panels"]:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            used |= set(re.findall(rf"\b({METRIC})", target["expr"]))
    suffixes = ("_total", "_bucket", "_count", "_sum")
    unknown = {
        m for m in used if m not in exported and not any(m.endswith(s) and m[: -len(s)] in exported for s in suffixes)
    }
    assert used and not unknown, f"the dashboard reads metrics nobody exports: {unknown}"
    titles = " ".join(p["title"] for p in dashboard["panels"])
    for subject in ("Pending", "Time to admission", "quota", "GPU-hours"):
        assert subject in titles
