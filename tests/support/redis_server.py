"""A redis-server of a test's own on a loopback port (never the shared one on 6379), which the test may stop,
kill and start again on the same port; optionally TLS only, with ACL users, or a node of a Redis Cluster
(:mod:`tests.support.redis_cluster` makes three of them one cluster)."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from .ports import free_port
from .tls import TlsFiles


class RedisServer:
    """``redis-server --port <port> --bind 127.0.0.1 --save "" --appendonly <yes|no> --dir <workdir>``.

    ``appendonly=True`` keeps the data across a restart (an append-only file in ``workdir``); ``password`` sets
    ``--requirepass`` (the ``default`` user's password). ``aclfile`` loads ACL users (``--aclfile``). ``tls``: the
    port speaks TLS only (``--port 0 --tls-port <port>``, clients not asked for certificates; the cluster bus too).
    ``users``: ACL rules, one ``--user`` each (``"serving on >secret ~* +@read"``). ``cluster``: a Redis Cluster
    node (its ``nodes.conf`` in ``workdir``). ``start`` returns once the server answers PING (with an ACL file, once
    it answers at all: its default user may be off).
    """

    def __init__(self, workdir: Path, port: int | None = None, *, appendonly: bool = False,
                 password: str | None = None, aclfile: Path | None = None, tls: TlsFiles | None = None,
                 users: Sequence[str] = (), cluster: bool = False) -> None:
        self.workdir, self.port = workdir, port or free_port()
        self.appendonly, self.password, self.aclfile = appendonly, password, aclfile
        self.tls, self.users, self.cluster = tls, tuple(users), cluster
        self.bus_port: int | None = None
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"{'rediss' if self.tls else 'redis'}://127.0.0.1:{self.port}/0"

    @property
    def argv(self) -> list[str]:
        argv = [shutil.which("redis-server") or "redis-server", "--bind", "127.0.0.1"]
        if self.tls is None:
            argv += ["--port", str(self.port)]
        else:
            argv += ["--port", "0", "--tls-port", str(self.port), "--tls-cert-file", str(self.tls.cert),
                     "--tls-key-file", str(self.tls.key), "--tls-ca-cert-file", str(self.tls.ca),
                     "--tls-auth-clients", "no"]
        if self.password is not None:
            argv += ["--requirepass", self.password]
        if self.aclfile is not None:
            argv += ["--aclfile", str(self.aclfile)]
        for rule in self.users:
            argv += ["--user", *rule.split()]
        if self.cluster:
            # the bus port given: by default it is port + 10000, past 65535 for a high free port
            self.bus_port = self.bus_port or free_port()
            argv += ["--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{self.port}.conf",
                     "--cluster-port", str(self.bus_port), "--cluster-node-timeout", "5000"]
            if self.tls is not None:
                argv += ["--tls-cluster", "yes"]
        return [*argv, "--save", "", "--appendonly", "yes" if self.appendonly else "no", "--dir", str(self.workdir)]

    def client_kwargs(self) -> dict[str, Any]:
        """redis-py keywords reaching this server as its ``default`` user (TLS trusting the test CA)."""
        kwargs: dict[str, Any] = {"host": "127.0.0.1", "port": self.port, "password": self.password}
        if self.tls is not None:
            kwargs |= {"ssl": True, "ssl_ca_certs": str(self.tls.ca)}
        return kwargs

    def start(self, timeout_s: float = 10.0) -> RedisServer:
        import redis

        self.proc = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis(**self.client_kwargs(), socket_connect_timeout=0.2)
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"redis-server on port {self.port} exited with {self.proc.returncode}")
                try:
                    client.ping()
                    return self
                except redis.AuthenticationError:
                    if self.aclfile is not None:
                        return self  # it answered: NOAUTH from a default user that is off
                    raise
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
