"""Servers of a chaos scenario's own, to stop and restart at will: a PostgreSQL cluster (``initdb`` + ``pg_ctl``
in a temporary folder, a free port) and an ``mlflow server`` on it, started as the platform starts it
(``mlops_core.tracking_server``). Never the shared PostgreSQL on 5432: stopping that would break everyone.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import quote

from .harness import free_port


def _pg_bin() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if found:
        return found[-1].parent
    which = shutil.which("initdb")
    if which is None:
        raise RuntimeError("PostgreSQL's server binaries (initdb, pg_ctl) are missing: apt package postgresql")
    return Path(which).parent


class OwnPostgres:
    """A private PostgreSQL cluster. Local (socket) logins are trusted; TCP logins need a password
    (``scram-sha-256``), so a password changed on its way is refused. ``role``/``password`` own the databases
    this cluster hands out (:meth:`create_database`)."""

    def __init__(self, role: str = "mlops", password: str = "chaos-password") -> None:
        self.role, self.password = role, password
        # Not under pytest's tmp folder: that is private to root, and the server runs as the postgres user.
        self.base = Path(tempfile.mkdtemp(prefix="mlops-chaos-pg-"))
        self.data, self.sock = self.base / "data", self.base / "sock"
        self.sock.mkdir()
        self.as_pg = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self.as_pg:
            shutil.chown(self.base, "postgres")
            shutil.chown(self.sock, "postgres")
        self.bin = _pg_bin()
        self.port = free_port()
        subprocess.run([*self.as_pg, str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres",
                        "--auth-local=trust", "--auth-host=scram-sha-256", "--no-sync"],
                       check=True, capture_output=True, timeout=300)
        self.start()
        self._admin(f"CREATE ROLE \"{role}\" LOGIN PASSWORD %s", (password,))

    def url(self, db: str, driver: str = "postgresql+psycopg2") -> str:
        """SQLAlchemy URL of ``db``: user and password percent-encoded, so any password survives."""
        return f"{driver}://{quote(self.role, safe='')}:{quote(self.password, safe='')}@127.0.0.1:{self.port}/{db}"

    def create_database(self, db: str) -> str:
        self._admin(f'CREATE DATABASE "{db}" OWNER "{self.role}"')
        return self.url(db)

    def _admin(self, sql: str, args: tuple[str, ...] = ()) -> None:
        import psycopg2

        conn = psycopg2.connect(host=str(self.sock), port=self.port, user="postgres", dbname="postgres")
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                cur.execute(sql, args)
        finally:
            conn.close()

    def start(self) -> None:
        subprocess.run([*self.as_pg, str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.base / "log"),
                        "-w", "-t", "120", "-o",
                        f"-p {self.port} -k {self.sock} -c listen_addresses=127.0.0.1 -c fsync=off",
                        "start"], check=True, capture_output=True, timeout=180)

    def stop(self, mode: str = "fast") -> None:
        """``fast``: every session cut, a clean shutdown; ``immediate``: the crash of the server (recovery on
        the next start)."""
        subprocess.run([*self.as_pg, str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop"],
                       capture_output=True, timeout=120)

    def close(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.base, ignore_errors=True)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return int(resp.status) == 200
    except (OSError, urllib.error.HTTPError):
        return False


class OwnMlflow:
    """``mlflow server`` on an :class:`OwnPostgres` database (tracking store; with ``auth``, the basic-auth app
    and its users in a second database), started with the platform's own command line and env."""

    def __init__(self, pg: OwnPostgres, workdir: Path, db: str, *, admin: tuple[str, str] | None = None) -> None:
        from mlops_core.tracking_server import server_command, server_env, write_auth_config

        self.workdir, self.port = workdir, free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = f"http://127.0.0.1:{self.port}"
        workdir.mkdir(parents=True, exist_ok=True)
        store = pg.create_database(db)
        self.cmd = server_command(artifacts_destination=(workdir / "artifacts").as_uri(), host="127.0.0.1",
                                  port=self.port)
        env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_TRACKING_")}
        if admin is None:
            self.cmd.remove("--app-name=basic-auth")
            self.env = {**env, "MLFLOW_BACKEND_STORE_URI": store, "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
                        "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        else:
            # As in the cluster: the file names the users' database (its URI holds the role's password) and the
            # first admin; the env repeats the admin (from a Secret there).
            config = write_auth_config(workdir / "basic_auth.ini", database_uri=pg.create_database(f"{db}_auth"),
                                       admin_username=admin[0], admin_password=admin[1])
            self.env = {**env, **server_env(config, "chaos-secret-key-0123456789", backend_store_uri=store,
                                            admin_username=admin[0], admin_password=admin[1])}

    def start(self, timeout_s: float = 420) -> None:
        """Start and wait for ``/health`` (~15 s idle; minutes when the 2 cores are shared by many jobs)."""
        log = (self.workdir / "mlflow-server.log").open("a")
        self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                     start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout_s
        while not _answers(f"{self.url}/health"):
            if self.proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited {self.proc.returncode}: {self.log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"mlflow server did not answer /health within {timeout_s:.0f} s")
            time.sleep(0.2)

    def log_tail(self) -> str:
        return (self.workdir / "mlflow-server.log").read_text()[-3000:]

    def kill(self) -> None:
        """SIGKILL the server and its workers (its own process group), as a crashed pod."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)
            self.proc = None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # the port is free again before a restart binds it
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) != 0:
                    return
            time.sleep(0.1)

    def close(self) -> None:
        self.kill()
