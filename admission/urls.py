"""Database URLs: the one place that reads, checks, translates and prints them.

Users write libpq URLs (``postgresql://user:password@host:5432/db?sslmode=require``), as every
PostgreSQL tool and operator (CloudNativePG's ``uri``) gives them. Turnstile talks to PostgreSQL
through asyncpg, which names some parameters differently and treats every name it does not
know as a server setting (``connect_timeout=10`` then fails at connect time with a traceback).
So a URL is normalised once (``normalise``: ``postgresql+asyncpg://`` and only the parameters
Turnstile knows, every other one refused by name) and each consumer asks for its form here:
``engine_url`` + ``connect_args`` for SQLAlchemy, ``asyncpg_dsn`` + ``asyncpg_options`` for a
raw asyncpg connection. ``masked`` is the only form that may be printed or logged: the
password never reaches a log line, a banner or an error message.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

ASYNCPG = "postgresql+asyncpg"
SCHEMES = ("postgresql+asyncpg", "postgresql", "postgres")
SSL_MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
# libpq parameter -> what Turnstile does with it
SUPPORTED = {
    "host": "a unix-socket folder (or a host name)",
    "port": "the server's port",
    "sslmode": f"TLS: {', '.join(SSL_MODES)}",
    "ssl": "the same as sslmode (asyncpg's name)",
    "connect_timeout": "seconds to wait for a connection",
    "application_name": "the name shown in pg_stat_activity",
}
DEFAULT_CONNECT_TIMEOUT = 10.0


def _query(url: str) -> dict[str, str]:
    return dict(parse_qsl(urlsplit(url).query, keep_blank_values=True))


def normalise(url: str) -> str:
    """``postgresql+asyncpg://...`` with libpq's parameter names; ``ValueError`` (naming the
    parameter and the ones that work) for anything else. The password is never in the message."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in SCHEMES:
        raise ValueError(
            f"{masked(url)!r} is not a PostgreSQL URL; write postgresql://user@host:5432/dbname"
            " (optionally ?sslmode=require&connect_timeout=10)"
        )
    parts = urlsplit(f"{ASYNCPG}://{rest}")
    params = dict(parse_qsl(parts.query, keep_blank_values=True))
    unknown = sorted(set(params) - set(SUPPORTED))
    if unknown:
        known = "; ".join(f"{k} ({v})" for k, v in SUPPORTED.items())
        raise ValueError(f"database URL parameter {', '.join(unknown)} is not supported; supported: {known}")
    if "ssl" in params:
        params.setdefault("sslmode", params.pop("ssl"))
    if "sslmode" in params and params["sslmode"] not in SSL_MODES:
        raise ValueError(f"sslmode={params['sslmode']!r} is not one of {', '.join(SSL_MODES)}")
    if "connect_timeout" in params:
        try:
            if float(params["connect_timeout"]) <= 0:
                raise ValueError
        except ValueError:
            seconds = params["connect_timeout"]
            raise ValueError(f"connect_timeout={seconds!r}: must be a number of seconds > 0") from None
    if not parts.path.strip("/"):
        raise ValueError(f"{masked(url)!r} names no database; add it after the host: .../dbname")
    return urlunsplit(parts._replace(query=urlencode(params, safe="/", quote_via=quote)))


def _without_params(url: str, keep: tuple[str, ...]) -> str:
    parts = urlsplit(url)
    params = {k: v for k, v in parse_qsl(parts.query, keep_blank_values=True) if k in keep}
    return urlunsplit(parts._replace(query=urlencode(params, safe="/", quote_via=quote)))


def engine_url(url: str) -> str:
    """The URL for SQLAlchemy's asyncpg dialect: only ``host`` stays in the query."""
    return _without_params(url, ("host", "port"))


def asyncpg_options(url: str) -> dict[str, Any]:
    """``asyncpg.connect`` keyword arguments for the URL's parameters."""
    params = _query(url)
    out: dict[str, Any] = {"timeout": float(params.get("connect_timeout") or DEFAULT_CONNECT_TIMEOUT)}
    if params.get("sslmode"):
        out["ssl"] = params["sslmode"]
    if params.get("application_name"):
        out["server_settings"] = {"application_name": params["application_name"]}
    return out


def connect_args(url: str) -> dict[str, Any]:
    """The same, for ``create_async_engine(connect_args=...)``."""
    return asyncpg_options(url)


def asyncpg_dsn(url: str) -> str:
    """A plain ``postgresql://`` DSN for ``asyncpg.connect`` (its other options: ``asyncpg_options``)."""
    plain = _without_params(url, ("host", "port"))
    for scheme in SCHEMES:
        if plain.startswith(scheme + "://"):
            return "postgresql://" + plain[len(scheme) + 3 :]
    return plain


def with_database(url: str, name: str) -> str:
    """The same server and parameters, another database."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + quote(name)))


def database_name(url: str) -> str:
    return unquote(urlsplit(url).path.strip("/"))


def masked(url: str) -> str:
    """The URL with its password replaced by ``***``: the only form to print or log."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<a database URL>"
    if not parts.password:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))
