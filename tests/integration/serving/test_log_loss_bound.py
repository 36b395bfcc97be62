"""The prediction log's loss bound under SIGKILL: everything older than one flush interval is on disk."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FLUSH_S = 0.5


def test_sigkill_loses_at_most_the_last_flush_interval(tmp_path: Path, kit: Any, redis_url: str,
                                                       redis_prefix: str) -> None:
    from mlops_serving import read_prediction_log

    port = kit.free_port()
    script = tmp_path / "serve.py"
    script.write_text(textwrap.dedent(f"""
        import importlib.util, sys
        from pathlib import Path
        sys.path.insert(0, {str(Path(__file__).resolve().parents[3])!r})  # conftest imports tests.support
        spec = importlib.util.spec_from_file_location("kit", {str(Path(__file__).with_name("conftest.py"))!r})
        kit = importlib.util.module_from_spec(spec); sys.modules["kit"] = kit; spec.loader.exec_module(kit)
        from mlops_serving.server import run_app
        source = kit.RedisHashFeatures({redis_url!r}, {redis_prefix!r}); source.write()
        app = kit.make_app(Path({str(tmp_path)!r}), source, prediction_log_flush_s={FLUSH_S})
        run_app(app, "127.0.0.1", {port})
    """))
    err = (tmp_path / "serve.err").open("w")
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.DEVNULL, stderr=err)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if httpx.get(f"{url}/v2/health/ready").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        assert proc.poll() is None, (tmp_path / "serve.err").read_text()[-2000:]
        with httpx.Client(base_url=url) as client:
            for i in range(20):
                assert client.post("/v1/models/fraud:predict", json={"instances": [kit.instance(i)]}).status_code == 200
            time.sleep(3 * FLUSH_S)  # the first 20 are older than a flush interval now
            for i in range(20, 25):
                assert client.post("/v1/models/fraud:predict", json={"instances": [kit.instance(i)]}).status_code == 200
    finally:
        if proc.poll() is None:  # a server that died on its own is reaped already: its stderr says why
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        err.close()
    frame = read_prediction_log(tmp_path / "predlog", "fraud")
    logged = set(frame["transaction_id"])
    assert {f"t{i}" for i in range(20)} <= logged  # nothing older than the interval was lost
    assert len(frame) <= 25
