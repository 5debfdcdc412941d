"""What a pod set asks of a topology: Kueue's ``kueue.x-k8s.io/podset-*-topology`` annotations.

Read from each pod template's annotations when a job is read (``queues.podsets.jobs``), checked as Kueue's
webhook checks them (one of required, preferred and unconstrained; a slice level with its size,
the size dividing the pod count), and carried on the pod set; ``queues.placement.topology`` places by it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from queues.errors import FieldError

PREFIX = "kueue.x-k8s.io/podset-"
REQUIRED = PREFIX + "required-topology"
PREFERRED = PREFIX + "preferred-topology"
UNCONSTRAINED = PREFIX + "unconstrained-topology"
SLICE_REQUIRED = PREFIX + "slice-required-topology"
SLICE_SIZE = PREFIX + "slice-size"
ANNOTATIONS = (REQUIRED, PREFERRED, UNCONSTRAINED, SLICE_REQUIRED, SLICE_SIZE)


@dataclass(frozen=True, slots=True)
class Request:
    """What one pod set asks of a topology (``None`` on a pod set: nothing; placed by the
    default, ``queues.placement.topology.place``'s ``implicit``, on a TAS flavor)."""

    mode: str  # required | preferred | unconstrained | implicit (only a slice asked for)
    level: str | None = None  # the node label of the level (required, preferred)
    slice_level: str | None = None
    slice_size: int = 1


def request_of(annotations: Mapping[str, str], count: int, where: str) -> tuple[Request | None, list[FieldError]]:
    """A pod set's topology request from its template's annotations, and what is wrong with them
    (at field paths under ``where``, the pod template's path)."""
    problems: list[FieldError] = []
    path = f"{where}.metadata.annotations"
    given = [a for a in (REQUIRED, PREFERRED) if annotations.get(a)]
    unconstrained = annotations.get(UNCONSTRAINED)
    if unconstrained is not None and unconstrained not in ("true", "false"):
        problems.append(FieldError(f"{path}[{UNCONSTRAINED}]", f'must be "true" or "false", not {unconstrained!r}'))
    if unconstrained == "true":
        given.append(UNCONSTRAINED)
    if len(given) > 1:
        problems.append(FieldError(path, f"{' and '.join(given)} exclude each other; keep one"))
    slice_level = annotations.get(SLICE_REQUIRED) or None
    raw_size = annotations.get(SLICE_SIZE)
    size = 1
    if raw_size is not None:
        if not raw_size.isdigit() or int(raw_size) < 1:
            problems.append(
                FieldError(f"{path}[{SLICE_SIZE}]", f"must be a whole number of pods >= 1, not {raw_size!r}")
            )
        elif slice_level is None:
            problems.append(
                FieldError(f"{path}[{SLICE_SIZE}]", f"needs {SLICE_REQUIRED} (the level each slice stays within)")
            )
        else:
            size = int(raw_size)
            if count % size:
                problems.append(
                    FieldError(f"{path}[{SLICE_SIZE}]", f"{size} does not divide the pod set's {count} pods")
                )
    elif slice_level is not None:
        problems.append(FieldError(f"{path}[{SLICE_REQUIRED}]", f"needs {SLICE_SIZE} (the pods in each slice)"))
    if problems:
        return None, problems
    if not given:
        return (Request("implicit", None, slice_level, size) if slice_level else None), []
    if given[0] == UNCONSTRAINED:
        return Request("unconstrained", None, slice_level, size), []
    mode = "required" if given[0] == REQUIRED else "preferred"
    return Request(mode, annotations[given[0]], slice_level, size), []
