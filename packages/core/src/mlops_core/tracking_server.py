"""How the platform runs ``mlflow server``: basic-auth, PostgreSQL, proxied artifacts — one definition.

The Deployment in ``infra/platform/mlflow.yaml`` and the rehearsal start the server with these flags
(``tests/gitops`` checks that the manifest agrees). Authentication is MLflow's own ``basic-auth`` app:
users and permissions in a database of their own (``database_uri``; PostgreSQL in the cluster, never the
tracking store's database: both keep an ``alembic_version`` table). The auth config file names that
database (its URI holds the DB password, so the file is a Secret); the first admin comes from
``MLFLOW_AUTH_ADMIN_USERNAME`` / ``MLFLOW_AUTH_ADMIN_PASSWORD`` (env from a Secret; MLflow ships no default
password and refuses to bootstrap without one) or from the file. Clients send
``MLFLOW_TRACKING_USERNAME`` / ``MLFLOW_TRACKING_PASSWORD`` (the env vars the profiles name); a request
without them is answered 401.
"""

from __future__ import annotations

import configparser
import sys
from pathlib import Path

AUTH_APP = "basic-auth"
AUTH_CONFIG_ENV = "MLFLOW_AUTH_CONFIG_PATH"
ADMIN_USERNAME_ENV = "MLFLOW_AUTH_ADMIN_USERNAME"
ADMIN_PASSWORD_ENV = "MLFLOW_AUTH_ADMIN_PASSWORD"
SECRET_KEY_ENV = "MLFLOW_FLASK_SERVER_SECRET_KEY"


def write_auth_config(path: str | Path, *, database_uri: str, admin_username: str | None = None,
                      admin_password: str | None = None, default_permission: str = "READ",
                      auth_cache_ttl_seconds: int = 0) -> Path:
    """Write MLflow's basic-auth config (an INI file) and return its path.

    Args:
        path: Where to write it (mode 0600: it holds the admin password).
        database_uri: SQLAlchemy URI of the users/permissions database (``postgresql+psycopg2://…``; a password in
            it percent-encoded, as in any URL).
        admin_username: The admin MLflow creates on first start (``None``: from ``MLFLOW_AUTH_ADMIN_USERNAME``).
        admin_password: Its password, 12 characters or more (``None``: from ``MLFLOW_AUTH_ADMIN_PASSWORD``).
        default_permission: What an authenticated user may do without a grant: ``READ``, ``EDIT``,
            ``MANAGE`` or ``NO_PERMISSIONS``.
        auth_cache_ttl_seconds: MLflow's own credential cache (``0``: off, MLflow's default). Without it every
            request re-checks the password against its werkzeug ``scrypt`` hash (N=32768: ~0.1 s of CPU on an idle
            core, ~0.5-1 s on a loaded 2-core machine), and one alias move is 14-16 requests. A hit skips only
            that hash check (the key is an HMAC of the password under a per-process random key); permissions
            are still checked per request. A password changed through the API is dropped from the cache of the
            worker that served the change at once, from other workers after the TTL: one worker
            (``--workers 1``, as the rehearsal runs) has no stale window.
    """
    if default_permission not in {"READ", "EDIT", "MANAGE", "NO_PERMISSIONS"}:
        raise ValueError(f"default_permission {default_permission!r} is not one of READ, EDIT, MANAGE, NO_PERMISSIONS")
    if auth_cache_ttl_seconds < 0:
        raise ValueError(f"auth_cache_ttl_seconds {auth_cache_ttl_seconds!r} is negative; 0 turns the cache off")
    if admin_password is not None and len(admin_password) < 12:
        raise ValueError("admin_password must be at least 12 characters")
    parser = configparser.ConfigParser(interpolation=None)
    values = {
        "default_permission": default_permission,
        "database_uri": database_uri,
        **({"admin_username": admin_username} if admin_username else {}),
        **({"admin_password": admin_password} if admin_password else {}),
        "authorization_function": "mlflow.server.auth:authenticate_request_basic_auth",
        **({"auth_cache_ttl_seconds": str(auth_cache_ttl_seconds)} if auth_cache_ttl_seconds else {}),
    }
    # MLflow reads the file with configparser's default (``%``-interpolating) parser: a ``%`` written as is
    # (a percent-encoded password in the URI, or one in the admin password) stops the server at start-up or
    # changes the value. ``%%`` reads back as one ``%``.
    parser["mlflow"] = {key: value.replace("%", "%%") for key, value in values.items()}
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.touch(mode=0o600, exist_ok=True)
    with out.open("w", encoding="utf-8") as fh:
        parser.write(fh)
    return out


BACKEND_STORE_ENV = "MLFLOW_BACKEND_STORE_URI"
"""Where ``mlflow server`` reads its backend store URI when ``--backend-store-uri`` is not given: the URI holds
the database password, and a process's argv is readable by every user of the machine (``ps``), its env is not."""


def database_url(driver: str, *, user: str, password: str, host: str, port: int, database: str) -> str:
    """A SQLAlchemy URL with the user and password percent-encoded (an ``@``, ``:`` or ``/`` in a generated
    password would otherwise move the host or the database)."""
    from urllib.parse import quote

    return f"{driver}://{quote(user, safe='')}:{quote(password, safe='')}@{host}:{port}/{quote(database, safe='')}"


def server_args(*, artifacts_destination: str, host: str, port: int, workers: int = 1) -> list[str]:
    """The ``mlflow server`` arguments (after ``server``): auth app, proxied artifacts. The backend store comes
    from the environment (:data:`BACKEND_STORE_ENV`, :func:`server_env`), never from argv."""
    return [
        f"--app-name={AUTH_APP}",
        f"--host={host}",
        f"--port={port}",
        f"--workers={workers}",
        f"--artifacts-destination={artifacts_destination}",
        "--serve-artifacts",
    ]


def server_command(*, artifacts_destination: str, host: str, port: int, workers: int = 1) -> list[str]:
    """``[<venv>/bin/mlflow, "server", *server_args(...)]``: the command a rehearsal starts (with
    :func:`server_env`'s environment, which names the backend store)."""
    return [str(Path(sys.executable).with_name("mlflow")), "server",
            *server_args(artifacts_destination=artifacts_destination, host=host, port=port, workers=workers)]


NO_JOB_RUNNER = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
"""MLflow 3's server starts seven huey job consumers (GenAI evaluation, prompt optimization) unless told not to; the
platform uses none of them, and on a 2-core machine they cost every server start seconds."""


def server_env(auth_config: str | Path, secret_key: str, *, backend_store_uri: str,
               admin_username: str | None = None, admin_password: str | None = None) -> dict[str, str]:
    """Env vars the server needs besides the inherited ones: the backend store URI (it holds the database
    password), the auth config's path, Flask's secret key and, when given, the first admin's credentials (what
    the Deployment takes from the Secrets ``mlflow-db`` and ``mlflow-auth``)."""
    env = {BACKEND_STORE_ENV: backend_store_uri, AUTH_CONFIG_ENV: str(auth_config), SECRET_KEY_ENV: secret_key,
           "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false", **NO_JOB_RUNNER}
    if admin_username:
        env[ADMIN_USERNAME_ENV] = admin_username
    if admin_password:
        env[ADMIN_PASSWORD_ENV] = admin_password
    return env
