"""A Redis Cluster of a test's own: three :class:`RedisServer` nodes (masters, no replicas) on loopback ports, joined
by ``redis-cli --cluster create``; optionally over TLS and with a password and ACL users on every node."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from .redis_server import RedisServer
from .tls import TlsFiles


class RedisClusterServers:
    """``nodes`` cluster nodes under ``workdir``; ``start`` returns once every node reports ``cluster_state:ok``."""

    def __init__(self, workdir: Path, nodes: int = 3, *, password: str | None = None, tls: TlsFiles | None = None,
                 users: Sequence[str] = ()) -> None:
        self.password, self.tls = password, tls
        self.nodes = []
        for i in range(nodes):
            folder = workdir / f"node{i}"
            folder.mkdir(parents=True, exist_ok=True)
            self.nodes.append(RedisServer(folder, password=password, tls=tls, users=users, cluster=True))

    @property
    def url(self) -> str:
        """The first node's URL (a startup node: the client discovers the others)."""
        return self.nodes[0].url

    def start(self, timeout_s: float = 30.0) -> RedisClusterServers:
        import redis

        try:
            for node in self.nodes:
                node.start()
            argv = [shutil.which("redis-cli") or "redis-cli", "--cluster", "create",
                    *(f"127.0.0.1:{n.port}" for n in self.nodes), "--cluster-replicas", "0", "--cluster-yes"]
            if self.password is not None:
                argv += ["-a", self.password, "--no-auth-warning"]
            if self.tls is not None:
                argv += ["--tls", "--cacert", str(self.tls.ca)]
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"redis-cli --cluster create failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
            deadline = time.monotonic() + timeout_s
            for node in self.nodes:
                client = redis.Redis(**node.client_kwargs(), socket_connect_timeout=1)
                try:
                    while client.execute_command("CLUSTER INFO").get("cluster_state") != "ok":
                        if time.monotonic() > deadline:
                            raise RuntimeError(f"cluster node {node.port} not ok within {timeout_s} s")
                        time.sleep(0.1)
                finally:
                    client.close()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> RedisClusterServers:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
