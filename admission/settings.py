"""Turnstile's settings (``spec/cli.md``), read from the environment; command-line flags override.

Without ``TURNSTILE_DATABASE_URL`` every command uses an embedded PostgreSQL kept under
``TURNSTILE_HOME/pg`` and started on demand, so everything works on a fresh laptop.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


def normalise_database_url(url: str) -> str:
    """``postgresql://`` and ``postgres://`` become ``postgresql+asyncpg://``; others are kept."""
    for prefix in ("postgresql+asyncpg://", "postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+asyncpg://" + url[len(prefix) :]
    raise ValueError(f"{url!r} is not a PostgreSQL URL; use postgresql://user@host:5432/dbname")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TURNSTILE_", extra="ignore")

    database_url: str | None = Field(default=None, description="PostgreSQL; unset: the embedded one")
    home: Path = Field(default=Path("~/.local/share/turnstile"), description="local state for the CLI")
    kubeconfig: Path | None = Field(default=None, description="kubeconfig for the controller")
    test_database_url: str | None = None
    lease_ttl: float = Field(
        default=15.0, gt=0, description="seconds a leader may go unrenewed before a standby takes over"
    )
    actor: str | None = Field(default=None, description="who is named in the audit log (default: $USER@host)")
    cert_secret: str | None = Field(
        default=None,
        description="namespace/name of the Secret the controller replicas keep the webhook certificate in",
    )

    @field_validator("database_url", "test_database_url")
    @classmethod
    def _normalise(cls, value: str | None) -> str | None:
        return None if not value else normalise_database_url(value)

    @field_validator("home")
    @classmethod
    def _expand(cls, value: Path) -> Path:
        return value.expanduser()
