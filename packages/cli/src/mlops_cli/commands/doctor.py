"""``mlops doctor``: what this machine has and lacks for ``make demo``, ``make test`` and ``make rehearse``.

Two lines per item: what was found, then what it is needed for and, when it is missing, the command that fixes it
(a Makefile target or a Debian package). Exit 0 when everything ``make demo`` needs is there, 1 otherwise;
``--json`` prints one document for machines. It only looks: it starts, installs and writes nothing.
"""

from __future__ import annotations

import os
import shutil
import socket
import struct
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

import typer

from mlops_cli.common import JsonOpt, print_json

TARGETS = ("demo", "test", "rehearse")
REDIS_DEFAULT = "redis://127.0.0.1:6379/0"
POSTGRES_DEFAULT = "postgresql://postgres@127.0.0.1:5432/test"
SERVE_PORT_DEFAULT = 8080  # serving.port of the local profile
VENV_GIB = 5.0  # what `make setup` installs into a new .venv (torch CPU and the rest: ~4.1 GiB)
# What `make prometheus` installs (Debian's paths), and `make browser` / `make java`.
REHEARSAL_BINARIES = ("/usr/bin/prometheus", "/usr/bin/promtool", "/usr/bin/prometheus-alertmanager",
                      "/usr/bin/prometheus-node-exporter")


@dataclass(frozen=True)
class Item:
    """One thing checked: ``ok`` when it is there and works, ``fix`` the command that makes it so."""

    name: str
    ok: bool
    found: str
    needed_for: tuple[str, ...]
    fix: str | None = None

    def lines(self) -> list[str]:
        mark = "ok     " if self.ok else "MISSING" if self.needed_for else "note   "
        needed = ", ".join(f"make {t}" for t in self.needed_for) or "nothing the three targets run"
        second = f"        needed for: {needed}"
        if not self.ok and self.fix:
            second += f"; fix: {self.fix}"
        return [f"{mark} {self.name}: {self.found}", second]


def _repo_root() -> Path:
    from mlops_config import find_config_dir

    try:
        return find_config_dir().parent
    except Exception:  # run outside a checkout: the folder it was run in
        return Path.cwd()


def _python(root: Path) -> Item:
    venv_python = root / ".venv" / "bin" / "python"
    which = shutil.which("python3.11")
    here = f"{sys.version_info.major}.{sys.version_info.minor}.{sys.version_info.micro}"
    if which:
        return Item("Python 3.11", True, f"python3.11 at {which} (this command runs on {here})", TARGETS)
    if venv_python.exists() and sys.version_info[:2] == (3, 11):
        return Item("Python 3.11", True, f"no python3.11 on PATH; .venv runs {here}", TARGETS)
    return Item("Python 3.11", False, f"no python3.11 on PATH (this command runs on {here}); `make setup` "
                "creates .venv with it", TARGETS,
                "apt-get install python3.11 python3.11-venv (or `pyenv install 3.11`; or make PYTHON=<a 3.11>)")


def _venv(root: Path) -> Item:
    venv = root / ".venv"
    mlops = venv / "bin" / "mlops"
    if not mlops.exists():
        return Item("the venv (.venv)", False, f"{mlops} is missing", TARGETS,
                    "make setup (make demo/test/rehearse run it first; it needs the network once)")
    stamp = venv / ".setup-stamp"
    inputs = [root / "constraints.txt", root / "requirements.lock", root / "pyproject.toml",
              *sorted(root.glob("packages/*/pyproject.toml"))]
    newer = [str(p.relative_to(root)) for p in inputs if p.exists() and stamp.exists()
             and p.stat().st_mtime > stamp.stat().st_mtime]
    if not stamp.exists():
        state = "set up by hand (no .setup-stamp): the first make target reinstalls from the lock"
    elif newer:
        state = f"older than {', '.join(newer[:3])}: the next make target reinstalls first (network)"
    else:
        state = "set up from the current lock"
    link = f"symlink to {venv.resolve()}, " if venv.is_symlink() else ""
    return Item("the venv (.venv)", True, f"{venv} ({link}{state})", TARGETS)


def _disk(root: Path, min_free_gib: float) -> Item:
    need = min_free_gib + (0.0 if (root / ".venv" / "bin" / "mlops").exists() else VENV_GIB)
    free = shutil.disk_usage(root).free / 2**30
    return Item("free disk", free >= need, f"{free:.1f} GiB free on {root}'s filesystem; needs {need:.1f} GiB "
                "(data, models, MLflow, DVC cache" + (", and a new .venv" if need > min_free_gib else "") + ")",
                TARGETS, "free space on that filesystem (`make clean` drops .venv, .mlops, data and reports)")


def _connect(host: str, port: int, timeout: float) -> socket.socket | str:
    try:
        return socket.create_connection((host, port), timeout=timeout)
    except OSError as exc:
        return f"nothing answers on {host}:{port} ({exc.strerror or exc})"


def _redis(url: str) -> Item:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 6379
    fix = (f"redis-server --daemonize yes --bind {host} --port {port} --save '' --appendonly no "
           "(apt-get install redis-server, or `make prometheus`; `bash .ci/run` starts it)")
    conn = _connect(host, port, 2.0)
    if isinstance(conn, str):
        return Item(f"Redis on {host}:{port}", False, conn, ("test",), fix)
    with conn:
        try:
            conn.sendall(b"PING\r\n")
            reply = conn.recv(128).decode("latin-1").strip()
        except OSError as exc:
            reply = f"no reply ({exc})"
    if reply == "+PONG" or reply.startswith("-NOAUTH"):
        return Item(f"Redis on {host}:{port}", True, f"answers PING with {reply!r}", ("test",))
    return Item(f"Redis on {host}:{port}", False, f"something listens but is not Redis: PING got {reply[:60]!r}",
                ("test",), f"free the port, then {fix}")


def _postgres(url: str) -> Item:
    """A PostgreSQL startup message as the tests connect (user, database, trust auth); no driver needed."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 5432
    user, db = parts.username or "postgres", (parts.path.lstrip("/") or "postgres")
    name, needed = f"PostgreSQL on {host}:{port}", ("test", "rehearse")
    create = f"psql -h {host} -p {port} -U {user} -c 'CREATE DATABASE {db}'"
    fix = f"apt-get install postgresql, then pg_ctlcluster <version> main start and {create} (`bash .ci/run` does both)"
    conn = _connect(host, port, 3.0)
    if isinstance(conn, str):
        return Item(name, False, conn, needed, fix)
    with conn:
        body = struct.pack("!i", 196608) + b"".join(f"{k}\0{v}\0".encode() for k, v in
                                                     (("user", user), ("database", db))) + b"\0"
        try:
            conn.sendall(struct.pack("!i", len(body) + 4) + body)
            messages = _pg_messages(conn)
            conn.sendall(b"X\0\0\0\x04")
        except (OSError, ValueError) as exc:
            return Item(name, False, f"something listens but is not PostgreSQL: no reply to a startup message "
                        f"({exc})", needed, f"free the port, then {fix}")
    kind, payload = messages[-1]
    if kind == b"E":
        fields = dict((f[:1].decode(), f[1:].decode("utf-8", "replace")) for f in payload.split(b"\0") if f)
        return Item(name, False, f"the server refuses {user!r}@{db!r}: {fields.get('M', 'error')}", needed,
                    create if fields.get("C") == "3D000" else fix)  # 3D000: no such database
    if kind == b"Z":
        return Item(name, True, f"database {db!r} as {user!r}: trust auth, ready for queries", needed)
    if kind == b"R":
        code = struct.unpack("!i", payload[:4])[0]
        return Item(name, True, f"database {db!r} as {user!r}: asks for a password (auth code {code})", needed)
    return Item(name, False, f"something listens but is not PostgreSQL (replied {kind!r})", needed,
                f"free the port, then {fix}")


def _pg_messages(conn: socket.socket) -> list[tuple[bytes, bytes]]:
    """The server's messages up to the first that decides: ReadyForQuery, an error, or a password request."""
    buf, out = b"", []
    while True:
        while len(buf) < 5 or len(buf) < 1 + struct.unpack("!i", buf[1:5])[0]:
            chunk = conn.recv(4096)
            if not chunk:
                raise ValueError(f"the connection closed after {len(buf)} bytes")
            buf += chunk
            if buf[:1] not in b"RSKZENv":
                return [(buf[:1], b"")]
        size = struct.unpack("!i", buf[1:5])[0]
        kind, payload, buf = buf[:1], buf[5:1 + size], buf[1 + size:]
        out.append((kind, payload))
        if kind in (b"Z", b"E") or (kind == b"R" and struct.unpack("!i", payload[:4])[0] != 0):
            return out


def _java() -> Item:
    java = shutil.which("java")
    if java is None:
        return Item("Java (Spark)", False, "no java on PATH", ("test", "rehearse"), "make java")
    proc = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30, check=False)
    first = (proc.stderr or proc.stdout).strip().splitlines()[:1]
    said = first[0] if first else f"exit {proc.returncode}"
    return Item("Java (Spark)", proc.returncode == 0, f"{java}: {said}", ("test", "rehearse"), "make java")


def _prometheus() -> Item:
    have = [*REHEARSAL_BINARIES, shutil.which("redis-server") or "redis-server"]
    missing = [p for p in have if not (os.path.isabs(p) and os.access(p, os.X_OK))]
    found = "prometheus, promtool, alertmanager, node exporter and redis-server installed" if not missing else \
        f"missing {', '.join(Path(m).name for m in missing)}"
    return Item("Prometheus tools", not missing, found, ("test", "rehearse"),
                "make prometheus (apt-get install prometheus prometheus-alertmanager prometheus-node-exporter "
                "redis-server)")


def _chromium() -> Item:
    chromium = shutil.which("chromium")
    return Item("Chromium (the report's browser test)", chromium is not None,
                chromium or "no chromium on PATH", ("test",), "make browser (apt-get install chromium)")


def _serve_port(port: int) -> Item:
    conn = _connect("127.0.0.1", port, 0.5)
    taken = not isinstance(conn, str)
    if not isinstance(conn, str):
        conn.close()
    return Item(f"port {port} (serving.port)", not taken,
                ("in use: `mlops serve` without --port cannot bind it" if taken else "free for `mlops serve`")
                + "; the demo and the rehearsal pick free ports for their own servers", (),
                f"stop what listens on {port} (`ss -ltnp 'sport = :{port}'`) or `mlops serve --port <free>`")


def diagnose(root: Path, *, redis_url: str, postgres_url: str, min_free_gib: float, serve_port: int) -> list[Item]:
    """Every item, in the order a newcomer fixes them."""
    return [_python(root), _venv(root), _disk(root, min_free_gib), _redis(redis_url), _postgres(postgres_url),
            _java(), _prometheus(), _chromium(), _serve_port(serve_port)]


def _url(value: str, schemes: tuple[str, ...], example: str, option: str) -> str:
    parts = urlsplit(value)
    try:
        port = parts.port
    except ValueError:
        port = -1
    if parts.scheme not in schemes or not parts.hostname or port == -1:
        raise typer.BadParameter(f"{value!r} is not a {'/'.join(schemes)} URL; expected e.g. {example}",
                                 param_hint=option)
    return value


def doctor(
    as_json: JsonOpt = False,
    redis_url: Annotated[str | None, typer.Option(
        "--redis-url", help=f"The tests' Redis; default $MLOPS_TEST_REDIS_URL or {REDIS_DEFAULT}.")] = None,
    postgres_url: Annotated[str | None, typer.Option(
        "--postgres-url", help=f"The tests' PostgreSQL; default $MLOPS_TEST_POSTGRES_URL or {POSTGRES_DEFAULT}.")]
    = None,
    min_free_gib: Annotated[float, typer.Option(
        "--min-free-gib", min=0.0, help="Free disk the demo needs besides a new .venv.")] = 2.0,
    serve_port: Annotated[int, typer.Option(
        "--serve-port", min=1, max=65535, help="The port `mlops serve` binds by default.")] = SERVE_PORT_DEFAULT,
) -> None:
    """What this machine has and lacks for `make demo`, `make test` and `make rehearse`, with the fix for each."""
    redis = _url(redis_url or os.environ.get("MLOPS_TEST_REDIS_URL") or REDIS_DEFAULT, ("redis",),
                 REDIS_DEFAULT, "--redis-url")
    postgres = _url(postgres_url or os.environ.get("MLOPS_TEST_POSTGRES_URL") or POSTGRES_DEFAULT,
                    ("postgresql", "postgres"), POSTGRES_DEFAULT, "--postgres-url")
    root = _repo_root()
    items = diagnose(root, redis_url=redis, postgres_url=postgres, min_free_gib=min_free_gib,
                     serve_port=serve_port)
    ready = {t: all(i.ok for i in items if t in i.needed_for) for t in TARGETS}
    if as_json:
        print_json({"root": str(root), "ready": ready,
                    "items": [{**asdict(i), "needed_for": list(i.needed_for)} for i in items]})
    else:
        for item in items:
            sys.stdout.write("\n".join(item.lines()) + "\n")
        sys.stdout.write("ready: " + ", ".join(f"make {t} {'yes' if ok else 'no'}" for t, ok in ready.items()) + "\n")
    raise typer.Exit(0 if ready["demo"] else 1)
