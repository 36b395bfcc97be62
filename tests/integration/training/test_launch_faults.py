"""Real ``mlops train run`` processes: a second launch of a live run is refused naming the holder, and a
SIGKILL of the launcher (alone, or its whole process group) leaves no worker training; the rerun resumes
and ends bit-identical to an uninterrupted run."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from mlops_training import TrainResult, launch
from tests.support import python_module

from .conftest import STRAIGHT_STEPS, TINY

# Four real launches per test: on a loaded 2-core machine they outlast pytest's default 600 s.
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1500)]

STEPS = STRAIGHT_STEPS
MLOPS = str(Path(sys.executable).with_name("mlops"))


def start_cli(root: Path, run_name: str, tag: str, *sets: str) -> tuple[subprocess.Popen[str], Path]:
    """``mlops train run`` in a process group of its own (as a CI job step or a terminal would start it)."""
    args = [MLOPS, "train", "run", "--model", "llm-tiny", "--run-name", run_name, "--no-track"]
    for s in (*TINY, *STEPS, *sets):
        args += ["--set", s]
    env = {**os.environ, "MLOPS_TEST_TAG": tag, "MLOPS_CONFIG_DIR": str(root / "configs")}
    # Output to a file, not a pipe: an undrained pipe fills up and stalls the training it logs.
    log = root / f"{run_name}-{tag}.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(args, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
    return proc, log


def tagged_processes(tag: str) -> dict[int, str]:
    """pid → NUL-separated command line of each live process with ``MLOPS_TEST_TAG=tag`` (launcher, agent, workers)."""
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            environ = (proc / "environ").read_bytes()
            if f"MLOPS_TEST_TAG={tag}".encode() not in environ.split(b"\0"):
                continue
            stat = (proc / "stat").read_text()
            if stat.rsplit(")", 1)[1].split()[0] == "Z":  # a zombie trains nothing; its parent reaps it
                continue
            found[int(proc.name)] = (proc / "cmdline").read_bytes().decode()
        except OSError:
            continue
    return found


def workers(tag: str) -> dict[int, str]:
    """The worker processes (``python -u -m mlops_training.worker``; the agent, ``python -c ...``, names that module
    among torchrun's arguments, which :func:`python_module` does not read)."""
    return {pid: cmd for pid, cmd in tagged_processes(tag).items()
            if python_module(cmd.split("\0")) == "mlops_training.worker"}


def wait_for(path: Path, proc: subprocess.Popen[str], log: Path, timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.is_file():
        assert proc.poll() is None, f"the run exited early:\n{log.read_text()}"
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.02)


def assert_all_gone(tag: str, within_s: float = 5.0) -> float:
    """Every process of the run is gone within ``within_s``; returns how long that took."""
    t0 = time.monotonic()
    while (left := tagged_processes(tag)) and time.monotonic() - t0 < within_s:
        time.sleep(0.05)
    assert not left, f"still running {within_s}s after the kill: {left}"
    return time.monotonic() - t0


@pytest.fixture(scope="module")
def straight(straight_tiny_lm: TrainResult) -> TrainResult:
    """The uninterrupted run, trained once per test run (conftest): the finished runs here end bit-identical to it."""
    return straight_tiny_lm


def test_second_launch_of_a_live_run_is_refused_naming_the_holder(root: Path, straight: TrainResult) -> None:
    tag = uuid.uuid4().hex
    first, log = start_cli(root, "twice", tag)
    paused: list[int] = []
    try:
        # The first run's workers are paused (SIGSTOP) while the second launch is tried, so the first is still
        # mid-training then however long the second's start-up takes: no step count long enough to hope for.
        # Their pids are read before the step-8 checkpoint, so the pause follows it by one poll (20 ms), not
        # by a scan of /proc, with 32 steps and 4 checkpoints still to go.
        deadline = time.monotonic() + 600
        while len(found := workers(tag)) < 2:
            assert first.poll() is None, f"the run exited early:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"no two workers started: {tagged_processes(tag)}"
            time.sleep(0.05)
        wait_for(root / ".mlops/checkpoints/twice/step_00000008/manifest.json", first, log)
        paused = list(found)
        assert len(paused) == 2, tagged_processes(tag)
        for pid in paused:
            os.kill(pid, signal.SIGSTOP)
        second = subprocess.run([MLOPS, "train", "run", "--model", "llm-tiny", "--run-name", "twice", "--no-track",
                                 *[a for s in (*TINY, *STEPS) for a in ("--set", s)]],
                                cwd=root, env={**os.environ, "MLOPS_CONFIG_DIR": str(root / "configs")},
                                capture_output=True, text=True, timeout=600)
        assert first.poll() is None, "the first run should still be training when the second is refused"
        assert not (root / ".mlops/checkpoints/twice/step_00000040").exists(), "the first run had finished already"
    finally:
        for pid in paused:
            with contextlib.suppress(ProcessLookupError):  # a worker gone meanwhile: the asserts below say so
                os.kill(pid, signal.SIGCONT)
        first.wait(timeout=900)
    out = log.read_text()
    assert second.returncode != 0
    message = " ".join((second.stdout + second.stderr).split())
    assert "already being trained" in message, message
    assert f"pid {first.pid} on host {socket.gethostname()!r}" in message, message
    assert re.search(r"since \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", message), message
    # The refused launch started no worker and touched nothing: the first finishes as if alone, bit for bit.
    assert first.returncode == 0, out
    result = json.loads((root / ".mlops/checkpoints/twice/result.json").read_text())
    assert result["resumed_from_step"] is None and result["steps"] == 40
    assert result["weights_sha256"] == straight.weights_sha256


def _kill_at(root: Path, run: str, step: int, tag: str, *, group: bool) -> float:
    proc, log = start_cli(root, run, tag)
    wait_for(root / f".mlops/checkpoints/{run}/step_{step:08d}/manifest.json", proc, log)
    assert len(workers(tag)) == 2, tagged_processes(tag)
    if group:
        os.killpg(proc.pid, signal.SIGKILL)
    else:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    return assert_all_gone(tag)


def test_sigkill_of_launcher_or_its_group_leaves_no_worker_and_rerun_is_bit_identical(
    tiny_lm: Callable[..., object], root: Path, straight: TrainResult
) -> None:
    # The launcher alone: torchrun's agent and then its workers die with it (parent-death signal chain).
    gone_alone = _kill_at(root, "killed-launcher", 8, uuid.uuid4().hex, group=False)
    # Its process group (a CI timeout): the workers live in sessions of their own, and still die.
    gone_group = _kill_at(root, "killed-launcher", 24, uuid.uuid4().hex, group=True)
    assert gone_alone < 5 and gone_group < 5
    # The lock died with its holder: the rerun is not refused, resumes, and ends where a straight run ends.
    rerun = launch(tiny_lm(*STEPS), root, run_name="killed-launcher", track=False)  # type: ignore[arg-type]
    assert rerun is not None and rerun.resumed_from_step is not None and 24 <= rerun.resumed_from_step < 40
    assert rerun.steps == 40 and rerun.weights_sha256 == straight.weights_sha256
