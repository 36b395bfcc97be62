"""`mlops monitor run --model llm-sft` against a real LM server: its prediction log, the fraud model's alert policy,
webhook delivery, Prometheus metrics file and the same rollback stage (GitOps commit, alias, ledger).

Real parts: two versions of a small Hugging Face checkpoint (tests/hf_checkpoint.py) registered in MLflow's
registry (SQLite) with v2 champion and v1 fallback; `mlops serve` serving v2 as its own process (one for the
module), writing the prediction log; a bare git repository as the GitOps remote; a real HTTP receiver for the alert.
The reference is the fine-tuning prompts (datasets/instructions.jsonl) encoded by the served version's tokenizer.
Each test's window is the log parts its own requests added, copied into the log folder its monitor run reads.

Independent expectations: the clean window is the 240 training prompts themselves, so the logged prompt lengths
and token ids are the reference's exactly (PSI 0 by construction); the drifted prompts are each longer, counted by
plain ``transformers`` on the checkpoint, than the longest training prompt, so every logged length lies above the
reference's top quantile. What the cluster would serve is read from the remote's HEAD.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from typer.testing import CliRunner

from mlops_config import TrackingConfig
from tests.support import free_port
from tests.support.webhook import alert_receiver

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]
MODEL = "llm-sft"
OVERLAY = f"infra/overlays/production/model-{MODEL}.yaml"
TRACKING = TrackingConfig(uri="sqlite:///mlflow.db", artifact_location="mlartifacts")
DATASET = REPO / "datasets" / "instructions.jsonl"
TOPICS = ("the history of the harbour", "why the winter was long", "a recipe for bread and soup",
          "the rules of an old board game", "how rivers carve valleys")


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout.strip()


def training_prompts() -> list[str]:
    return [json.loads(line)["prompt"] for line in DATASET.read_text(encoding="utf-8").splitlines() if line.strip()]


def drifted_prompts(n: int) -> list[str]:
    """Long free-form requests on other topics, without the dataset's ``Answer:`` frame."""
    return [f"Please write a detailed, friendly essay about {TOPICS[i % 5]}, with three examples, a short summary at "
            f"the end and a title; mention {TOPICS[(i * 3 + 1) % 5]} as well. Request {i}." for i in range(n)]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A repository root (configs copied) whose registry holds v1 and v2 of the LM, each run's ``model/`` the signed
    Hugging Face folder as training exports it; v2 champion, v1 fallback, promoted through the lifecycle."""
    import mlflow

    from mlops_config import load_config
    from mlops_core import lifecycle, tracking_scope
    from mlops_model import model_signer
    from tests.hf_checkpoint import make_checkpoint

    base = tmp_path_factory.mktemp("lm-monitor")
    root = base / "repo"
    shutil.copytree(REPO / "configs", root / "configs")
    sign = model_signer(load_config(model=MODEL, check_secrets=False).config.provenance, REPO)
    folders = {}
    with tracking_scope(TRACKING, root) as client:
        client.create_registered_model(MODEL)
        for version, seed in (("1", 1), ("2", 2)):
            folder = make_checkpoint(base / f"v{version}" / "model", "tiny", seed=seed)
            (folder / "model.json").write_text(json.dumps({"kind": "hf_causal_lm"}))
            sign(folder)
            with mlflow.start_run() as run:
                mlflow.log_artifacts(str(folder), "model")
            mv = client.create_model_version(MODEL, f"{run.info.artifact_uri}/model", run.info.run_id)
            assert str(mv.version) == version
            folders[version] = folder
    for version in ("1", "2"):
        for to in ("candidate", "staging", "canary", "champion"):
            lifecycle.promote(TRACKING, root, MODEL, version, to, reason="setup", actor="test", required_gates={})
    assert lifecycle.aliases(TRACKING, root, MODEL) == {"champion": "2", "fallback": "1"}
    template = base / "mlflow.db.template"
    shutil.copy(root / "mlflow.db", template)
    return {"root": root, "folders": folders, "template": template}


@pytest.fixture
def root(world: dict[str, Any]) -> Path:
    """The world's root with a fresh copy of the registry (each test moves aliases) and no earlier log."""
    shutil.copy(world["template"], world["root"] / "mlflow.db")
    for leftover in ("log", "reports", ".mlops"):
        shutil.rmtree(world["root"] / leftover, ignore_errors=True)
    return world["root"]


@pytest.fixture
def remote(tmp_path: Path) -> Path:
    """A bare GitOps remote whose production overlay serves v2 of the LM, v1 before it."""
    from mlops_delivery import ModelManifest

    remote = tmp_path / "gitops.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(remote))
    seed = tmp_path / "seed"
    (seed / OVERLAY).parent.mkdir(parents=True)
    fraud = (REPO / "infra/overlays/production/model-fraud.yaml").read_text(encoding="utf-8")
    (seed / OVERLAY).write_text(fraud.replace("name: fraud", f"name: {MODEL}"), encoding="utf-8")
    manifest = ModelManifest(seed / OVERLAY, "production", MODEL)
    for v in (1, 2):
        manifest.set_stable(v, f"s3://mlops-artifacts/models/{MODEL}/v{v}")
    (seed / OVERLAY).write_text(manifest.dump())
    git(seed, "init", "-q", "-b", "main")
    git(seed, "add", ".")
    git(seed, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "production serves v2")
    git(seed, "push", "-q", str(remote), "main")
    return remote


@pytest.fixture
def webhook() -> Iterator[tuple[str, list[dict]]]:
    """A real HTTP server on 127.0.0.1 that records every POST (and Pushgateway's PUTs)."""
    with alert_receiver() as receiver:
        yield receiver


@pytest.fixture(scope="module")
def served(world: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """Version 2 served by one `mlops serve` process for the module (prompt text logged), logging to a folder of
    its own; its URL and that folder. Stopped after the module's last test."""
    work = tmp_path_factory.mktemp("lm-monitor-serve")
    log_dir, err_path, port = work / "log", work / "serve-2.err", free_port()
    with err_path.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mlops_cli", "serve", "--model", MODEL, "--port", str(port), "--model-dir",
             str(world["folders"]["2"]), "--model-version", "2", "--set", f"serving.prediction_log_uri={log_dir}",
             "--set", "serving.prediction_log_flush_s=0.2", "--set", "serving.lm.log_text=true"],
            cwd=REPO, stdout=subprocess.DEVNULL, stderr=err, env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 240  # start-up only; no verdict hangs on this
            while True:
                assert proc.poll() is None, err_path.read_text()[-3000:]
                try:
                    if httpx.get(f"{url}/v2/health/ready", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "LM server not ready in 240 s"
                time.sleep(0.3)
            yield url, log_dir
        finally:
            proc.terminate()
            proc.wait(30)


def _parts(log_dir: Path) -> set[Path]:
    """The finished parts of the prediction log at ``log_dir`` (a part appears whole, renamed from ``.tmp``)."""
    return {p.relative_to(log_dir) for p in log_dir.rglob("*.parquet")} if log_dir.exists() else set()


def serve_prompts(served: tuple[str, Path], log_dir: Path, prompts: list[str]) -> None:
    """Send each prompt to the served version's OpenAI completions route and copy the log parts those requests
    added to the server's log into ``log_dir``; wait until it holds one row per request."""
    from mlops_serving import read_prediction_log

    url, server_log = served
    before = _parts(server_log)
    with httpx.Client(timeout=60) as client:
        for prompt in prompts:
            r = client.post(f"{url}/openai/v1/completions",
                            json={"model": MODEL, "prompt": prompt, "max_tokens": 2, "temperature": 0})
            assert r.status_code == 200, r.text
    for _ in range(100):
        for part in _parts(server_log) - before - _parts(log_dir):
            (log_dir / part).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(server_log / part, log_dir / part)
        if log_dir.exists() and len(read_prediction_log(log_dir, MODEL)) == len(prompts):
            return
        time.sleep(0.2)
    raise AssertionError(f"the log at {log_dir} does not hold the {len(prompts)} requests sent")


def monitor(root: Path, remote: Path, webhook_url: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    from mlops_cli.app import app

    monkeypatch.chdir(root)
    env = {**os.environ, "MLOPS_CONFIG_DIR": str(root / "configs"), "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"}
    return CliRunner().invoke(app, [
        "monitor", "run", "--model", MODEL, "--window", "1h", "--no-html", "--json",
        "--set", f"tracking.uri={TRACKING.uri}", "--set", f"tracking.artifact_location={TRACKING.artifact_location}",
        "--set", f"delivery.gitops_repo={remote}", "--set", f"serving.prediction_log_uri={root / 'log'}",
        "--set", f"training.causal_lm.dataset={DATASET}", "--set", f"monitoring.webhook_url={webhook_url}",
        "--set", "monitoring.min_rows=50"], env=env)


def _served_at_head(remote: Path) -> dict[str, str]:
    doc = yaml.safe_load(git(remote, "show", f"main:{OVERLAY}"))
    return {"stable": doc["metadata"]["annotations"]["mlops.platform/stable-version"],
            "uri": doc["spec"]["predictor"]["model"]["storageUri"]}


def test_drifted_prompts_are_critical_and_roll_the_lm_back_through_git_alias_and_ledger(
        world: dict[str, Any], served: tuple[str, Path], root: Path, remote: Path, webhook: tuple[str, list[dict]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers import AutoTokenizer

    from mlops_core import lifecycle
    from mlops_monitoring.exporter import metric_values

    prompts = drifted_prompts(60)
    tok = AutoTokenizer.from_pretrained(str(world["folders"]["2"]))
    longest_training = max(len(tok(p)["input_ids"]) for p in training_prompts())
    assert min(len(tok(p)["input_ids"]) for p in prompts) > longest_training  # the window lies above the reference
    serve_prompts(served, root / "log", prompts)
    before = git(remote, "rev-parse", "main")

    result = monitor(root, remote, webhook[0], monkeypatch)

    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["model"] == MODEL and doc["level"] == "CRITICAL", doc["reasons"]
    assert doc["n_current"] == len(prompts) and doc["n_reference"] == len(training_prompts())
    assert doc["columns"]["prompt_tokens"]["severity"] == "CRITICAL"
    assert "prompt_token_ids" in doc["columns"]  # the text was logged, so the token mix is compared too
    assert (doc["decision"]["from_version"], doc["decision"]["to_version"]) == ("2", "1")
    rollback = next(a for a in doc["actions"] if a["action"] == "rollback")
    assert rollback["ok"], rollback
    head = git(remote, "rev-parse", "main")
    assert head != before
    assert _served_at_head(remote) == {"stable": "1", "uri": f"s3://mlops-artifacts/models/{MODEL}/v1/"}
    assert lifecycle.aliases(TRACKING, root, MODEL) == {"champion": "1"}
    last = lifecycle.history(TRACKING, root, MODEL)[-1]
    assert (last.action, last.version, last.extra["replaced"], last.extra["gitops_commit"]) == (
        "rollback", "1", "2", head)
    assert [w["body"]["level"] for w in webhook[1]] == ["CRITICAL"]
    assert webhook[1][0]["body"]["model"] == MODEL
    metrics = metric_values(Path(doc["outputs"]["metrics"]).read_text())
    assert metrics[("mlops_drift_rollback", (("model", MODEL),))] == 1
    assert metrics[("mlops_drift_alert_level", (("model", MODEL),))] == 3
    assert metrics[("mlops_drift_psi", (("feature", "prompt_tokens"), ("model", MODEL)))] == pytest.approx(
        doc["columns"]["prompt_tokens"]["psi"])


def test_the_training_prompts_themselves_are_ok_and_nothing_moves(
        served: tuple[str, Path], root: Path, remote: Path, webhook: tuple[str, list[dict]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from mlops_core import lifecycle

    prompts = training_prompts()
    serve_prompts(served, root / "log", prompts)
    before = git(remote, "rev-parse", "main")

    result = monitor(root, remote, webhook[0], monkeypatch)

    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["level"] == "OK", doc["reasons"]
    assert doc["n_current"] == len(prompts)
    for name in ("prompt_tokens", "prompt_token_ids"):  # the same prompts, the same tokenizer: nothing moved
        assert doc["columns"][name]["psi"] == pytest.approx(0.0, abs=1e-12)
    assert doc["decision"] is None and not any(a["action"] == "rollback" for a in doc["actions"])
    assert git(remote, "rev-parse", "main") == before
    assert lifecycle.aliases(TRACKING, root, MODEL) == {"champion": "2", "fallback": "1"}
    assert webhook[1] == []


def test_a_family_without_a_drift_source_is_named() -> None:
    from mlops_model import ModelKind
    from mlops_monitoring import MonitoringError
    from mlops_monitoring.monitor import DRIFT_SOURCES, drift_source

    assert set(DRIFT_SOURCES) == {ModelKind.TABULAR, ModelKind.HF_CAUSAL_LM}
    with pytest.raises(MonitoringError, match=r"no drift source for model kind 'causal_lm'.*\['tabular_mlp', "
                                              r"'hf_causal_lm'\]"):
        drift_source(ModelKind.BYTE_LM)
