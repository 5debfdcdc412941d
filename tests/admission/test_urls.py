"""Database URLs: libpq parameters translated or refused by name, passwords never printed."""

from __future__ import annotations

import pytest

from admission import urls


@pytest.mark.parametrize(
    ("given", "normal", "engine", "options"),
    [
        (
            "postgresql://u:secret@db.example:5432/turnstile?sslmode=require&connect_timeout=7",
            "postgresql+asyncpg://u:secret@db.example:5432/turnstile?sslmode=require&connect_timeout=7",
            "postgresql+asyncpg://u:secret@db.example:5432/turnstile",
            {"timeout": 7.0, "ssl": "require"},
        ),
        (
            "postgres://u@db/x?ssl=verify-full&application_name=turnstile",
            "postgresql+asyncpg://u@db/x?application_name=turnstile&sslmode=verify-full",
            "postgresql+asyncpg://u@db/x",
            {"timeout": 10.0, "ssl": "verify-full", "server_settings": {"application_name": "turnstile"}},
        ),
        (
            "postgresql+asyncpg://postgres:@/turnstile?host=/tmp/pg",
            "postgresql+asyncpg://postgres:@/turnstile?host=/tmp/pg",
            "postgresql+asyncpg://postgres:@/turnstile?host=/tmp/pg",
            {"timeout": 10.0},
        ),
    ],
    ids=["libpq-names", "asyncpg-ssl-alias", "unix-socket"],
)
def test_libpq_parameters_are_translated(given: str, normal: str, engine: str, options: dict[str, object]) -> None:
    assert urls.normalise(given) == normal
    assert urls.engine_url(normal) == engine
    assert urls.asyncpg_options(normal) == options
    assert urls.asyncpg_dsn(normal).startswith("postgresql://")


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("postgresql://u:secret@db/x?keepalives=1", "parameter keepalives is not supported; supported: host"),
        ("postgresql://u:secret@db/x?sslmode=sometimes", "sslmode='sometimes' is not one of disable"),
        ("postgresql://u:secret@db/x?connect_timeout=soon", "connect_timeout='soon': must be a number of seconds"),
        ("postgresql://u:secret@db:5432", "names no database"),
        ("mysql://root:secret@localhost/db", "is not a PostgreSQL URL"),
    ],
    ids=["unknown-parameter", "bad-sslmode", "bad-timeout", "no-database", "not-postgresql"],
)
def test_what_cannot_work_is_refused_by_name_without_the_password(given: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as refused:
        urls.normalise(given)
    assert "secret" not in str(refused.value)


@pytest.mark.parametrize(
    ("given", "shown"),
    [
        (
            "postgresql+asyncpg://u:secret@db:5432/x?sslmode=require",
            "postgresql+asyncpg://u:***@db:5432/x?sslmode=require",
        ),
        ("postgresql://u@db/x", "postgresql://u@db/x"),
        ("postgresql+asyncpg://postgres:@/t?host=/tmp/pg", "postgresql+asyncpg://postgres:@/t?host=/tmp/pg"),
    ],
    ids=["password", "no-password", "empty-password"],
)
def test_masked(given: str, shown: str) -> None:
    assert urls.masked(given) == shown
