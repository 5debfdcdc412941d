"""The Prometheus text format, written directly: what ``/metrics``' per-queue families are made of
(``Exposition``), and the counters and histograms per queue that the leader counts (``Counter``,
``Histograms``).

Why not prometheus_client's collectors for these: its generic rendering costs ~8 µs a sample, and
1,000 ClusterQueues make ~25,000 samples; ``/metrics`` must answer in under 100 ms
(``admission.controller.monitoring.metrics``, ``admission.controller.monitoring.cohort_metrics``).
"""

from __future__ import annotations

import bisect


def escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def number(value: float) -> str:
    return "+Inf" if value == float("inf") else repr(float(value))


class Exposition:
    """Prometheus text format written directly, for the per-queue families. prometheus_client's
    generic rendering costs ~8 µs a sample, and 1,000 ClusterQueues make ~25,000 samples."""

    def __init__(self, role: str = "") -> None:
        """``role``: Kueue's ``replica_role`` (leader, follower, standalone), put on every ``kueue_``
        sample written here (Kueue's label on each of its families but ``build_info``), once for
        all the writers; "" for none."""
        self.lines: list[str] = []
        self.role = role
        self.suffix = f',replica_role="{role}"' if role else ""

    def family(self, name: str, kind: str, help_text: str) -> None:
        self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} {kind}")

    def sample(self, name: str, labels: str, value: float) -> None:
        if self.suffix and name.startswith("kueue_"):
            labels = labels + self.suffix if labels else self.suffix[1:]
        self.lines.append(f"{name}{{{labels}}} {number(value)}")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n" if self.lines else ""


def _labels(names: tuple[str, ...], values: tuple[str, ...]) -> str:
    return ",".join(f'{n}="{escape(v)}"' for n, v in zip(names, values, strict=True))


class Counter:
    """A counter per label values (``NAME_total{labels}``), written only once counted."""

    def __init__(self, name: str, help_text: str, labels: tuple[str, ...]) -> None:
        self.name, self.help_text, self.labels = name, help_text, labels
        self.values: dict[tuple[str, ...], int] = {}

    def inc(self, *values: str) -> None:
        self.values[values] = self.values.get(values, 0) + 1

    def write(self, out: Exposition) -> None:
        if self.values:
            out.family(f"{self.name}_total", "counter", self.help_text)
            for values, n in sorted(self.values.items()):
                out.sample(f"{self.name}_total", _labels(self.labels, values), n)


class Histograms:
    """A histogram per label values (``NAME_bucket``, ``_count``, ``_sum``)."""

    def __init__(self, name: str, help_text: str, labels: tuple[str, ...], buckets: tuple[float, ...]) -> None:
        self.name, self.help_text, self.labels = name, help_text, labels
        self.bounds = [b for b in buckets if b != float("inf")]
        self.les = [number(b) for b in self.bounds] + ["+Inf"]
        self.series: dict[tuple[str, ...], tuple[list[int], list[float]]] = {}  # (counts per bucket, [sum])

    def observe(self, seconds: float, *values: str) -> None:
        counts, total = self.series.setdefault(values, ([0] * (len(self.bounds) + 1), [0.0]))
        counts[bisect.bisect_left(self.bounds, seconds)] += 1
        total[0] += seconds

    def write(self, out: Exposition) -> None:
        out.family(self.name, "histogram", self.help_text)
        for values, (counts, total) in sorted(self.series.items()):
            label = _labels(self.labels, values)
            if out.suffix and self.name.startswith("kueue_"):
                label += out.suffix
            cumulative = 0
            for le, n in zip(self.les, counts, strict=True):
                cumulative += n
                out.lines.append(f'{self.name}_bucket{{{label},le="{le}"}} {float(cumulative)!r}')
            out.lines.append(f"{self.name}_count{{{label}}} {number(cumulative)}")
            out.lines.append(f"{self.name}_sum{{{label}}} {number(total[0])}")
