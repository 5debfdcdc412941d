"""What ``turnstile describe`` computes beside its SQL: numbers that agree with the cohort."""

from __future__ import annotations

import io

from admission import views
from tests.queues.builders import CQ, GPU, flavor, scheduler


def test_may_borrow_is_what_the_cohort_can_lend_never_unlimited() -> None:
    sched = scheduler(
        flavor("a100"),
        CQ("a").cohort("c").group(("a100", {"gpu": 8})),
        CQ("b").cohort("c").group(("a100", {"gpu": 16})),
        CQ("capped").cohort("c").group(("a100", {"gpu": (2, {"borrowingLimit": "4"})})),
    )
    queues = sched.snapshot.queues
    # a has no borrowing limit: it may borrow what the others lend (16 + 2), not "unlimited"
    assert views._may_borrow(queues["a"], ("a100", GPU), 8000) == "18"
    assert views._may_borrow(queues["capped"], ("a100", GPU), 2000) == "4"
    assert views._may_borrow(None, ("a100", GPU), 0) == "-"


def test_describe_prints_names_and_messages_as_text_in_whole_lines() -> None:
    """A message with brackets is printed as it is (not read as rich markup), and a long list of
    workloads ahead stays on one line (wrapped after a comma, it read as cut)."""
    out = io.StringIO()
    console = views.text_console(out)
    ahead = ", ".join(f"team-research/pytorch-finetune-llama-{i}" for i in range(5))
    console.print(f"Ahead:         7 in ClusterQueue cq: {ahead} (and 2 more)")
    console.print("Waiting:       NoMatchingFlavor: pod set [main] asks for [bold]x[/bold]")
    lines = out.getvalue().splitlines()
    assert lines[0].endswith("llama-4 (and 2 more)") and len(lines) == 2, lines
    assert lines[1].endswith("pod set [main] asks for [bold]x[/bold]"), lines
