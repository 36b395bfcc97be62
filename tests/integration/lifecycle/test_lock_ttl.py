"""The registry lock outlives its TTL while its holder lives, and expires once the holder is dead.

The holder is a separate process (as a second CLI or a monitor would be); the backend is the local
profile's MLflow on SQLite, shared by file. A TTL of 2 s stands in for the 60 s default: what matters is a
holder that holds several TTLs long (an MLflow call that retries for minutes).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from mlops_core.registry_lock import LockTimeoutError, lock_name, registry_lock

pytestmark = [pytest.mark.integration]

TTL = 2.0
HOLDER = textwrap.dedent(
    """
    import sys, time
    import mlflow
    from mlflow.tracking import MlflowClient
    from mlops_core.registry_lock import registry_lock

    mlflow.set_tracking_uri(sys.argv[1])
    mlflow.set_registry_uri(sys.argv[1])
    with registry_lock(MlflowClient(), "fraud", ttl_s=float(sys.argv[2]), timeout_s=30):
        print("held", flush=True)
        time.sleep(float(sys.argv[3]))
    print("released", flush=True)
    """
)


def _client(tmp_path: Path):
    import mlflow
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    client = MlflowClient()
    client.search_registered_models()  # creates the schema before the holder process races us to it
    return uri, client


def _start_holder(uri: str, hold_s: float) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, uri, str(TTL), str(hold_s)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == "held", proc.stderr.read() if proc.stderr else line
    return proc


def test_a_live_holder_keeps_its_lock_past_the_ttl(tmp_path: Path) -> None:
    uri, client = _client(tmp_path)
    hold_s = 8 * TTL
    holder = _start_holder(uri, hold_s)
    started = time.monotonic()
    # We wait for 3 TTLs: without renewal the holder's expiry passes after one, and we would break it.
    with pytest.raises(LockTimeoutError, match=r"fraud\.lifecycle-lock"), \
            registry_lock(client, "fraud", ttl_s=TTL, timeout_s=3 * TTL):
        pass
    assert time.monotonic() - started < hold_s, "the contender gave up only after the holder let go"
    out, err = holder.communicate(timeout=60)
    assert holder.returncode == 0 and "released" in out, err[-2000:]
    # Released cleanly: we get it at once.
    with registry_lock(client, "fraud", ttl_s=TTL, timeout_s=1):
        pass


def test_a_dead_holders_lock_still_expires(tmp_path: Path) -> None:
    uri, client = _client(tmp_path)
    holder = _start_holder(uri, 600)
    os.killpg(holder.pid, signal.SIGKILL)
    holder.wait(timeout=30)
    killed = time.monotonic()
    assert client.get_registered_model(lock_name("fraud")) is not None  # left behind by the dead holder
    with registry_lock(client, "fraud", ttl_s=TTL, timeout_s=5 * TTL):
        waited = time.monotonic() - killed
    assert waited <= TTL + 3, f"took {waited:.1f} s to break a lock whose TTL is {TTL} s"
