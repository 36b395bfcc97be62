"""`mlops doctor` as a newcomer runs it, against this machine's real Redis and PostgreSQL and ports nothing uses.

What each item should say comes from outside the command: a port `free_port()` just handed back (nothing
listens), the real servers the suite's conftest connects to, `shutil.which` for the installed programs.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import POSTGRES_URL, REDIS_URL
from tests.support.ports import free_port

ROOT = Path(__file__).resolve().parents[3]
MLOPS = [sys.executable, "-m", "mlops_cli"]


def run(args: list[str]) -> subprocess.CompletedProcess[str]:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("MLOPS")}, "COLUMNS": "250"}
    return subprocess.run([*MLOPS, "doctor", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120, check=False)


def doc(args: list[str]) -> tuple[int, dict[str, Any]]:
    res = run(["--json", *args])
    assert res.stdout, res.stderr
    return res.returncode, json.loads(res.stdout)


def item(payload: dict[str, Any], prefix: str) -> dict[str, Any]:
    found = [i for i in payload["items"] if i["name"].startswith(prefix)]
    assert len(found) == 1, [i["name"] for i in payload["items"]]
    return found[0]


def test_this_machine_is_ready_and_each_item_says_what_it_found() -> None:
    code, payload = doc(["--redis-url", REDIS_URL, "--postgres-url", POSTGRES_URL])
    assert code == 0, payload
    assert payload["ready"] == {"demo": True, "test": True, "rehearse": True}, payload
    assert item(payload, "Redis on 127.0.0.1:6379")["found"] == "answers PING with '+PONG'"
    pg = item(payload, "PostgreSQL on 127.0.0.1:5432")
    assert pg["ok"] and pg["found"].startswith("database 'test' as 'postgres'")
    assert item(payload, "Java")["ok"] == (shutil.which("java") is not None)
    assert item(payload, "Chromium")["found"] == shutil.which("chromium")
    assert item(payload, "Prometheus tools")["ok"] == all(
        shutil.which(p) for p in ("prometheus", "promtool", "prometheus-alertmanager", "prometheus-node-exporter",
                                  "redis-server"))
    free = shutil.disk_usage(ROOT).free / 2**30
    assert item(payload, "free disk")["found"].startswith(f"{free:.1f} GiB free")
    assert {tuple(i["needed_for"]) for i in payload["items"] if i["name"].startswith(("Python", "the venv"))} == {
        ("demo", "test", "rehearse")}


def test_servers_nobody_runs_are_missing_with_their_fix_in_two_lines() -> None:
    redis_port, pg_port = free_port(), free_port()
    args = ["--redis-url", f"redis://127.0.0.1:{redis_port}/0",
            "--postgres-url", f"postgresql://postgres@127.0.0.1:{pg_port}/test"]
    code, payload = doc(args)
    assert code == 0  # the demo needs neither: it runs on SQLite
    assert payload["ready"] == {"demo": True, "test": False, "rehearse": False}
    redis = item(payload, f"Redis on 127.0.0.1:{redis_port}")
    assert not redis["ok"] and redis["found"].startswith(f"nothing answers on 127.0.0.1:{redis_port}")
    assert redis["fix"].startswith(f"redis-server --daemonize yes --bind 127.0.0.1 --port {redis_port} ")
    pg = item(payload, f"PostgreSQL on 127.0.0.1:{pg_port}")
    assert not pg["ok"] and "apt-get install postgresql" in pg["fix"]

    text = run(args)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    at = next(n for n, line in enumerate(lines) if line.startswith(f"MISSING Redis on 127.0.0.1:{redis_port}: "))
    assert lines[at + 1].strip().startswith("needed for: make test; fix: redis-server --daemonize yes")
    assert lines[-1] == "ready: make demo yes, make test no, make rehearse no"
    assert len(lines) == 2 * len(payload["items"]) + 1


def test_a_port_answered_by_the_other_server_or_a_missing_database_is_missing() -> None:
    _, payload = doc(["--redis-url", "redis://127.0.0.1:5432/0",
                      "--postgres-url", "postgresql://postgres@127.0.0.1:6379/test"])
    assert payload["ready"]["test"] is False
    assert item(payload, "Redis on 127.0.0.1:5432")["found"].startswith("something listens but is not Redis")
    assert item(payload, "PostgreSQL on 127.0.0.1:6379")["found"].startswith("something listens but is not PostgreSQL")
    _, payload = doc(["--postgres-url", "postgresql://postgres@127.0.0.1:5432/no_such_db_for_doctor"])
    pg = item(payload, "PostgreSQL on 127.0.0.1:5432")
    assert not pg["ok"] and 'database "no_such_db_for_doctor" does not exist' in pg["found"]
    assert pg["fix"] == "psql -h 127.0.0.1 -p 5432 -U postgres -c 'CREATE DATABASE no_such_db_for_doctor'"


def test_what_the_demo_lacks_exits_1_and_a_busy_serve_port_is_only_a_note() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code, payload = doc(["--min-free-gib", "1000000", "--serve-port", str(port)])
    assert code == 1
    assert payload["ready"]["demo"] is False
    disk = item(payload, "free disk")
    assert not disk["ok"] and "make clean" in disk["fix"]
    serve = item(payload, f"port {port}")
    assert not serve["ok"] and serve["needed_for"] == [] and serve["found"].startswith("in use")


def test_bad_flags_are_refused_naming_the_value() -> None:
    res = run(["--redis-url", "http://127.0.0.1:6379"])
    assert res.returncode == 2
    assert "'http://127.0.0.1:6379' is not a redis URL; expected e.g. redis://127.0.0.1:6379/0" in res.stderr
    res = run(["--postgres-url", "postgresql://127.0.0.1:notaport/test"])
    assert res.returncode == 2 and "notaport" in res.stderr and "--postgres-url" in res.stderr
    for args, said in ((["--min-free-gib", "-1"], "--min-free-gib"), (["--serve-port", "70000"], "--serve-port"),
                       (["--bogus"], "No such option: --bogus")):
        res = run(args)
        assert res.returncode == 2 and said in res.stderr, (args, res.stderr)
        assert res.stdout == ""
