"""The worker entrypoint torchrun starts: ``python -m mlops_training.worker`` on every rank.

Started by ``mlops train run`` (which passes ``--config-json``), by hand with ``torchrun ... -m
mlops_training.worker --model llm-tiny``, multi-node, or from a Kubeflow PyTorchJob: the same code path.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from pathlib import Path
from typing import Any

from mlops_config import PlatformConfig, load_config
from mlops_core import RedactingFormatter, atomic_write_text, filter_known_warnings
from mlops_training.errors import TrainingError
from mlops_training.lifeline import die_with_agent, exit_without_teardown

log = logging.getLogger(__name__)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mlops_training.worker", description=__doc__)
    parser.add_argument("--config-json", type=Path, help="Resolved config written by the launcher.")
    parser.add_argument("--root", type=Path, help="Repo root that relative config paths resolve against.")
    parser.add_argument("--profile", help="Profile when loading configs/ directly.")
    parser.add_argument("--model", help="Model config (configs/models/<M>.yaml) when loading configs/ directly.")
    parser.add_argument("--set", dest="sets", action="append", default=[], help="section.key=value override.")
    parser.add_argument("--run-name", default=os.environ.get("MLOPS_RUN_NAME"), help="Run (and checkpoint) name.")
    parser.add_argument("--no-track", action="store_true", help="Do not log to MLflow (export only).")
    return parser.parse_args(argv)


def resolve_job(args: argparse.Namespace) -> tuple[PlatformConfig, Path]:
    """The config and repo root, from ``--config-json`` or from the config layer."""
    if args.config_json:
        try:
            data = json.loads(args.config_json.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise TrainingError(f"--config-json {str(args.config_json)!r} is unreadable: {exc}") from None
        return PlatformConfig.model_validate(data), (args.root or Path.cwd()).resolve()
    loaded = load_config(profile=args.profile, model=args.model, overrides=args.sets)
    return loaded.config, loaded.root


def default_run_name(model: str) -> str:
    """``<model>-<torchrun rendezvous id>``: the same on every rank and across restarts of one job."""
    return f"{model}-{os.environ.get('TORCHELASTIC_RUN_ID', 'local')}"


def _setup_worker_logging(rank: int) -> None:
    level = logging.INFO if rank == 0 else logging.WARNING
    handler = logging.StreamHandler()
    handler.setFormatter(RedactingFormatter(f"[rank{rank}] %(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=level, handlers=[handler])
    for noisy in ("mlflow", "alembic", "urllib3", "httpx", "filelock", "feast"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    filter_known_warnings()


def main(argv: list[str] | None = None) -> int:
    """Train on this rank; rank 0 exports, records lineage and writes ``result.json`` in the run folder."""
    die_with_agent()  # before anything slow: a worker must never outlive the agent waiting for it
    args = parse_args(argv)
    _setup_worker_logging(int(os.environ.get("RANK", "0")))
    try:
        config, root = resolve_job(args)
        result = train_worker(config, root, run_name=args.run_name, track=not args.no_track)
    except TrainingError as exc:
        log.error("%s", exc)
        return 2
    if result is not None:  # the whole result is in the run folder's result.json; a person reads one line
        log.info("result: version %s, weights %s, metrics %s", result.get("model_version"),
                 str(result.get("weights_sha256", ""))[:16], result.get("metrics"))
    return 0


def train_worker(config: PlatformConfig, root: Path, *, run_name: str | None, track: bool) -> dict[str, Any] | None:
    """Everything one rank does; returns the result on rank 0 (``None`` elsewhere)."""
    import torch.distributed as dist

    from mlops_core import seed_everything
    from mlops_model import manifest_seal
    from mlops_training.lineage import config_hash
    from mlops_training.parallelize import init_distributed
    from mlops_training.publish import publish
    from mlops_training.shard_plan import ShardPlan
    from mlops_training.trainer import run_training

    training = config.training
    dist_info = init_distributed(training.backend, cpu_offload=training.fsdp.cpu_offload)
    try:
        plan = ShardPlan.resolve(training, world_size=dist_info.world_size,
                                 ranks_per_node=dist_info.local_world_size)
        seed_everything(config.project.seed, deterministic=training.deterministic)
        name = run_name or default_run_name(config.project.model)
        run_dir = _resolve(root, training.checkpoint.dir) / name
        task = _make_task(config, root, run_dir, dist_info)
        describe = {"run_name": name, "model": config.project.model, "parallelism": plan.parallelism,
                    "sharding_strategy": plan.sharding_strategy, "config_sha256": config_hash(config),
                    "mesh": [plan.dp_replicate, plan.dp_shard]}
        seal = manifest_seal(config.provenance, root) if dist_info.is_main else None
        outcome = run_training(training, plan, task, dist_info, run_dir, seed=config.project.seed, describe=describe,
                               trajectory_steps=(config.evaluation.repro_steps,), seal=seal)
        if not dist_info.is_main:
            return None
        result = publish(config, plan, root, name, task, outcome, track=track)
        atomic_write_text(run_dir / "result.json", json.dumps(result, indent=2, sort_keys=True))
        return result
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _resolve(root: Path, path: str) -> Path:
    p = Path(path)
    return p if p.is_absolute() else root / p


def _make_task(config: PlatformConfig, root: Path, run_dir: Path, dist_info: Any) -> Any:
    from mlops_model import kind_of
    from mlops_training.spec import train_spec

    return train_spec(kind_of(config.training)).make_task(config, root, run_dir, dist_info)


if __name__ == "__main__":
    # an exception leaves main() the ordinary way (traceback, full teardown); only a finished run skips it
    exit_without_teardown(main())
