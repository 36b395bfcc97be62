"""Free loopback ports, and waiting until a process listens on one."""

from __future__ import annotations

import socket
import subprocess
import time


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[bytes], what: str, timeout_s: float = 60.0) -> None:
    """Return once ``port`` accepts a TCP connection; fail naming ``what`` when ``proc`` exits or time runs out."""
    deadline = time.monotonic() + timeout_s
    while True:
        assert proc.poll() is None, f"{what} exited with {proc.returncode}"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            assert time.monotonic() < deadline, f"{what} did not listen on {port}"
            time.sleep(0.1)
