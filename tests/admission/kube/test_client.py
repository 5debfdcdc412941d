"""The API client's HTTP session: it looks for environment proxies and ``~/.netrc`` only where the
environment has something to find (each look is a worker-thread hop per request)."""

from __future__ import annotations

from pathlib import Path

import pytest

from admission.kube import client as kube_client
from admission.kube.client import NAMESPACES, Kube
from admission.sim.host import SimHost


async def test_the_session_trusts_the_environment_only_where_it_names_a_proxy_or_a_netrc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = await SimHost.start(tmp_path / "kubeconfig")
    try:
        for name in kube_client.PROXY_VARIABLES:
            monkeypatch.delenv(name, raising=False)
            monkeypatch.delenv(name.upper(), raising=False)
        monkeypatch.setenv("HOME", str(tmp_path))  # (no ~/.netrc)
        kube = Kube(await kube_client.connect(host.kubeconfig))
        assert kube.api.rest_client.pool_manager.trust_env is False
        assert "items" in await kube.request("GET", NAMESPACES.path())  # (and it still talks)
        await kube.close()

        monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
        kube = Kube(await kube_client.connect(host.kubeconfig))
        assert kube.api.rest_client.pool_manager.trust_env is True
        await kube.close()

        monkeypatch.delenv("HTTPS_PROXY")
        (tmp_path / ".netrc").write_text("machine example.org login a password b\n")
        kube = Kube(await kube_client.connect(host.kubeconfig))
        assert kube.api.rest_client.pool_manager.trust_env is True
        await kube.close()
    finally:
        await host.stop()
