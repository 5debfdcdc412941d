"""Settings from the environment (spec/cli.md)."""

import os
from pathlib import Path

import pytest

from admission.settings import Settings, normalise_database_url
from tests.admission.runner import turnstile


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("postgresql://postgres@127.0.0.1:5432/test", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"),
        ("postgres://u:p@db/x", "postgresql+asyncpg://u:p@db/x"),
        ("postgresql+asyncpg://u@h/d", "postgresql+asyncpg://u@h/d"),
    ],
    ids=["postgresql", "postgres", "already-asyncpg"],
)
def test_database_urls_are_normalised(given: str, expected: str) -> None:
    assert normalise_database_url(given) == expected


def test_other_urls_are_refused() -> None:
    with pytest.raises(ValueError, match="not a PostgreSQL URL"):
        normalise_database_url("mysql://root@localhost/db")


def test_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TURNSTILE_DATABASE_URL", "postgresql://u@h/d")
    monkeypatch.setenv("TURNSTILE_HOME", str(tmp_path))
    settings = Settings()
    assert settings.database_url == "postgresql+asyncpg://u@h/d"
    assert settings.home == tmp_path
    monkeypatch.delenv("TURNSTILE_DATABASE_URL")
    monkeypatch.delenv("TURNSTILE_HOME")
    defaults = Settings()
    assert defaults.database_url is None  # the embedded PostgreSQL
    assert defaults.home == Path("~/.local/share/turnstile").expanduser()


def test_ledger_labels_are_label_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().ledger_label_keys == ("team", "project")
    monkeypatch.setenv("TURNSTILE_LEDGER_LABELS", " team , example.com/cost-center ")
    assert Settings().ledger_label_keys == ("team", "example.com/cost-center")
    monkeypatch.setenv("TURNSTILE_LEDGER_LABELS", "team,bad label")
    with pytest.raises(ValueError, match="not label keys: bad label"):
        Settings()


def test_a_bad_setting_is_one_line_and_exit_2(tmp_path: Path) -> None:
    env = {**os.environ, "TURNSTILE_HOME": str(tmp_path), "TURNSTILE_DATABASE_URL": "mysql://root@localhost/db"}
    done = turnstile("get", "cq", env=env)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip() == (
        "error: TURNSTILE_DATABASE_URL: 'mysql://root@localhost/db' is not a PostgreSQL URL; "
        "write postgresql://user@host:5432/dbname (optionally ?sslmode=require&connect_timeout=10)"
    )


def test_wait_for_pods_ready_is_kueues_block_and_a_bad_one_names_the_field(tmp_path: Path) -> None:
    from admission.policy import Policy

    ready = Settings(wait_for_pods_ready="{timeout: 10m, requeuingStrategy: {backoffLimitCount: 3}}")
    policy = Policy.from_settings(ready, lambda _ns: None).pods_ready
    assert (policy.timeout, policy.backoff_limit_count, policy.enable) == (600, 3, True)
    assert not Policy.from_settings(Settings(wait_for_pods_ready="{enable: false}"), lambda _ns: None).pods_ready.enable
    env = {**os.environ, "TURNSTILE_HOME": str(tmp_path), "TURNSTILE_WAIT_FOR_PODS_READY": "{timeout: 0}"}
    done = turnstile("get", "cq", env=env)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "TURNSTILE_WAIT_FOR_PODS_READY" in done.stderr
    assert "waitForPodsReady.timeout: must be longer than 0" in done.stderr


def test_quota_check_strategy_is_kueues_and_refused_with_excluded_prefixes(tmp_path: Path) -> None:
    from admission.policy import Policy

    ignoring = Settings(quota_check_strategy="IgnoreUndeclared")
    assert Policy.from_settings(ignoring, lambda _ns: None).transformations.ignore_undeclared
    assert not Policy.from_settings(Settings(), lambda _ns: None).transformations.ignore_undeclared
    base = {**os.environ, "TURNSTILE_HOME": str(tmp_path)}
    both = {**base, "TURNSTILE_QUOTA_CHECK_STRATEGY": "IgnoreUndeclared", "TURNSTILE_EXCLUDE_RESOURCE_PREFIXES": "x/"}
    done = turnstile("get", "cq", env=both)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "TURNSTILE_QUOTA_CHECK_STRATEGY" in done.stderr and "TURNSTILE_EXCLUDE_RESOURCE_PREFIXES" in done.stderr
    done = turnstile("get", "cq", env={**base, "TURNSTILE_QUOTA_CHECK_STRATEGY": "IgnoreAll"})
    assert (
        done.returncode == 2 and "TURNSTILE_QUOTA_CHECK_STRATEGY" in done.stderr and "IgnoreUndeclared" in done.stderr
    )
