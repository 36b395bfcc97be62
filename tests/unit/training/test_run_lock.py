"""The launch lock: refuses a second holder naming the first, frees itself when its holder dies, and lets
the nodes of one multi-node job share a run folder."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mlops_training import RunLockedError, TrainingError
from mlops_training.run_lock import acquire_run_lock, node_rank_from_env, read_holder


def test_second_holder_is_refused_with_pid_host_and_start_time(tmp_path: Path) -> None:
    import socket

    with acquire_run_lock(tmp_path / "run", "run") as lock:
        holder = read_holder(lock.path)
        assert holder["pid"] == os.getpid() and holder["host"] == socket.gethostname()
        with pytest.raises(RunLockedError) as info:
            acquire_run_lock(tmp_path / "run", "run")
        started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(holder["started_at"]))
        assert f"pid {os.getpid()} on host {socket.gethostname()!r} since {started}" in str(info.value)
    acquire_run_lock(tmp_path / "run", "run").release()  # released on exit from the block


def test_lock_of_a_sigkilled_holder_is_free(tmp_path: Path) -> None:
    code = ("import sys, time; from pathlib import Path; from mlops_training.run_lock import acquire_run_lock; "
            f"lock = acquire_run_lock(Path({str(tmp_path / 'run')!r}), 'run'); print('held', flush=True); "
            "time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(RunLockedError, match=f"pid {holder.pid} "):
            acquire_run_lock(tmp_path / "run", "run")
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    acquire_run_lock(tmp_path / "run", "run").release()


def test_nodes_of_one_job_share_the_run_but_not_one_slot(tmp_path: Path) -> None:
    run = tmp_path / "run"
    # Rank left to the rendezvous: nnodes launchers fit, one more is refused.
    a, b = acquire_run_lock(run, "r", nnodes=2), acquire_run_lock(run, "r", nnodes=2)
    with pytest.raises(RunLockedError, match="all 2 node slots"):
        acquire_run_lock(run, "r", nnodes=2)
    a.release()
    b.release()
    # Rank set by the job: another node's launcher passes, a second launcher for the same node does not.
    n0, n1 = acquire_run_lock(run, "r", nnodes=2, node_rank=0), acquire_run_lock(run, "r", nnodes=2, node_rank=1)
    with pytest.raises(RunLockedError, match="node 1 is held by pid"):
        acquire_run_lock(run, "r", nnodes=2, node_rank=1)
    n0.release()
    n1.release()


def test_node_rank_comes_from_the_job_env_and_a_bad_value_is_named() -> None:
    assert node_rank_from_env({}) is None
    assert node_rank_from_env({"PET_NODE_RANK": "3", "NODE_RANK": "1"}) == 3
    with pytest.raises(TrainingError, match="NODE_RANK='x' is not a node rank"):
        node_rank_from_env({"NODE_RANK": "x"})
