"""The language-model server resolves a registry alias (``--alias`` or ``--model-uri models:/<name>@<alias>``)
through a real ``mlflow server`` to one immutable version, as the fraud model does, so the canary/stable aliases
work for the LM too.

Two versions of ``llm-sft`` are registered here with MLflow's own client (different weights, so different greedy
output); the expected text of each comes from plain ``transformers`` on the folder that was registered.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import free_port, start_mlflow_server

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]
MODEL = "llm-sft"
PROMPT = "Reverse the words: stone lamp\nAnswer:"
NEW_TOKENS = 8


@pytest.fixture(scope="module")
def mlflow_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("mlflow")
    with start_mlflow_server(f"sqlite:///{tmp / 'mlflow.db'}", tmp) as url:
        yield url


def _greedy(folder: Path) -> str:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForCausalLM.from_pretrained(str(folder)).eval()
    ids = tok(PROMPT)["input_ids"]
    with torch.inference_mode():
        out = model.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False)
    return str(tok.decode(out[0, len(ids):].tolist(), skip_special_tokens=True))


@pytest.fixture(scope="module")
def registered(mlflow_url: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Versions 1 (alias champion) and 2 (alias canary) of the LM, signed as training signs them, and 3 (alias
    unsigned) unsigned; each version's expected greedy text."""
    import mlflow
    from mlflow import MlflowClient

    from mlops_config import load_config

    sys.path.insert(0, str(REPO / "tests"))
    try:
        from hf_checkpoint import make_checkpoint
    finally:
        sys.path.pop(0)
    from mlops_model import model_signer

    config = load_config(model=MODEL, check_secrets=False).config
    name = config.tracking.registered_model_prefix + MODEL
    sign = model_signer(config.provenance, REPO)  # what training does at export (the server verifies it)
    client = MlflowClient(tracking_uri=mlflow_url, registry_uri=mlflow_url)
    client.create_registered_model(name)
    mlflow.set_tracking_uri(mlflow_url)
    expected = {}
    for version, seed in (("1", 1), ("2", 2), ("3", 3)):
        folder = make_checkpoint(tmp_path_factory.mktemp(f"v{version}") / "model", "tiny", seed=seed)
        (folder / "model.json").write_text(json.dumps({"kind": "hf_causal_lm"}))
        if version != "3":  # version 3 stays unsigned
            sign(folder)
        with mlflow.start_run() as run:
            mlflow.log_artifacts(str(folder), artifact_path="model")
        mv = client.create_model_version(name, f"runs:/{run.info.run_id}/model", run_id=run.info.run_id)
        assert mv.version == version
        expected[version] = _greedy(folder)
    client.set_registered_model_alias(name, "champion", "1")
    client.set_registered_model_alias(name, "canary", "2")
    client.set_registered_model_alias(name, "unsigned", "3")
    assert expected["1"] != expected["2"]  # otherwise the test could not tell the versions apart
    return {"name": name, "expected": expected}


def _serve_args(mlflow_url: str, state: Path, port: int, *args: str) -> list[str]:
    """The arguments of `mlops serve` for the LM's predictor on ``port`` (after ``mlops``)."""
    return ["serve", "--role", "predictor", "--model", MODEL, "--port", str(port),
            "--set", f"tracking.uri={mlflow_url}", "--set", f"project.state_dir={state}",
            "--set", f"serving.prediction_log_uri={state / 'log'}", *args]


def _serve(mlflow_url: str, state: Path, *args: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    cmd = [sys.executable, "-m", "mlops_cli", *_serve_args(mlflow_url, state, port, *args)]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
    return proc, f"http://127.0.0.1:{port}"


def _ready(proc: subprocess.Popen[bytes], url: str) -> None:
    deadline = time.monotonic() + 240  # resolve, download, verify, load: slow on a loaded shared machine
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited {proc.returncode}: {proc.stderr.read().decode()[-3000:]}")  # type: ignore[union-attr]
        try:
            if httpx.get(f"{url}/v2/health/ready", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    _stop(proc)
    raise AssertionError(f"the LM server did not get ready in 240 s: {proc.stderr.read().decode()[-3000:]}")  # type: ignore[union-attr]


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


@pytest.mark.parametrize(("how", "version"), [("alias", "2"), ("uri", "1")])
def test_the_lm_server_serves_the_version_its_alias_names(mlflow_url: str, registered: dict[str, Any],
                                                          tmp_path: Path, how: str, version: str) -> None:
    alias = {"1": "champion", "2": "canary"}[version]
    args = ("--alias", alias) if how == "alias" else ("--model-uri", f"models:/{registered['name']}@{alias}")
    proc, url = _serve(mlflow_url, tmp_path, *args)
    try:
        _ready(proc, url)
        r = httpx.post(f"{url}/v2/models/{MODEL}/generate", timeout=60,
                       json={"text_input": PROMPT, "parameters": {"max_tokens": NEW_TOKENS}})
        assert r.status_code == 200, r.text
        assert r.json()["model_version"] == version
        assert r.json()["text_output"] == registered["expected"][version]
        import openai

        c = openai.OpenAI(base_url=f"{url}/openai/v1", api_key="unused", max_retries=0)
        done = c.completions.create(model=MODEL, prompt=PROMPT, max_tokens=NEW_TOKENS, temperature=0)
        assert done.choices[0].text == registered["expected"][version]
        metrics = httpx.get(f"{url}/metrics", timeout=10).text
        assert f'version="{version}"' in metrics
    finally:
        _stop(proc)


@pytest.mark.parametrize(("args", "words", "own_process"), [
    (("--alias", "nope"), ["'nope'", "llm-sft"], False),
    (("--model-uri", "models:/fraud@champion"), ["'fraud'", "llm-sft"], False),
    (("--model-uri", "models:/llm-sft"), ["models:/llm-sft", "@<alias>"], True),
    (("--alias", "unsigned"), ["model.sig", "unsigned"], False),
], ids=["unset-alias", "other-model", "no-alias", "unsigned"])
def test_a_bad_alias_or_uri_stops_the_server_naming_it(mlflow_url: str, registered: dict[str, Any], tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...],
                                                       words: list[str], own_process: bool) -> None:
    """One case starts `mlops serve` as its own process (it exits non-zero, naming the problem on stderr); the
    others run the same command in this process with click's runner: the same resolution against the real
    ``mlflow server``, download and signature check, without a new interpreter importing torch each time."""
    if own_process:
        proc, _ = _serve(mlflow_url, tmp_path, *args)
        try:
            proc.wait(300)  # start-up imports torch and transformers: slow on a loaded shared machine
        finally:
            if proc.poll() is None:
                _stop(proc)
        code, err = proc.returncode, proc.stderr.read().decode()  # type: ignore[union-attr]
    else:
        from typer.testing import CliRunner

        import mlops_serving.server
        from mlops_cli.app import app

        def started(*_: Any, **__: Any) -> None:  # had start-up passed, the runner would serve here until killed
            raise AssertionError(f"the server started listening for {args}")

        monkeypatch.setattr(mlops_serving.server, "run_app", started)
        monkeypatch.chdir(REPO)
        result = CliRunner().invoke(app, _serve_args(mlflow_url, tmp_path, free_port(), *args),
                                    env={"TOKENIZERS_PARALLELISM": "false"})
        code, err = result.exit_code, result.stderr
        assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert code != 0
    for w in words:
        assert w in err, err[-2000:]
