"""The doctor refuses known-bad configs with a reason that names the value; `mlops train run` starts nothing."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from mlops_config import TrainingConfig
from mlops_training import DoctorError, TrainingError, diagnose, preflight


def _cfg(**training: object) -> TrainingConfig:
    return TrainingConfig.model_validate(training)


@pytest.mark.parametrize(
    ("training", "world", "local", "needle"),
    [
        ({"fsdp": {"sharding_strategy": "HYBRID_SHARD", "hybrid_shard_group_size": 3}}, 4, 4,
         "hybrid_shard_group_size=3 does not divide world size 4"),
        ({"model": "causal_lm", "fsdp": {"wrap_policy": {"transformer_layer_cls": ["GPT2Block"]}}}, 2, 2,
         "'GPT2Block'] names no class"),
        ({"backend": "nccl", "fsdp": {"cpu_offload": True}}, 2, 2, "NCCL-only group"),
        ({"fsdp": {"mixed_precision": {"param_dtype": "float32", "reduce_dtype": "bfloat16"}}}, 2, 2,
         "reduce_dtype='bfloat16' is narrower than param_dtype='float32'"),
        ({"fsdp": {"mixed_precision": {"param_dtype": "float16", "reduce_dtype": "float32"}}}, 2, 2, "loss scaling"),
        ({"fsdp": {"parallelism": "ddp", "cpu_offload": True}}, 2, 2, "DDP cannot offload"),
        ({"batch_size": 10, "grad_accum_steps": 2}, 2, 2, "batch_size=10 does not split over 2 ranks"),
        ({"model": "causal_lm", "causal_lm": {"preset": "llama-huge"}}, 2, 2, "'llama-huge' is unknown"),
        ({"model": "causal_lm", "causal_lm": {"seq_len": 4096}}, 2, 2, "exceeds preset 'llama-tiny'"),
    ],
)
def test_known_bad_config_is_a_problem(training: dict, world: int, local: int, needle: str) -> None:
    d = diagnose(_cfg(**training), world_size=world, local_world_size=local, cuda=True)
    assert any(needle in p for p in d.problems), d.problems


def test_missing_wrap_class_lists_the_classes_the_model_has() -> None:
    d = diagnose(_cfg(model="causal_lm", fsdp={"wrap_policy": {"transformer_layer_cls": ["GPT2Block"]}}),
                 world_size=2, local_world_size=2, cuda=False)
    assert any("LlamaDecoderLayer" in p and "LlamaAttention" in p for p in d.problems)


def test_good_configs_pass() -> None:
    assert diagnose(_cfg(model="causal_lm"), world_size=2, local_world_size=2, cuda=False).ok
    fraud = _cfg(fsdp={"wrap_policy": {"kind": "size", "min_num_params": 1000}})
    assert diagnose(fraud, world_size=2, local_world_size=2, cuda=False).ok
    hybrid = _cfg(model="causal_lm", fsdp={"sharding_strategy": "HYBRID_SHARD", "hybrid_shard_group_size": 2})
    assert diagnose(hybrid, world_size=4, local_world_size=4, cuda=True).ok


def test_cpu_offload_without_cuda_is_refused() -> None:
    d = diagnose(_cfg(fsdp={"cpu_offload": True}), world_size=2, local_world_size=2, cuda=False)
    assert any("cpu_offload needs CUDA devices" in p for p in d.problems)


def test_nccl_without_cuda_is_refused_by_preflight() -> None:
    with pytest.raises(DoctorError, match="backend 'nccl' needs CUDA"):
        preflight(_cfg(backend="nccl"), world_size=2, local_world_size=2)


def test_cli_refuses_before_any_worker_starts(tmp_path: Path, repo_root: Path) -> None:
    ckpt = tmp_path / "ck"
    started = time.perf_counter()
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "mlops"), "train", "run", "--model", "llm-tiny", "--no-track",
         "--set", "training.fsdp.wrap_policy.transformer_layer_cls=[GPT2Block]",
         "--set", f"training.checkpoint.dir={ckpt}"],
        capture_output=True, text=True, cwd=repo_root, check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: config refused before any worker started")
    assert "GPT2Block" in proc.stderr and "LlamaDecoderLayer" in proc.stderr
    assert not ckpt.exists()  # the launcher had not even created the run folder
    assert time.perf_counter() - started < 60


def test_torchrun_command_single_and_multi_node() -> None:
    from mlops_training.launcher import torchrun_command

    one = torchrun_command(nproc=2, nnodes=1, rdzv_endpoint=None, max_restarts=1, run_name="r", worker_args=["-x"])
    assert one[1:] == ["-m", "torch.distributed.run", "--nproc-per-node=2", "--max-restarts=1", "--standalone",
                       "-m", "mlops_training.worker", "-x"]
    multi = torchrun_command(nproc=8, nnodes=2, rdzv_endpoint="head:29400", max_restarts=0, run_name="r",
                             worker_args=[])
    assert {"--nnodes=2", "--rdzv-backend=c10d", "--rdzv-endpoint=head:29400", "--rdzv-id=r"} <= set(multi)
    with pytest.raises(TrainingError, match=r"nnodes=2 needs training\.rdzv_endpoint"):
        torchrun_command(nproc=8, nnodes=2, rdzv_endpoint=None, max_restarts=0, run_name="r", worker_args=[])


def test_export_accelerate_cli_writes_the_file(tmp_path: Path, repo_root: Path) -> None:
    out = tmp_path / "acc.yaml"
    proc = subprocess.run([str(Path(sys.executable).parent / "mlops"), "train", "export-accelerate", "--model",
                           "llm-tiny", "--out", str(out)], capture_output=True, text=True, cwd=repo_root, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "fsdp_version: 2" in out.read_text()
