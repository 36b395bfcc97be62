"""The process harness: real servers as local child processes, each on a free loopback port, all stopped at the end.

Each server runs in a process group of its own (``start_new_session``), so stopping it reaches every process it
spawned (gunicorn workers, uvicorn reloaders): SIGTERM to the group, then SIGKILL to what is left after a grace
period. :class:`ProcessHarness` is a context manager; leaving it by any path (an exception, Ctrl-C, SIGTERM turned
into ``SystemExit`` by :func:`terminate_on_sigterm`) stops everything it started, newest first.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import httpx

from mlops_pipeline.errors import PipelineError

log = logging.getLogger(__name__)

ReadyCheck = Callable[[], bool]


def free_port() -> int:
    """A TCP port nothing listens on right now (the kernel picks it; racy only against other port pickers)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_ready(url: str, *, statuses: Sequence[int] = (200,), auth: tuple[str, str] | None = None) -> ReadyCheck:
    """Ready once ``GET url`` answers one of ``statuses``."""

    def check() -> bool:
        try:
            return httpx.get(url, timeout=2, auth=auth).status_code in statuses
        except httpx.HTTPError:
            return False

    return check


def tcp_ready(port: int, host: str = "127.0.0.1") -> ReadyCheck:
    """Ready once a TCP connection to ``host:port`` is accepted."""

    def check() -> bool:
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1):
            return True
        return False

    return check


@dataclass(frozen=True)
class ServerSpec:
    """How to start one server and how to tell it is up."""

    name: str
    argv: Sequence[str]
    ready: ReadyCheck
    env: Mapping[str, str] = field(default_factory=dict)
    """Added to (and overriding) the parent's environment."""
    cwd: Path | None = None
    ready_timeout_s: float = 120.0
    stop_timeout_s: float = 20.0
    unset: Sequence[str] = ()
    """Variables of the parent's environment the server must not inherit (secrets its workload does not hold);
    :attr:`env` may set them again."""


@dataclass
class RunningServer:
    """A started server: its process, the log it writes to, and the facts callers need (URL, port)."""

    spec: ServerSpec
    proc: subprocess.Popen[bytes]
    log_path: Path
    started_s: float
    ready_s: float = 0.0

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


class ProcessHarness:
    """Starts servers, waits until each is ready, and stops all of them on exit (newest first).

    Args:
        log_dir: Each server's stdout and stderr go to ``<log_dir>/<name>.log``.
    """

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.servers: dict[str, RunningServer] = {}
        self.stopped: list[int] = []
        """Pids of every process group leader this harness started and stopped (the orphan check reads it)."""

    def __enter__(self) -> ProcessHarness:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop_all()

    def start(self, spec: ServerSpec) -> RunningServer:
        """Start ``spec`` and block until its ready check passes; on failure it is stopped and the log quoted."""
        self.launch(spec)
        return self.wait_ready(spec.name)

    def launch(self, spec: ServerSpec) -> RunningServer:
        """Start ``spec`` without waiting (several servers may then start side by side)."""
        if spec.name in self.servers:
            raise PipelineError(f"server {spec.name!r} is already running (pid {self.servers[spec.name].pid})")
        log_path = self.log_dir / f"{spec.name}.log"
        env = {**{k: v for k, v in os.environ.items() if k not in spec.unset}, "PYTHONUNBUFFERED": "1", **spec.env}
        with log_path.open("ab") as out:
            out.write(f"$ {' '.join(spec.argv)}\n".encode())
            out.flush()
            try:
                proc = subprocess.Popen(list(spec.argv), cwd=spec.cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True)
            except OSError as exc:
                raise PipelineError(f"cannot start {spec.name!r} ({spec.argv[0]!r}): {exc}") from exc
        server = RunningServer(spec, proc, log_path, time.monotonic())
        self.servers[spec.name] = server
        return server

    def wait_ready(self, name: str) -> RunningServer:
        """Block until server ``name`` is ready; stop it and quote its log when it exits or times out first."""
        server = self.servers[name]
        spec, proc, log_path = server.spec, server.proc, server.log_path
        deadline = server.started_s + spec.ready_timeout_s
        while not spec.ready():
            if proc.poll() is not None:
                self.stop(spec.name)
                raise PipelineError(f"{spec.name!r} exited with code {proc.returncode} before it was ready; "
                                    f"log {str(log_path)!r}:\n{server.log_tail()}")
            if time.monotonic() > deadline:
                self.stop(spec.name)
                raise PipelineError(f"{spec.name!r} was not ready within {spec.ready_timeout_s:.0f} s; "
                                    f"log {str(log_path)!r}:\n{server.log_tail()}")
            time.sleep(0.2)
        server.ready_s = time.monotonic() - server.started_s
        log.info("%s ready in %.1f s (pid %d)", spec.name, server.ready_s, proc.pid)
        return server

    def stop(self, name: str) -> None:
        """Stop one server's whole process group: SIGTERM, then SIGKILL after its grace period."""
        server = self.servers.pop(name, None)
        if server is None:
            return
        stop_group(server.proc, server.spec.stop_timeout_s)
        self.stopped.append(server.pid)

    def stop_all(self) -> None:
        """Stop every running server, newest first; keeps going when one of them misbehaves."""
        for name in reversed(list(self.servers)):
            try:
                self.stop(name)
            except Exception:  # one stubborn server must not leave the others running
                log.exception("stopping %s failed", name)


def stop_group(proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    """SIGTERM ``proc``'s process group, wait up to ``timeout_s``, SIGKILL the group, reap the leader."""
    pgid = proc.pid  # start_new_session made the child its group's leader
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        log.warning("pid %d ignored SIGTERM for %.0f s; killing its group", proc.pid, timeout_s)
    # members of the group may outlive the leader (workers): the group gets SIGKILL either way
    deadline = time.monotonic() + 5
    while group_alive(pgid) and time.monotonic() < deadline:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        time.sleep(0.1)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


def group_alive(pgid: int) -> bool:
    """Whether any live (non-zombie) process is still in process group ``pgid``."""
    return bool(group_members(pgid))


def group_members(pgid: int) -> list[int]:
    """Pids of live (non-zombie) processes in group ``pgid`` (read from /proc)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # fields after the command (which may hold spaces) start after the last ')': state ppid pgrp ...
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


@contextlib.contextmanager
def terminate_on_sigterm() -> Iterator[None]:
    """Turn SIGTERM into ``SystemExit`` while inside, so ``with`` blocks clean up as on Ctrl-C (main thread only)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
