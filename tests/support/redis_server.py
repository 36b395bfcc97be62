"""A redis-server of a test's own on a loopback port (never the shared one on 6379), which the test may stop,
kill and start again on the same port."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path
from types import TracebackType

from .ports import free_port


class RedisServer:
    """``redis-server --port <port> --bind 127.0.0.1 --save "" --appendonly <yes|no> --dir <workdir>``.

    ``appendonly=True`` keeps the data across a restart (an append-only file in ``workdir``); ``password`` sets
    ``--requirepass``. ``start`` returns once the server answers PING.
    """

    def __init__(self, workdir: Path, port: int | None = None, *, appendonly: bool = False,
                 password: str | None = None) -> None:
        self.workdir, self.port = workdir, port or free_port()
        self.appendonly, self.password = appendonly, password
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def argv(self) -> list[str]:
        argv = [shutil.which("redis-server") or "redis-server", "--port", str(self.port), "--bind", "127.0.0.1"]
        if self.password is not None:
            argv += ["--requirepass", self.password]
        return [*argv, "--save", "", "--appendonly", "yes" if self.appendonly else "no", "--dir", str(self.workdir)]

    def start(self, timeout_s: float = 10.0) -> RedisServer:
        import redis

        self.proc = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis(port=self.port, password=self.password, socket_connect_timeout=0.2)
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"redis-server on port {self.port} exited with {self.proc.returncode}")
                try:
                    client.ping()
                    return self
                except redis.ConnectionError:
                    time.sleep(0.05)
        finally:
            client.close()
        self.kill()
        raise RuntimeError(f"redis-server on port {self.port} did not start within {timeout_s} s")

    def stop(self) -> None:
        """SIGTERM and wait (a clean shutdown: the append-only file is complete)."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.terminate()
            self.proc.wait(10)
            self.proc = None

    def kill(self) -> None:
        """SIGKILL and wait (a crash)."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None

    def __enter__(self) -> RedisServer:
        return self.start() if self.proc is None else self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
