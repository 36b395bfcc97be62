"""``mlops train run``: run the doctor, then start torchrun with one worker per process and read the result.

torchrun owns the processes (rendezvous, ``--max-restarts`` after a failed worker). Single node uses
``--standalone`` (a free port is picked, so parallel runs do not collide); multi-node uses the c10d
rendezvous at ``rdzv_endpoint`` with the run name as rendezvous id.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlops_config import PlatformConfig
from mlops_core import atomic_write_text
from mlops_training.doctor import preflight
from mlops_training.errors import DoctorError, TrainingError
from mlops_training.lifeline import LAUNCHER_PID_ENV, agent_command
from mlops_training.run_lock import acquire_run_lock, node_rank_from_env

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainResult:
    """What a finished training run produced (``run_id``/``model_version`` are ``None`` without tracking)."""

    run_name: str
    run_dir: Path
    export_dir: Path
    weights_sha256: str
    data_hash: str
    config_sha256: str
    run_id: str | None
    model_name: str | None
    model_version: str | None
    steps: int
    resumed_from_step: int | None
    metrics: dict[str, float]
    system: dict[str, float]
    trajectory: dict[str, str] = field(default_factory=dict)
    """Step → weights SHA-256 (``TrainOutcome.trajectory``)."""
    trajectory_sketch: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    """Step → weights sketch (``TrainOutcome.trajectory_sketch``): compared within tolerance on GPU."""

    @classmethod
    def from_json(cls, doc: dict[str, Any], run_dir: Path) -> TrainResult:
        return cls(run_name=doc["run_name"], run_dir=run_dir, export_dir=Path(doc["export_dir"]),
                   weights_sha256=doc["weights_sha256"], data_hash=doc["data_hash"],
                   config_sha256=doc["config_sha256"], run_id=doc.get("run_id"), model_name=doc.get("model_name"),
                   model_version=doc.get("model_version"), steps=int(doc["steps"]),
                   resumed_from_step=doc.get("resumed_from_step"), metrics=dict(doc.get("metrics", {})),
                   system=dict(doc.get("system", {})), trajectory=dict(doc.get("trajectory") or {}),
                   trajectory_sketch=dict(doc.get("trajectory_sketch") or {}))

    def to_json(self) -> dict[str, Any]:
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in self.__dict__.items()}

    def record(self) -> dict[str, Any]:
        """What the run made of its inputs and nothing of the run itself: the weights, data and config hashes,
        steps, evaluation metrics and trajectory; no run id, version, folder or timing. The train stage's DVC
        output, so a re-run of the same code, config and data writes the same bytes (and ``dvc.lock`` stays as
        committed); :meth:`to_json` has the rest."""
        return {"weights_sha256": self.weights_sha256, "data_hash": self.data_hash,
                "config_sha256": self.config_sha256, "steps": self.steps, "metrics": dict(sorted(self.metrics.items())),
                "trajectory": dict(self.trajectory)}


def new_run_name(model: str) -> str:
    """``<model>-<UTC time>-<random>``: unique per launch, stable across torchrun restarts."""
    return f"{model}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{secrets.token_hex(2)}"


def default_run_name(config: PlatformConfig) -> str:
    """A fresh name per launch on one node; on several nodes every node must derive the same name (it is
    the rendezvous id and the checkpoint folder), so it comes from the config: set ``MLOPS_RUN_NAME`` (e.g.
    the PyTorchJob's name) to tell two jobs with the same config apart."""
    if config.training.nnodes == 1:
        return new_run_name(config.project.model)
    from mlops_training.lineage import config_hash

    return f"{config.project.model}-{config_hash(config)[:12]}"


def torchrun_command(*, nproc: int, nnodes: int, rdzv_endpoint: str | None, max_restarts: int, run_name: str,
                     worker_args: list[str], node_rank: int | None = None) -> list[str]:
    """The ``torchrun`` command line (as ``python -m torch.distributed.run``, the venv's own torch)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}", f"--max-restarts={max_restarts}"]
    if nnodes == 1 and not rdzv_endpoint:
        cmd.append("--standalone")
    else:
        if not rdzv_endpoint:
            raise TrainingError(f"nnodes={nnodes!r} needs training.rdzv_endpoint (host:port of the rendezvous)")
        cmd += [f"--nnodes={nnodes}", "--rdzv-backend=c10d", f"--rdzv-endpoint={rdzv_endpoint}",
                f"--rdzv-id={run_name}"]
        if node_rank is not None:
            cmd.append(f"--node-rank={node_rank}")
    return [*cmd, "-m", "mlops_training.worker", *worker_args]


def launch(config: PlatformConfig, root: Path, *, run_name: str | None = None, track: bool = True,
           env: dict[str, str] | None = None, timeout_s: float | None = None) -> TrainResult | None:
    """Check the config, run torchrun with ``config.training``'s process layout and return rank 0's result.

    The whole resolved config goes to the workers as JSON (they need training, tracking, features, data).
    Returns ``None`` on a node that does not host rank 0.

    Raises:
        DoctorError: the config is known to fail (nothing was started).
        RunLockedError: another live launcher trains this run on this node (nothing was started).
        TrainingError: torchrun exited non-zero or timed out.
    """
    training = config.training
    preflight(training, world_size=training.nproc * training.nnodes, local_world_size=training.nproc)
    from mlops_training.pretrained import check_pretrained

    problems = check_pretrained(training, root)
    if problems:
        raise DoctorError(problems)
    name = run_name or os.environ.get("MLOPS_RUN_NAME") or default_run_name(config)
    ckpt_root = Path(training.checkpoint.dir)
    run_dir = (ckpt_root if ckpt_root.is_absolute() else root / ckpt_root) / name
    child_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {}), LAUNCHER_PID_ENV: str(os.getpid())}
    child_env.setdefault("OMP_NUM_THREADS", "1")
    # Held until torchrun returns; a second launch of this run (on this node) is refused, naming us, before it
    # writes anything.
    with acquire_run_lock(run_dir, name, nnodes=training.nnodes, node_rank=node_rank_from_env(child_env)):
        return _run_torchrun(config, root, name, run_dir, track=track, env=child_env, timeout_s=timeout_s)


def _run_torchrun(config: PlatformConfig, root: Path, name: str, run_dir: Path, *, track: bool,
                  env: dict[str, str], timeout_s: float | None) -> TrainResult | None:
    training = config.training
    config_path = run_dir / "config.json"
    atomic_write_text(config_path, json.dumps(config.model_dump(mode="json"), indent=2, sort_keys=True))
    worker_args = ["--config-json", str(config_path), "--root", str(root), "--run-name", name]
    if not track:
        worker_args.append("--no-track")
    cmd = torchrun_command(nproc=training.nproc, nnodes=training.nnodes, rdzv_endpoint=training.rdzv_endpoint,
                           max_restarts=training.max_restarts, run_name=name, worker_args=worker_args)
    log.info("launching %s", " ".join(cmd))
    try:
        # Through the lifeline agent: torchrun (and so its workers) die with this process, even by SIGKILL.
        proc = subprocess.run(agent_command(cmd), env=env, cwd=root, check=False, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise TrainingError(f"training run {name!r} did not finish within {timeout_s}s") from None
    if proc.returncode != 0:
        raise TrainingError(
            f"torchrun exited with code {proc.returncode} for run {name!r} (worker logs above); checkpoints are in "
            f"{str(run_dir)!r}: rerun with --run-name {name} to resume"
        )
    result = run_dir / "result.json"
    if not result.is_file():
        return None
    return TrainResult.from_json(json.loads(result.read_text(encoding="utf-8")), run_dir)
