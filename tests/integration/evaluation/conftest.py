"""A small world for the evaluation tests: prepared data (the run's shared copy, tests/support/prepared_data.py),
one model trained by the real pipeline (torchrun, tracked, registered) and models trained here on the same
encoded data — a weak champion, one trained on shuffled labels, and a much larger (slower) one — each exported
with ``mlops_model`` and registered
as a version of a real MLflow (SQLite) registry."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mlops_config import LoadedConfig, load_config
from mlops_model import DEFAULT_CONTRACT as FRAUD_CONTRACT  # fraud's (configs/models/fraud.yaml)

REPO = Path(__file__).resolve().parents[3]
SETS = [
    "data.rows=20000",
    "training.nproc=1",
    "training.eval_every=0",
    "training.max_steps=300",
    "evaluation.repro_steps=300",
    "evaluation.bootstrap_samples=500",
    "evaluation.latency_requests=200",
    "evaluation.latency_warmup=20",
]


@dataclass
class World:
    loaded: LoadedConfig
    root: Path
    versions: dict[str, str]  # role → registry version
    train_x: np.ndarray
    train_y: np.ndarray
    encoder: dict[str, Any]
    pipeline_result: Any
    sets: list[str]
    holdout: Any  # newest rows by event time, computed here independently of mlops_evaluation


def fit_mlp(x: np.ndarray, y: np.ndarray, hidden: tuple[int, ...], *, steps: int, seed: int, lr: float = 0.01
            ) -> dict[str, Any]:
    """Full-batch AdamW with a class-weighted BCE, like the pipeline's trainer; returns the state dict."""
    import torch

    from mlops_model import build_tabular_mlp

    torch.manual_seed(seed)
    model = build_tabular_mlp({"input_dim": x.shape[1], "hidden_sizes": list(hidden)})
    xt, yt = torch.from_numpy(x), torch.from_numpy(y.astype(np.float32))
    pos_weight = torch.tensor((len(y) - y.sum()) / max(y.sum(), 1), dtype=torch.float32)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    loss_fn = torch.nn.BCEWithLogitsLoss(pos_weight=pos_weight)
    for _ in range(steps):
        opt.zero_grad()
        loss_fn(model(xt).squeeze(-1), yt).backward()
        opt.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


IDENTITY_PLATT = {"method": "platt", "a": 1.0, "b": 0.0}
"""A Platt calibrator that returns the raw score (sigmoid of its own logit): the pipeline's exports carry a fitted
one (``training.calibration: platt``), so a hand-made version whose latency is compared with them scores through
the same path."""


def register(world_loaded: LoadedConfig, root: Path, state: dict[str, Any], hidden: tuple[int, ...],
             encoder: dict[str, Any], name: str, *, feature_service: str = "fraud_v1",
             calibration: dict[str, Any] | None = None) -> str:
    """Export ``state`` (safetensors + model.json), log it as ``model/`` of a tracked run, register a version."""
    import mlflow

    from mlops_core import mlflow_client
    from mlops_core.tracking import start_run
    from mlops_model import model_signer, save_exported

    cfg = world_loaded.config
    folder = root / ".mlops" / "test-models" / name
    meta = {"kind": "tabular_mlp", "architecture": {"input_dim": encoder["input_dim"], "hidden_sizes": list(hidden)},
            "features": {"feature_service": feature_service, "encoder": encoder}, "lineage": {"run_name": name},
            **({"calibration": calibration} if calibration is not None else {})}
    save_exported(folder, state, meta, sign=model_signer(cfg.provenance, root))  # the gates refuse unsigned models
    with start_run(cfg.tracking, root, run_name=name, seed=0) as run:
        mlflow.log_artifacts(str(folder), "model")
    mv = mlflow_client(cfg.tracking, root).create_model_version(
        cfg.project.model, source=f"runs:/{run.info.run_id}/model", run_id=run.info.run_id)
    return str(mv.version)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, prepared_fraud_data: Any) -> World:
    from mlops_features import training_set
    from mlops_model import EncoderSpec
    from mlops_training import train_model

    root = tmp_path_factory.mktemp("evaluation") / "repo"
    shutil.copytree(REPO / "configs", root / "configs")
    shutil.copytree(REPO / "feature_repo", root / "feature_repo")
    loaded = load_config(config_dir=root / "configs", overrides=SETS, environ={})
    cfg = loaded.config
    prepared_fraud_data(cfg, root)  # prepare_local_data's output, prepared once per run (tests/support)
    result = train_model(cfg, root, run_name="fraud-better")  # the real pipeline: torchrun, MLflow, registry
    from mlops_model import read_meta

    encoder = read_meta(result.export_dir)["features"]["encoder"]
    df = training_set(cfg.features, cfg.data, root, contract=FRAUD_CONTRACT)
    df = df.sort_values(["event_timestamp", "transaction_id"])
    train = df.iloc[: int(len(df) * (1 - cfg.evaluation.tabular.holdout_fraction))]
    x, y = EncoderSpec.from_dict(encoder).encode_frame(train), train["is_fraud"].to_numpy().astype(np.int64)
    versions = {"better": str(result.model_version)}
    # Same architecture and scoring path as the pipeline's model (so latency is comparable: its export applies a
    # Platt calibrator, so does this one, as the identity), trained only briefly: weaker.
    versions["champion"] = register(loaded, root, fit_mlp(x, y, (64, 32), steps=3, seed=1), (64, 32), encoder,
                                    "champion-weak", calibration=IDENTITY_PLATT)
    shuffled = np.random.default_rng(0).permutation(y)
    versions["shuffled"] = register(loaded, root, fit_mlp(x, shuffled, (64, 32), steps=150, seed=2), (64, 32),
                                    encoder, "shuffled-labels")
    big = (1536, 1536, 1536)
    versions["slow"] = register(loaded, root, fit_mlp(x[:512], y[:512], big, steps=1, seed=3), big, encoder,
                                "larger-model")
    holdout = df.iloc[int(len(df) * (1 - cfg.evaluation.tabular.holdout_fraction)):]
    return World(loaded, root, versions, x, y, encoder, result, SETS, holdout)
