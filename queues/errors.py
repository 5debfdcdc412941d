"""Field-path errors: how the core reports bad input.

Validation collects every problem it finds, each with the path of the offending field
(``spec.resourceGroups[0].flavors[1].resources[0].nominalQuota``), so a user can fix a file
in one pass. ``Invalid`` carries the whole list; there is no other exception for bad input.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FieldError:
    """One problem: where it is (``path``) and what is wrong with it (``message``)."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message

    def under(self, prefix: str) -> FieldError:
        """The same error seen from an enclosing document (``jobs[3].object`` + ``spec``)."""
        if not prefix:
            return self
        if not self.path:
            return FieldError(prefix, self.message)
        joiner = "" if self.path.startswith("[") else "."
        return FieldError(f"{prefix}{joiner}{self.path}", self.message)


class Invalid(Exception):
    """Input that cannot be accepted, with every problem found. A permanent error."""

    def __init__(self, errors: Iterable[FieldError], *, subject: str = "") -> None:
        self.errors: tuple[FieldError, ...] = tuple(errors)
        self.subject = subject
        super().__init__(self.render())

    def render(self) -> str:
        prefix = f"{self.subject}: " if self.subject else ""
        return "\n".join(f"{prefix}{e}" for e in self.errors)


def join_path(base: str, *parts: str | int) -> str:
    """``join_path("spec", "flavors", 1, "name")`` -> ``spec.flavors[1].name``."""
    out = base
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out = f"{out}.{part}" if out else part
    return out


def loc_to_path(loc: Sequence[str | int], base: str = "") -> str:
    """A pydantic error location as a field path."""
    return join_path(base, *loc)
