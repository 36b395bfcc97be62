"""The rehearsal's process harness: real child processes, stopped with everything they spawned, on every exit path."""

from __future__ import annotations

import json
import os
import shutil
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest

from mlops_pipeline.errors import PipelineError
from mlops_pipeline.servers import ProcessHarness, ServerSpec, free_port, http_ready, tcp_ready

pytestmark = pytest.mark.integration

# An HTTP server that first forks a sleeping grandchild (like gunicorn's workers), prints its pid, and, with
# IGNORE_TERM set, ignores SIGTERM (a stuck server).
SERVER = textwrap.dedent("""
    import http.server, os, signal, subprocess, sys
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    print("grandchild", child.pid, flush=True)
    if os.environ.get("IGNORE_TERM"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    handler = http.server.SimpleHTTPRequestHandler
    http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), handler).serve_forever()
""")


def _alive(pid: int) -> bool:
    """A live process (a zombie waiting for its parent to reap it does not count)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def _grandchild(log: Path) -> int:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for line in log.read_text().splitlines():
            if line.startswith("grandchild "):
                return int(line.split()[1])
        time.sleep(0.1)
    raise AssertionError(f"no grandchild pid in {log}")


def _spec(name: str, tmp_path: Path, *, ignore_term: bool = False) -> ServerSpec:
    port = free_port()
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    return ServerSpec(name, [sys.executable, str(script), str(port)], ready=http_ready(f"http://127.0.0.1:{port}/"),
                      env={"IGNORE_TERM": "1"} if ignore_term else {}, cwd=tmp_path, ready_timeout_s=30,
                      stop_timeout_s=2)


def _start_three_then_fail(tmp_path: Path, redis: str, seen: dict[str, object]) -> None:
    redis_port = free_port()
    with ProcessHarness(tmp_path / "logs") as harness:
        seen["harness"] = harness
        web = harness.start(_spec("web", tmp_path))
        stuck = harness.start(_spec("stuck", tmp_path, ignore_term=True))
        db = harness.start(ServerSpec("redis", [redis, "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
                                                "--appendonly", "no"], ready=tcp_ready(redis_port)))
        seen["pids"] = pids = [web.pid, stuck.pid, db.pid, _grandchild(web.log_path), _grandchild(stuck.log_path)]
        assert all(_alive(p) for p in pids)
        assert httpx.get(f"http://127.0.0.1:{web.spec.argv[-1]}/").status_code == 200
        raise RuntimeError("a step failed")


def test_an_exception_inside_stops_every_server_and_what_they_spawned(tmp_path: Path) -> None:
    redis = shutil.which("redis-server")
    assert redis, "redis-server is missing (Debian package redis-server)"
    seen: dict[str, object] = {}
    with pytest.raises(RuntimeError, match="a step failed"):
        _start_three_then_fail(tmp_path, redis, seen)
    pids = seen["pids"]
    assert isinstance(pids, list) and len(pids) == 5
    assert [p for p in pids if _alive(p)] == []
    harness = seen["harness"]
    assert isinstance(harness, ProcessHarness)
    assert sorted(harness.stopped) == sorted(pids[:3])
    assert (tmp_path / "logs" / "redis.log").read_text().startswith(f"$ {redis}")


def test_a_server_that_exits_before_ready_is_reported_with_its_log(tmp_path: Path) -> None:
    spec = ServerSpec("broken", [sys.executable, "-c", "import sys; print('bad flag --nope'); sys.exit(3)"],
                      ready=tcp_ready(free_port()), ready_timeout_s=30)
    with ProcessHarness(tmp_path / "logs") as harness, pytest.raises(PipelineError) as err:
        harness.start(spec)
    assert "'broken' exited with code 3 before it was ready" in str(err.value)
    assert "bad flag --nope" in str(err.value)
    assert harness.servers == {}


def test_a_server_never_ready_is_stopped_after_its_timeout(tmp_path: Path) -> None:
    spec = ServerSpec("silent", [sys.executable, "-c", "import time; time.sleep(600)"], ready=tcp_ready(free_port()),
                      ready_timeout_s=1.5)
    with ProcessHarness(tmp_path / "logs") as harness:
        with pytest.raises(PipelineError, match="'silent' was not ready within 2 s"):
            harness.start(spec)
        pid = harness.stopped[-1]
    assert not _alive(pid)


def _start_then_interrupt(tmp_path: Path, pids: list[int]) -> None:
    with ProcessHarness(tmp_path / "logs") as harness:
        web = harness.start(_spec("web", tmp_path))
        pids += [web.pid, _grandchild(web.log_path)]
        raise KeyboardInterrupt


def test_ctrl_c_stops_the_servers_too(tmp_path: Path) -> None:
    pids: list[int] = []
    with pytest.raises(KeyboardInterrupt):
        _start_then_interrupt(tmp_path, pids)
    assert len(pids) == 2
    assert [p for p in pids if _alive(p)] == []
    assert os.getpgid(0) not in pids  # the harness never signals the test's own group


def test_a_server_does_not_inherit_what_it_must_not_hold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The loop's secrets (here two stand-ins) reach a server only where its spec sets them again."""
    monkeypatch.setenv("LOOP_SECRET", "writer-password")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "delivery-password")
    port = free_port()
    script = tmp_path / "env_server.py"
    script.write_text("import json, os, sys, socket\n"
                      "open(sys.argv[2], 'w').write(json.dumps(dict(os.environ)))\n"
                      "s = socket.socket(); s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(); s.accept()\n")
    seen = tmp_path / "env.json"
    with ProcessHarness(tmp_path / "logs") as harness:
        harness.start(ServerSpec("env", [sys.executable, str(script), str(port), str(seen)], ready=tcp_ready(port),
                                 env={"LOOP_SECRET": "reader-password"}, ready_timeout_s=30, stop_timeout_s=2,
                                 unset=("LOOP_SECRET", "MLFLOW_TRACKING_PASSWORD")))
    env = json.loads(seen.read_text())
    assert env["LOOP_SECRET"] == "reader-password" and "MLFLOW_TRACKING_PASSWORD" not in env
    assert env["PATH"] == os.environ["PATH"]  # the rest is inherited
