"""``--log-format json``: one JSON object per line, decision lines carrying workload and queue fields."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

from admission.logs import JsonFormatter
from tests.admission.controller.world import CONFIG, eventually, job, world
from tests.admission.runner import turnstile


async def test_decision_lines_carry_workload_and_queue_fields(tmp_path: Path, migrated_url: str) -> None:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("admission.controller.report")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        async with world(tmp_path, migrated_url) as w:
            await w.apply(CONFIG)
            w.start_controller("replica-1")
            await w.create(job("train", gpus=4))

            def admitted() -> dict[str, object] | None:
                lines = [json.loads(line) for line in out.getvalue().splitlines()]
                return next((x for x in lines if x.get("decision") == "Admitted"), None)

            line = await eventually(admitted, what="an admission log line")
    finally:
        logger.removeHandler(handler)
    assert line["workload"] == "ml/train" and line["cluster_queue"] == "team-a" and line["local_queue"] == "team-a"
    assert line["namespace"] == "ml" and line["level"] == "info" and "admitted ml/train" in str(line["message"])
    assert line["flavors"] == {"main": {"nvidia.com/gpu": "a100"}}


def test_the_commands_offer_the_json_format() -> None:
    for command in (["controller"], ["sim", "up"]):
        done = turnstile(*command, "--help")
        assert done.returncode == 0 and "--log-format [text|json]" in done.stdout
