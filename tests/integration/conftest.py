"""Real Prometheus and Alertmanager processes (Debian's packages; `make prometheus` installs them).

Each is started on a free 127.0.0.1 port with a generated config and a storage folder under the
test's tmp_path, and stopped (SIGTERM, then SIGKILL) when the test ends.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.support import free_port

ALERTMANAGER = shutil.which("prometheus-alertmanager") or "/usr/bin/prometheus-alertmanager"
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"


@dataclass
class Process:
    url: str
    port: int
    proc: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def _wait_ready(p: Process, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if p.proc.poll() is not None:
            raise RuntimeError(f"{p.proc.args[0]} exited with {p.proc.returncode}: {p.log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{p.url}/-/ready", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    p.stop()
    raise RuntimeError(f"{p.proc.args[0]} not ready in {timeout_s} s: {p.log.read_text()[-2000:]}")


def start_alertmanager(folder: Path, port: int | None = None) -> Process:
    """Alertmanager with one route to a receiver that notifies nobody (the API is what tests read)."""
    assert Path(ALERTMANAGER).exists(), "prometheus-alertmanager is missing: `make prometheus` installs it"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "alertmanager.yml").write_text("route:\n  receiver: blackhole\nreceivers:\n  - name: blackhole\n")
    port = port or free_port()
    log = folder / "alertmanager.log"
    proc = subprocess.Popen(
        [ALERTMANAGER, f"--config.file={folder / 'alertmanager.yml'}", f"--storage.path={folder / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
        stdout=log.open("wb"), stderr=subprocess.STDOUT)
    p = Process(f"http://127.0.0.1:{port}", port, proc, log)
    _wait_ready(p)
    return p


def start_prometheus(folder: Path, targets: list[str], *, rule_files: tuple[Path, ...] = (),
                     scrape_s: int = 1) -> Process:
    """Prometheus scraping ``targets`` (``host:port``) every ``scrape_s`` seconds as job ``mlops-serving``."""
    assert Path(PROMETHEUS).exists(), "prometheus is missing: `make prometheus` installs it"
    folder.mkdir(parents=True, exist_ok=True)
    rules = "".join(f"  - {r}\n" for r in rule_files)
    (folder / "prometheus.yml").write_text(
        f"global:\n  scrape_interval: {int(scrape_s)}s\n  evaluation_interval: {int(scrape_s)}s\n"
        + (f"rule_files:\n{rules}" if rules else "")
        + "scrape_configs:\n  - job_name: mlops-serving\n    static_configs:\n"
        + f"      - targets: [{', '.join(targets)}]\n")
    port = free_port()
    log = folder / "prometheus.log"
    proc = subprocess.Popen(
        [PROMETHEUS, f"--config.file={folder / 'prometheus.yml'}", f"--storage.tsdb.path={folder / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1h"],
        stdout=log.open("wb"), stderr=subprocess.STDOUT)
    p = Process(f"http://127.0.0.1:{port}", port, proc, log)
    _wait_ready(p)
    return p


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[Process]:
    """A real Alertmanager on a free port."""
    p = start_alertmanager(tmp_path / "alertmanager")
    yield p
    p.stop()


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Callable[..., Process]]:
    """Start real Prometheus processes (``prometheus(targets, rule_files=..., scrape_s=...)``); all stop at the end."""
    started: list[Process] = []

    def start(targets: list[str], **kw: object) -> Process:
        p = start_prometheus(tmp_path / f"prometheus-{len(started)}", targets, **kw)  # type: ignore[arg-type]
        started.append(p)
        return p

    yield start
    for p in started:
        p.stop()


@pytest.fixture(scope="session", name="start_prometheus")
def start_prometheus_fixture() -> Callable[..., Process]:
    """:func:`start_prometheus` for module-scoped fixtures (the caller stops what it starts)."""
    return start_prometheus
