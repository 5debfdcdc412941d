"""The aggregated API's OpenAPI (``admission.aggregated.openapi``): served where the aggregator looks,
every reference resolvable, every kind tagged with its group, version and kind."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
from aiohttp import web

from admission.aggregated import openapi


def _refs(doc: Any) -> list[str]:
    if isinstance(doc, dict):
        return [v for k, v in doc.items() if k == "$ref"] + [r for v in doc.values() for r in _refs(v)]
    if isinstance(doc, list):
        return [r for v in doc for r in _refs(v)]
    return []


@pytest.mark.parametrize("gv", openapi.GROUP_VERSIONS)
async def test_v3_index_names_each_group_version_and_its_document_describes_its_kinds(gv: str) -> None:
    app = web.Application()
    openapi.routes(app)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    base = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{base}/openapi/v3") as answer:
                index = await answer.json()
            url = index["paths"][f"apis/{gv}"]["serverRelativeURL"]
            assert url.startswith(f"/openapi/v3/apis/{gv}?hash=")
            async with http.get(base + url) as answer:
                assert answer.status == 200
                doc = await answer.json()
            async with http.get(f"{base}/openapi/v2") as answer:
                swagger = await answer.json()
            async with http.get(f"{base}/openapi/v3/apis/example.com/v1") as answer:
                assert answer.status == 404
    finally:
        await runner.cleanup()
    assert doc["openapi"].startswith("3.") and doc["paths"]
    schemas = doc["components"]["schemas"]
    group = gv.rpartition("/")[0]
    kinds = {k["kind"] for s in schemas.values() for k in s["x-kubernetes-group-version-kind"]}
    assert kinds == ({"Workload", "WorkloadList"} if group == "turnstile.dev" else {"PendingWorkloadsSummary"})
    assert all(r.removeprefix("#/components/schemas/") in schemas for r in _refs(doc)), _refs(doc)
    assert swagger["swagger"] == "2.0"
    assert all(r.removeprefix("#/definitions/") in swagger["definitions"] for r in _refs(swagger))
