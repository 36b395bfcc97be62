"""The launch lock: one live launcher per run folder (per node of a multi-node job), released when it dies.

Two launches of one run name (a retried or double-triggered workflow) would otherwise train into the same
checkpoint folder at once: the second "resumes" from the first's live checkpoint while the first keeps
writing. The launcher takes an exclusive ``flock`` on a lock file in the run folder and keeps it for the
run's lifetime. ``flock`` belongs to the open file, so the kernel drops it when the holder exits or is
SIGKILLed — no stale lock to break by hand, no expiry to guess. The holder (pid, host, start time) is
written into the file so a refused launch can say who holds the run.

Multi-node: the nodes of one job share one run name (it is also the rendezvous id), and each node runs its
own launcher, possibly on one shared checkpoint store. So the lock is per node, not per run:

- node rank known (single node: 0; ``PET_NODE_RANK`` / ``NODE_RANK`` set by the job): the file is
  ``.launch-node<rank>.lock``. A second launcher for the same node is refused; the other nodes of the
  job take their own files and are never refused by each other.
- several nodes, rank left to the rendezvous: the ``nnodes`` files ``.launch-slot<i>.lock`` form a
  semaphore; each launcher takes a free one. On a shared store the ``nnodes + 1``-th launcher is refused.
  (On node-local stores a duplicate on the same node is then only stopped by the rendezvous, which admits
  ``nnodes`` agents: set the node rank to get a refusal up front.)
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlops_training.errors import RunLockedError, TrainingError

NODE_RANK_VARS = ("PET_NODE_RANK", "NODE_RANK")


@dataclass
class RunLock:
    """A held launch lock; :meth:`release` (or the holder's death) frees it."""

    path: Path
    fd: int

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # closing the last descriptor drops the flock
            self.fd = -1

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def node_rank_from_env(environ: Mapping[str, str]) -> int | None:
    """The node rank the job set for this launcher, or ``None`` when the rendezvous assigns it."""
    for var in NODE_RANK_VARS:
        value = environ.get(var, "").strip()
        if value:
            try:
                return int(value)
            except ValueError:
                raise TrainingError(f"{var}={value!r} is not a node rank: expected an integer >= 0") from None
    return None


def lock_files(run_dir: Path, *, nnodes: int, node_rank: int | None) -> list[Path]:
    """The lock files a launcher may take, in order (see the module docstring)."""
    if nnodes == 1:
        return [run_dir / ".launch-node0.lock"]
    if node_rank is not None:
        return [run_dir / f".launch-node{node_rank}.lock"]
    return [run_dir / f".launch-slot{i}.lock" for i in range(nnodes)]


def read_holder(path: Path) -> dict[str, Any]:
    """What the lock file says about its holder (``{}`` if unreadable: it may be mid-write)."""
    try:
        return dict(json.loads(path.read_text(encoding="utf-8") or "{}"))
    except (OSError, ValueError, TypeError):
        return {}


def _describe(path: Path) -> str:
    h = read_holder(path)
    if not h:
        return f"an unknown process (lock {str(path)!r})"
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(h.get("started_at", 0))))
    return f"pid {h.get('pid')} on host {h.get('host')!r} since {started} (lock {str(path)!r})"


def _try_lock(path: Path, holder: dict[str, Any]) -> RunLock | None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(holder, sort_keys=True).encode(), 0)
    return RunLock(path=path, fd=fd)


def acquire_run_lock(run_dir: Path, run_name: str, *, nnodes: int = 1, node_rank: int | None = None) -> RunLock:
    """Take this launcher's lock on ``run_dir`` without waiting.

    Raises:
        RunLockedError: another live launcher holds the run (its pid, host and start time are named).
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    holder = {"pid": os.getpid(), "host": socket.gethostname(), "started_at": time.time(), "run_name": run_name,
              "node_rank": node_rank}
    candidates = lock_files(run_dir, nnodes=nnodes, node_rank=node_rank)
    for path in candidates:
        lock = _try_lock(path, {**holder, "lock": path.name})
        if lock is not None:
            return lock
    held = "; ".join(_describe(p) for p in candidates)
    what = f"node {node_rank}" if node_rank is not None and nnodes > 1 else (
        "this run" if nnodes == 1 else f"all {nnodes} node slots")
    raise RunLockedError(
        f"run {run_name!r} is already being trained: {what} is held by {held}. Wait for it to finish or stop "
        f"it (its lock goes when it exits), or start a new run with another --run-name"
    )
