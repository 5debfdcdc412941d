"""Kubernetes resource quantities as exact integers.

Every quantity in Turnstile is an ``int`` of milli-units (``"1"`` -> 1000, ``"500m"`` ->
500, ``"1Gi"`` -> 1073741824000). Quota arithmetic never uses floats (design principle 5).
Parsing follows ``k8s.io/apimachinery/pkg/api/resource``: decimal suffixes (n u m k M G T P
E), binary suffixes (Ki .. Ei) and decimal exponents (``1e3``); fractions below one milli are
rounded up, as ``Quantity.MilliValue`` does. Values beyond what Kubernetes can store
(2^63-1 in base units) are refused rather than silently clamped. Durations (Go's ``5m``,
``1h30m``) are read here too, for every configuration block that takes one.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

from queues.errors import FieldError

MILLI = 1000
MAX_BASE_VALUE = 2**63 - 1

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL_EXP = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_PATTERN = re.compile(r"^([+-]?)(\d+\.?\d*|\.\d+)((?:[eE][+-]?\d+)|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]?)$")


class QuantityError(ValueError):
    """A string that is not a valid Kubernetes quantity, with a message saying why."""


def parse_milli(value: str | int | float) -> int:
    """Parse a quantity (``"8"``, ``"64Gi"``, ``"250m"``, ``4``) into milli-units."""
    if isinstance(value, bool):
        raise QuantityError(f"must be a quantity such as 8, 500m or 64Gi, not {value!r}")
    if isinstance(value, int):
        text = str(value)
    elif isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise QuantityError(f"must be a finite quantity, not {value!r}")
        text = repr(value)
    elif isinstance(value, str):
        text = value.strip()
    else:
        raise QuantityError(f"must be a quantity such as 8, 500m or 64Gi, not {type(value).__name__}")
    match = _PATTERN.match(text)
    if not match:
        raise QuantityError(f"{text!r} is not a quantity; use a number with an optional suffix such as 500m, 8, 64Gi")
    sign, digits, suffix = match.groups()
    try:
        number = Decimal(digits)
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only digits
        raise QuantityError(f"{text!r} is not a number") from exc
    if suffix in _BINARY:
        base = number * _BINARY[suffix]
    elif suffix and suffix[0] in "eE":
        exponent = int(suffix[1:])
        if exponent > 30:
            raise QuantityError(f"{text!r} is too large (the most Kubernetes stores is {MAX_BASE_VALUE})")
        base = number.scaleb(exponent)
    else:
        base = number.scaleb(_DECIMAL_EXP[suffix])
    if base > MAX_BASE_VALUE:
        raise QuantityError(f"{text!r} is too large (the most Kubernetes stores is {MAX_BASE_VALUE})")
    milli_exact = base * MILLI
    milli = int(milli_exact)
    if milli_exact != milli:
        milli += 1  # round up, as Quantity.MilliValue does
    return -milli if sign == "-" else milli


def format_milli(milli: int) -> str:
    """Render milli-units as a canonical, human-friendly quantity (``64Gi``, ``500m``, ``8``)."""
    if milli < 0:
        return "-" + format_milli(-milli)
    if milli % MILLI:
        return f"{milli}m"
    value = milli // MILLI
    if value >= 1024:
        for suffix, factor in reversed(_BINARY.items()):
            if value % factor == 0:
                return f"{value // factor}{suffix}"
    if value >= 10**3:
        for suffix, exp in (("E", 18), ("P", 15), ("T", 12), ("G", 9), ("M", 6), ("k", 3)):
            if value % 10**exp == 0:
                return f"{value // 10**exp}{suffix}"
    return str(value)


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration(value: Any, path: str, problems: list[FieldError]) -> float:
    """A Go duration (``5m``, ``1h30m``, ``90s``) or a number of seconds, > 0."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str) and value and _DURATION.sub("", value) == "":
        seconds = sum(float(n) * _UNITS[u] for n, u in _DURATION.findall(value))
    else:
        problems.append(FieldError(path, f"must be a duration such as 5m, 1h or 90s, not {value!r}"))
        return 0.0
    if seconds <= 0:
        problems.append(
            FieldError(path, f"must be longer than 0, not {value!r}: a workload would be evicted as it starts")
        )
    return seconds
