"""Which module serves each ``turnstile`` command, so a command loads only what it uses.

Importing every command's module up front cost ``turnstile --version`` a second of CPU: the store
commands pull in SQLAlchemy, the settings' pydantic models and the CLI's views. The group below
(click's documented lazy-loading pattern) imports a command's module when that command is run.
Its one-line summary for ``turnstile --help`` is written here, beside the module that serves it,
so listing the commands imports nothing; ``tests/admission/cli/test_command_table.py`` holds each
summary equal to the first sentence of the command's own help, so the two cannot drift apart.
"""

from __future__ import annotations

import importlib
from typing import NamedTuple

import click


class Entry(NamedTuple):
    module: str
    attribute: str
    summary: str  # the command's short help, as click would take it from its docstring


ADMIN = "admission.cli.admin"
EDITS = "admission.cli.edits"

COMMANDS: dict[str, Entry] = {
    "apply": Entry(
        ADMIN, "apply_cmd", "Create or replace Kueue objects (v1beta1 or v1beta2 YAML); all or nothing, audited."
    ),
    "budget": Entry(
        "admission.cli.budget",
        "budget",
        "GPU-hour budgets per ClusterQueue or team label, per period (audited).",
    ),
    "controller": Entry(
        "admission.cli.running",
        "controller_cmd",
        "The in-cluster process: scheduler (leader only), reconcilers, webhook, metrics.",
    ),
    "convert": Entry(
        ADMIN,
        "convert_cmd",
        "Print Kueue objects (v1beta1 or v1beta2 YAML) as validated v1beta2, for kubectl apply -f -.",
    ),
    "db": Entry(ADMIN, "db", "Database maintenance."),
    "delete": Entry(
        ADMIN, "delete_cmd", "Delete an object; a ClusterQueue is refused while admitted workloads use it."
    ),
    "describe": Entry(
        ADMIN,
        "describe_cmd",
        "Show one object in detail: quotas and usage, state, queue position, why it waits, history.",
    ),
    "get": Entry(ADMIN, "get_cmd", "List objects of KIND (cq, lq, rf, cohorts, wpc, wl), or show one by NAME."),
    "history": Entry(
        EDITS, "history_cmd", "The audit log of admin edits: when, who, and what changed (before -> after)."
    ),
    "quota": Entry(EDITS, "quota", "Quick quota edits."),
    "resume": Entry(
        EDITS,
        "resume_cmd",
        "Resume admitting from a stopped ClusterQueue or LocalQueue, or let a stopped workload "
        "(NAMESPACE/NAME) queue again.",
    ),
    "rightsize": Entry(
        "admission.cli.rightsize",
        "rightsize_cmd",
        "Workloads (and groups) whose measured GPU memory and utilisation fit a smaller MIG slice or GPU the "
        "install offers, with the GPU-hours that would have been saved.",
    ),
    "sim": Entry("admission.cli.sim", "sim", "The simulated Kubernetes cluster."),
    "stop": Entry(
        EDITS,
        "stop_cmd",
        "Stop admitting from a ClusterQueue or LocalQueue (stopPolicy Hold, or HoldAndDrain), or stop one "
        "workload (NAMESPACE/NAME: Kueue's spec.active false; it releases its quota and waits).",
    ),
    "usage": Entry(
        "admission.cli.usage",
        "usage_cmd",
        "Resource-hours from the usage ledger (GPU-hours first), with cost where priced.",
    ),
}


class LazyGroup(click.Group):
    """A click group whose commands in ``COMMANDS`` are imported when first asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None or cmd_name in self.commands:
            return super().get_command(ctx, cmd_name)
        command = getattr(importlib.import_module(entry.module), entry.attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{entry.module}.{entry.attribute} is not a click command")
        self.add_command(command, cmd_name)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands and their summaries, as click lists them, without importing any module."""
        limit = formatter.width - 6 - max(len(name) for name in self.list_commands(ctx))
        rows = []
        for name in self.list_commands(ctx):
            own = self.commands.get(name)
            if own is not None and name not in COMMANDS:
                if own.hidden:
                    continue
                rows.append((name, own.get_short_help_str(limit)))
            else:
                rows.append((name, click.Command(name, help=COMMANDS[name].summary).get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)
