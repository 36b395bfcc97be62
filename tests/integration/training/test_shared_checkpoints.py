"""Two torchrun "nodes", each with a private working folder, share only the checkpoint store (what the
PyTorchJob's ReadWriteMany volume is). One node is killed mid-run; a relaunch of both resumes from the store
and ends bit-identical to an uninterrupted run."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from mlops_config import PlatformConfig
from mlops_training import launch
from mlops_training.launcher import default_run_name, torchrun_command
from tests.support import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

STEPS = ("training.max_steps=60", "training.checkpoint.every_steps=5", "training.checkpoint.keep_last=3")


def _node(config: PlatformConfig, private: Path, name: str, log: Path) -> subprocess.Popen[bytes]:
    """One node: torchrun (one worker) in its own session, run from its own folder, like one pod."""
    private.mkdir(parents=True, exist_ok=True)
    config_path = private / "config.json"
    config_path.write_text(json.dumps(config.model_dump(mode="json")), encoding="utf-8")
    t = config.training
    cmd = torchrun_command(nproc=t.nproc, nnodes=t.nnodes, rdzv_endpoint=t.rdzv_endpoint, max_restarts=0,
                           run_name=name, worker_args=["--config-json", str(config_path), "--root", str(private),
                                                       "--run-name", name, "--no-track"])
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(cmd, cwd=private, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def _tree(pid: int) -> list[int]:
    """``pid`` and all its descendants (torchrun's workers run in sessions of their own, so a process-group
    kill of the agent does not reach them; a dying pod takes all of them)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def _kill_node(proc: subprocess.Popen[bytes]) -> None:
    for pid in reversed(_tree(proc.pid)):  # workers first, then the agent
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait(timeout=30)


def _two_nodes(tiny_lm: Callable[..., PlatformConfig], shared: Path) -> PlatformConfig:
    """Both nodes, and their replacements, sign with one key pair, as pods mount one signing Secret: each checkpoint's
    manifest is sealed with it and a resume refuses a seal by another key."""
    return tiny_lm(*STEPS, "training.nproc=1", "training.nnodes=2", f"training.rdzv_endpoint=127.0.0.1:{free_port()}",
                   f"training.checkpoint.dir={shared}", f"provenance.local_key_dir={shared.parent / 'signing-secret'}")


def _complete(run_dir: Path) -> list[int]:
    return sorted(int(p.parent.name.removeprefix("step_")) for p in run_dir.glob("step_*/manifest.json"))


def test_a_killed_node_resumes_from_the_shared_store_bit_identically(
        tiny_lm: Callable[..., PlatformConfig], root: Path, tmp_path: Path) -> None:
    from mlops_training.zoo import llama_config

    llama_config("llama-tiny")
    shared = tmp_path / "shared-checkpoints"
    config = _two_nodes(tiny_lm, shared)
    name = default_run_name(config)
    run_dir = shared / name
    logs = tmp_path / "logs"
    logs.mkdir()
    a = _node(config, tmp_path / "node-a", name, logs / "a.log")
    b = _node(config, tmp_path / "node-b", name, logs / "b.log")
    try:
        deadline = time.monotonic() + 300
        while not _complete(run_dir):
            assert a.poll() is None and b.poll() is None, (logs / "a.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "no checkpoint within 300 s"
            time.sleep(0.02)
        _kill_node(b)  # node b, agent and worker, is gone (a pod evicted)
        try:
            assert a.wait(timeout=180) != 0  # node a fails on its dead peer; it does not train on alone
        except subprocess.TimeoutExpired:
            pytest.fail("the surviving node hung after its peer died:\n" + (logs / "a.log").read_text()[-3000:])
    finally:
        for p in (a, b):
            if p.poll() is None:
                _kill_node(p)
    done = _complete(run_dir)
    assert done and done[-1] < 60 and not (run_dir / "result.json").exists(), "the run finished before the kill"

    # Relaunch both nodes (same job: same config and rendezvous), each in a fresh private folder (rescheduled
    # pods): only the store carries state.
    nodes = [_node(config, tmp_path / f"node-{n}-again", name, logs / f"{n}2.log") for n in "ab"]
    for p, n in zip(nodes, "ab", strict=True):
        try:
            assert p.wait(timeout=300) == 0, (logs / f"{n}2.log").read_text()[-3000:]
        finally:
            if p.poll() is None:
                _kill_node(p)
    resumed = json.loads((run_dir / "result.json").read_text())
    assert resumed["resumed_from_step"] is not None and resumed["resumed_from_step"] >= done[0]
    # Nothing of the checkpoint lives in a node's private folder.
    private = ("node-a", "node-b", "node-a-again", "node-b-again")
    assert not [p for d in private for p in (tmp_path / d).rglob("step_*")]

    # The uninterrupted reference: the same world size (2) on one node, in a folder of its own.
    reference_root = tmp_path / "reference"
    shutil.copytree(root / "configs", reference_root / "configs")
    straight = launch(tiny_lm(*STEPS, "training.nproc=2"), reference_root, run_name="straight", track=False)
    assert straight is not None and straight.resumed_from_step is None
    assert resumed["weights_sha256"] == straight.weights_sha256
