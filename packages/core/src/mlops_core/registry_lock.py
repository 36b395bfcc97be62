"""A cross-process, cross-host mutex held in the model registry itself.

Creating a registered model is atomic and unique by name in every MLflow backend (a primary key in
SQLite and PostgreSQL, ``RESOURCE_ALREADY_EXISTS`` through ``mlflow server``). So the lock for model
``m`` *is* the registered model ``m.lifecycle-lock``: whoever creates it holds it; deleting it releases
it. The description carries a random token, the holder and an expiry, so a lock left by a killed process
can be broken after ``ttl_s``; alias moves under it take well under a second.
"""

from __future__ import annotations

import json
import logging
import os
import random
import socket
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from mlops_core.errors import PlatformError

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

log = logging.getLogger(__name__)

LOCK_SUFFIX = ".lifecycle-lock"
LOCK_TAG = "mlops.lifecycle_lock"


class LockTimeoutError(PlatformError):
    """Another process held the lifecycle lock for longer than we were willing to wait."""


def lock_name(model_name: str) -> str:
    """Registered-model name of the lock that guards ``model_name``'s aliases and ledger."""
    return f"{model_name}{LOCK_SUFFIX}"


def _holder(client: MlflowClient, name: str) -> dict[str, Any] | None:
    """The lock's description (token, holder, expiry), ``None`` when nobody holds it."""
    from mlflow.exceptions import MlflowException

    try:
        model = client.get_registered_model(name)
    except MlflowException as exc:
        if exc.error_code == "RESOURCE_DOES_NOT_EXIST":
            return None
        raise
    try:
        return dict(json.loads(model.description or "{}"))
    except (json.JSONDecodeError, TypeError, ValueError):
        return {}


def _try_create(client: MlflowClient, name: str, token: str, ttl_s: float) -> bool:
    from mlflow.exceptions import MlflowException

    info = {"token": token, "host": socket.gethostname(), "pid": os.getpid(), "expires": time.time() + ttl_s}
    try:
        client.create_registered_model(name, tags={LOCK_TAG: "true"}, description=json.dumps(info))
        return True
    except MlflowException as exc:
        if exc.error_code == "RESOURCE_ALREADY_EXISTS":
            return False
        # A transient failure (e.g. SQLite busy) may still have committed: check who holds it now.
        log.debug("creating lock %s failed (%s); checking the holder", name, exc)
        try:
            current = _holder(client, name)
        except MlflowException:  # still busy: not ours as far as we know; the caller retries
            return False
        return bool(current and current.get("token") == token)


@contextmanager
def registry_lock(
    client: MlflowClient, model_name: str, *, timeout_s: float = 30.0, ttl_s: float = 60.0
) -> Iterator[str]:
    """Hold the lifecycle lock of ``model_name``; yields this holder's token.

    Raises:
        LockTimeoutError: the lock stayed held (and unexpired) for ``timeout_s``.
    """
    from mlflow.exceptions import MlflowException

    name = lock_name(model_name)
    token = uuid.uuid4().hex
    deadline = time.monotonic() + timeout_s
    delay = 0.02
    while not _try_create(client, name, token, ttl_s):
        try:
            holder = _holder(client, name)
        except MlflowException as exc:  # a busy backend: wait and try again
            log.debug("reading lock %s failed: %s", name, exc)
            if time.monotonic() > deadline:
                raise LockTimeoutError(
                    f"lifecycle lock {name!r} could not be read for {timeout_s:.0f} s: {exc}"
                ) from None
            time.sleep(delay)
            continue
        if holder is not None and holder.get("token") == token:  # our create went through after all
            break
        if holder is not None and float(holder.get("expires", 0) or 0) < time.time():
            log.warning("breaking expired lifecycle lock %s held by %s", name, holder)
            _release(client, name, holder.get("token"))
            continue
        if time.monotonic() > deadline:
            raise LockTimeoutError(
                f"lifecycle lock {name!r} is held by {holder!r} for more than {timeout_s:.0f} s; retry later, "
                f"or delete registered model {name!r} if that process is gone"
            )
        time.sleep(delay * (0.5 + random.random()))
        delay = min(delay * 1.5, 0.25)
    try:
        yield token
    finally:
        _release(client, name, token)


def _release(client: MlflowClient, name: str, token: object) -> None:
    """Delete the lock if ``token`` still holds it (never someone else's)."""
    from mlflow.exceptions import MlflowException

    for attempt in range(5):
        try:
            holder = _holder(client, name)
            if holder is None or holder.get("token") != token:
                return
            client.delete_registered_model(name)
            return
        except MlflowException as exc:
            if exc.error_code == "RESOURCE_DOES_NOT_EXIST":
                return
            log.debug("releasing %s failed (attempt %d): %s", name, attempt + 1, exc)
            time.sleep(0.05 * (attempt + 1))
    log.warning("could not release lifecycle lock %s; it expires on its own", name)
