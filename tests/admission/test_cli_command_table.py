"""The command table: each command loads its module only when run, and ``--help`` lists the same
summaries the commands' own help gives (issue 33: CLI start-up)."""

from __future__ import annotations

import importlib
import subprocess
import sys

import click
import pytest

from admission.cli import main
from admission.cli.command_table import COMMANDS


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_entry_names_a_command_whose_help_starts_with_its_summary(name: str) -> None:
    entry = COMMANDS[name]
    command = getattr(importlib.import_module(entry.module), entry.attribute)
    assert isinstance(command, click.Command)
    assert command.name == name
    assert command.get_short_help_str(limit=1000) == entry.summary


def test_every_command_is_reachable_through_the_group() -> None:
    ctx = click.Context(main.cli)
    names = main.cli.list_commands(ctx)
    assert set(COMMANDS) <= set(names)
    assert {"simulate", "crds", "demo"} <= set(names)
    for name in names:
        assert isinstance(main.cli.get_command(ctx, name), click.Command), name


_HEAVY = ("sqlalchemy", "pydantic", "admission.store", "admission.settings", "queues.cycle.scheduler", "rich")


@pytest.mark.parametrize("args", [["--version"], ["--help"], ["stop", "--help"]])
def test_start_up_loads_only_what_the_command_uses(args: list[str]) -> None:
    probe = (
        "import sys\n"
        "from admission.cli.main import main\n"
        f"sys.argv = ['turnstile', *{args!r}]\n"
        "try:\n"
        "    main()\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print(sorted(m for m in sys.modules if m.startswith({_HEAVY!r})))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True).stdout
    loaded = out.strip().splitlines()[-1]
    if args == ["stop", "--help"]:  # a store command loads the store, and only then
        assert "sqlalchemy" in loaded
    else:
        assert loaded == "[]", f"turnstile {' '.join(args)} loaded {loaded}"


def test_help_lists_every_command_with_its_summary() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "admission.cli.main", "--help"], check=True, capture_output=True, text=True
    )
    for name, entry in COMMANDS.items():
        line = next(line for line in result.stdout.splitlines() if line.strip().startswith(name + " "))
        shown = line.strip()[len(name) :].strip().removesuffix("...")
        assert entry.summary.startswith(shown), (name, shown)
