"""The planner's parameter counts against the published LLaMA-2 sizes, and its arithmetic by hand."""

from __future__ import annotations

import math

import pytest
from torch import nn

from mlops_config import FSDPConfig, TrainingConfig
from mlops_training import ShardPlan, plan_report
from mlops_training.parallelize import wrap_units
from mlops_training.planner import estimate, plan, shape_for, sharded_numel


def _plan(strategy: str, *, world: int, per_node: int, param_dtype: str = "float32", offload: bool = False,
          ac: bool = False) -> ShardPlan:
    fsdp = FSDPConfig.model_validate({"parallelism": "ddp"} if strategy == "DDP" else {
        "sharding_strategy": strategy, "cpu_offload": offload, "activation_checkpointing": ac,
        "mixed_precision": {"param_dtype": param_dtype}})
    return ShardPlan.from_fsdp(fsdp, world_size=world, ranks_per_node=per_node)


@pytest.mark.parametrize(
    ("preset", "params"),
    # Hugging Face's model cards: meta-llama/Llama-2-{7b,13b,70b}-hf
    [("llama2-7b", 6_738_415_616), ("llama2-13b", 13_015_864_320), ("llama2-70b", 68_976_648_192)],
)
def test_meta_model_has_the_published_parameter_count(preset: str, params: int) -> None:
    assert shape_for(TrainingConfig(model="causal_lm"), preset=preset).parameters == params


def test_sharded_numel_is_ceil_of_dim0_times_the_rest() -> None:
    assert sharded_numel([(5, 3), (4,), ()], 2) == 3 * 3 + 2 + 1
    assert sharded_numel([(5, 3)], 1) == 15


def test_ddp_model_state_is_sixteen_bytes_per_parameter_plus_adam_steps() -> None:
    shape = shape_for(TrainingConfig(model="causal_lm"))
    e = estimate(shape, _plan("DDP", world=2, per_node=2), micro_batch=1, seq_len=16)
    assert e.model_state_bytes == 16 * shape.parameters + 4 * len(shape.param_shapes)
    assert e.per_gpu_bytes == e.params + e.grads + e.optimizer + e.gathered + e.activations


def test_offload_moves_model_state_to_host_memory_of_the_node() -> None:
    shape = shape_for(TrainingConfig(model="causal_lm"))
    on = estimate(shape, _plan("FULL_SHARD", world=8, per_node=8, param_dtype="bfloat16", offload=True, ac=True),
                  micro_batch=1, seq_len=16)
    off = estimate(shape, _plan("FULL_SHARD", world=8, per_node=8, param_dtype="bfloat16", ac=True),
                   micro_batch=1, seq_len=16)
    assert on.model_state_bytes == 0
    assert on.host_bytes_per_node == 8 * off.model_state_bytes


def test_70b_on_8x80_only_fits_with_offload_and_the_recommendation_fits() -> None:
    report = plan(TrainingConfig(), gpus=8, gpu_memory_gb=80, preset="llama2-70b")
    # 16 bytes per parameter over 8 GPUs is ~128 GiB of model state alone: nothing without offload fits.
    assert 16 * report["parameters"] / 8 / 2**30 > 80
    assert all(row["cpu_offload"] for row in report["strategies"] if row["fits"])
    rec = report["recommended"]
    assert rec["fits"] and rec["per_gpu_bytes"] <= 0.9 * 80 * 2**30
    assert {r["sharding_strategy"] for r in report["strategies"]} >= {"DDP", "FULL_SHARD", "SHARD_GRAD_OP"}


def test_7b_on_8x80_recommends_a_sharded_plan_without_offload() -> None:
    rec = plan(TrainingConfig(), gpus=8, gpu_memory_gb=80, preset="llama2-7b")["recommended"]
    assert rec["cpu_offload"] is False
    assert rec["sharding_strategy"] in {"SHARD_GRAD_OP", "FULL_SHARD"}


def test_plan_report_carries_the_doctor_verdict() -> None:
    bad = TrainingConfig(fsdp=FSDPConfig(sharding_strategy="HYBRID_SHARD", hybrid_shard_group_size=3))
    report = plan_report(bad, "llama2-7b", gpus=8, gpu_memory_gb=80)
    assert any("hybrid_shard_group_size=3" in p for p in report["doctor"]["problems"])


def test_size_wrap_policy_takes_the_smallest_subtrees_over_the_threshold() -> None:
    model = nn.Sequential(nn.Linear(10, 100), nn.ReLU(), nn.Sequential(nn.Linear(100, 5), nn.Linear(5, 5)))
    units = wrap_units(model, FSDPConfig.model_validate({"wrap_policy": {"kind": "size", "min_num_params": 500}}))
    # Linear(10,100)=1100 and Linear(100,5)=505 qualify alone; Linear(5,5)=30 stays with the root.
    assert units == [model[0], model[2][0]]
    assert math.isclose(sum(p.numel() for u in units for p in u.parameters()), 1605)
