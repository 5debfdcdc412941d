"""Kueue's ``fairSharing`` configuration block: what it may say and what it means.

The block comes from a scenario's top-level ``fairSharing:``, the controller's
``TURNSTILE_FAIR_SHARING`` setting or the database copy the controller keeps of it; the order it
gives a cycle is ``queues.cycle.fairsharing``, its preemption strategies
``queues.cycle.fair_preemption``. It sits beside Kueue's API because it is configuration, read
by the layers below the cycle as well as by the cycle.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from queues import errors
from queues.errors import FieldError
from queues.quantity import duration

LESS_THAN_OR_EQUAL_TO_FINAL_SHARE = "LessThanOrEqualToFinalShare"
LESS_THAN_INITIAL_SHARE = "LessThanInitialShare"
DEFAULT_STRATEGIES = (LESS_THAN_OR_EQUAL_TO_FINAL_SHARE, LESS_THAN_INITIAL_SHARE)
# what Kueue's validation allows: one strategy, or the final-share one followed by the initial-share one
_ALLOWED = {(LESS_THAN_OR_EQUAL_TO_FINAL_SHARE,), (LESS_THAN_INITIAL_SHARE,), DEFAULT_STRATEGIES}


@dataclass(frozen=True, slots=True)
class FairSharing:
    """Kueue's ``fairSharing`` configuration."""

    enable: bool = True
    preemption_strategies: tuple[str, ...] = DEFAULT_STRATEGIES
    # Turnstile's usage-aware option (Kueue has none): order by decayed usage, this half-life (s); 0: off
    usage_half_life: float = 0.0


def parse(raw: Any, path: str = "fairSharing") -> FairSharing | None:
    """A ``fairSharing`` block (``{enable, preemptionStrategies}``; the block's presence enables it
    unless ``enable: false``); None when absent or disabled. ``errors.Invalid`` names each field."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise errors.Invalid([FieldError(path, "must be a mapping: {enable: true, preemptionStrategies: [...]}")])
    problems = [
        FieldError(f"{path}.{k}", "unknown field (known: enable, preemptionStrategies, usageHalfLifeTime)")
        for k in raw
        if k not in ("enable", "preemptionStrategies", "usageHalfLifeTime")
    ]
    half_life = 0.0
    if "usageHalfLifeTime" in raw:
        half_life = duration(raw["usageHalfLifeTime"], f"{path}.usageHalfLifeTime", problems)
    enable = raw.get("enable", True)
    if not isinstance(enable, bool):
        problems.append(FieldError(f"{path}.enable", "must be true or false"))
    strategies = raw.get("preemptionStrategies", list(DEFAULT_STRATEGIES))
    if not isinstance(strategies, list) or tuple(strategies) not in _ALLOWED:
        problems.append(
            FieldError(
                f"{path}.preemptionStrategies",
                f"must be [{LESS_THAN_OR_EQUAL_TO_FINAL_SHARE}], [{LESS_THAN_INITIAL_SHARE}] or "
                f"[{LESS_THAN_OR_EQUAL_TO_FINAL_SHARE}, {LESS_THAN_INITIAL_SHARE}] (Kueue's choices), "
                f"not {strategies!r}",
            )
        )
    if problems:
        raise errors.Invalid(problems)
    return FairSharing(True, tuple(strategies), half_life) if enable else None


def block(fair: FairSharing) -> dict[str, Any]:
    """``fair`` as the block ``parse`` reads (times in seconds)."""
    out: dict[str, Any] = {"preemptionStrategies": list(fair.preemption_strategies)}
    if fair.usage_half_life:
        out["usageHalfLifeTime"] = fair.usage_half_life
    return out
