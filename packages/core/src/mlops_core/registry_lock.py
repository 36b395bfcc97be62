"""A cross-process, cross-host mutex held in the model registry itself.

Creating a registered model is atomic and unique by name in every MLflow backend (a primary key in
SQLite and PostgreSQL, ``RESOURCE_ALREADY_EXISTS`` through ``mlflow server``). So the lock for model
``m`` *is* the registered model ``m.lifecycle-lock``: whoever creates it holds it; deleting it releases
it. The description carries a random token, the holder and an expiry, so a lock left by a killed process
can be broken after ``ttl_s``; alias moves under it take well under a second.

A live holder must never lose its lock to that expiry: one MLflow call can retry for minutes (the client's
``MLFLOW_HTTP_REQUEST_MAX_RETRIES`` with exponential back-off and a 120 s timeout per try), far past any
TTL short enough to recover from a killed holder quickly. So while the lock is held a heartbeat thread
pushes the expiry forward every ``ttl_s / 3``: a live holder keeps it however long its calls take, and a
dead holder's lock still expires ``ttl_s`` after its last heartbeat.
"""

from __future__ import annotations

import json
import logging
import os
import random
import socket
import threading
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


def _lock_info(token: str, ttl_s: float) -> dict[str, Any]:
    return {"token": token, "host": socket.gethostname(), "pid": os.getpid(), "expires": time.time() + ttl_s}


def _try_create(client: MlflowClient, name: str, token: str, ttl_s: float) -> bool:
    from mlflow.exceptions import MlflowException

    info = _lock_info(token, ttl_s)
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
    heartbeat = _Heartbeat(client, name, token, ttl_s)
    heartbeat.start()
    try:
        yield token
    finally:
        heartbeat.stop()
        _release(client, name, token)


class _Heartbeat(threading.Thread):
    """Renews a held lock's expiry every ``ttl_s / 3`` until stopped (daemon: dies with its process)."""

    def __init__(self, client: MlflowClient, name: str, token: str, ttl_s: float) -> None:
        super().__init__(name=f"lock-heartbeat-{name}", daemon=True)
        self.client, self.lock, self.token, self.ttl_s = client, name, token, ttl_s
        self._stop_event = threading.Event()

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=self.ttl_s)

    def run(self) -> None:
        from mlflow.exceptions import MlflowException

        while not self._stop_event.wait(self.ttl_s / 3):
            try:
                holder = _holder(self.client, self.lock)
                if holder is None or holder.get("token") != self.token:
                    # Only possible when renewals failed for a whole TTL; the moves under the lock are
                    # journalled, so the ledger's recovery step repairs a half-applied one.
                    log.error("lifecycle lock %s was taken over by %s while held", self.lock, holder)
                    return
                info = _lock_info(self.token, self.ttl_s)
                self.client.update_registered_model(self.lock, description=json.dumps(info))
            except MlflowException as exc:  # a busy or unreachable backend: the next beat tries again
                log.warning("renewing lifecycle lock %s failed: %s", self.lock, exc)


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
