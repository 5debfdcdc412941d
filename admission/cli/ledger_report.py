"""What the ledger's reports share: ``--by`` and ``--fraction`` read the same way, a group's title,
and a plain aligned table.

Why one place: ``turnstile usage`` (and its ``--plot``) and ``turnstile rightsize`` group the
same ledger by the same ``--by`` (``namespace``, ``clusterqueue``, ``label:KEY``) and count GPUs
in whole cards with the same overrides (``TURNSTILE_GPU_FRACTIONS``, ``--fraction``); a user who
learns one command's options and errors knows the other's.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Sequence
from fractions import Fraction

import click

from admission.cli.admin import _settings
from admission.store import usage as ledger
from queues.gpus import gpu_units


def grouping(by: str) -> str:
    """``--by`` checked and normalised; a usage error naming the fix."""
    try:
        return ledger.parse_by(by)
    except ValueError as exc:
        raise click.BadParameter(str(exc).removeprefix(f"--by {by!r}: "), param_hint="--by") from exc


def card_fractions(values: Iterable[str]) -> dict[str, Fraction]:
    """GPU resources' parts of a card: ``TURNSTILE_GPU_FRACTIONS``, then ``--fraction`` over it."""
    try:
        return {**_settings().card_fractions, **gpu_units.parse_fractions(values)}
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--fraction") from exc


def group_title(by: str) -> str:
    """A grouping's column title: NAMESPACE, CLUSTERQUEUE, or the label's key (TEAM)."""
    return "NAMESPACE" if by == "namespace" else "CLUSTERQUEUE" if by == "clusterqueue" else by[6:].upper()


def print_table(table: Sequence[Sequence[str]], *, numeric: Container[int]) -> None:
    """Rows of cells, columns aligned (the ``numeric`` ones to the right), two spaces apart."""
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        cells = [c.rjust(w) if i in numeric else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        click.echo("  ".join(cells).rstrip())
