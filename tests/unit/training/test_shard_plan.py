"""The shard plan: the config's FSDP1 vocabulary resolved once into degrees and flags every consumer reads."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from mlops_config import FSDPConfig, TrainingConfig
from mlops_training import ShardPlan, ShardPlanError, accelerate_config, diagnose


def _fsdp(**fsdp: object) -> FSDPConfig:
    return FSDPConfig.model_validate(fsdp)


# (config, world, per node) → (strategy, replicate, shard, mesh, reshard): the table in parallelize's old
# docstring and PyTorch's FSDP1 → FSDP2 migration notes, written out by hand.
@pytest.mark.parametrize(
    ("fsdp", "world", "per_node", "expected"),
    [
        ({}, 8, 4, ("FULL_SHARD", 1, 8, (8,), True)),
        ({"sharding_strategy": "SHARD_GRAD_OP"}, 8, 4, ("SHARD_GRAD_OP", 1, 8, (8,), False)),
        ({"sharding_strategy": "HYBRID_SHARD"}, 8, 4, ("HYBRID_SHARD", 2, 4, (2, 4), True)),
        ({"sharding_strategy": "HYBRID_SHARD", "hybrid_shard_group_size": 2}, 8, 4,
         ("HYBRID_SHARD", 4, 2, (4, 2), True)),
        ({"sharding_strategy": "NO_SHARD"}, 8, 4, ("NO_SHARD", 8, 1, (8, 1), False)),
        ({"parallelism": "ddp", "sharding_strategy": "HYBRID_SHARD"}, 8, 4, ("DDP", 8, 1, (8,), False)),
        ({"reshard_after_forward": False}, 2, 2, ("FULL_SHARD", 1, 2, (2,), False)),
        ({"sharding_strategy": "SHARD_GRAD_OP", "reshard_after_forward": True}, 2, 2,
         ("SHARD_GRAD_OP", 1, 2, (2,), True)),
    ],
)
def test_each_strategy_resolves_to_its_degrees(fsdp: dict, world: int, per_node: int, expected: tuple) -> None:
    plan = ShardPlan.from_fsdp(_fsdp(**fsdp), world_size=world, ranks_per_node=per_node)
    assert (plan.strategy, plan.dp_replicate, plan.dp_shard, plan.mesh_shape, plan.reshard_after_forward) == expected
    assert plan.dp_replicate * plan.dp_shard == world
    assert len(plan.mesh_dim_names) == len(plan.mesh_shape)
    assert plan.nodes == world // per_node


def test_resolve_defaults_to_the_configured_world_and_keeps_the_policies() -> None:
    training = TrainingConfig.model_validate({"nproc": 4, "nnodes": 2, "fsdp": {
        "cpu_offload": True, "activation_checkpointing": True,
        "mixed_precision": {"param_dtype": "bfloat16", "reduce_dtype": "float32"}}})
    plan = ShardPlan.resolve(training)
    assert (plan.world_size, plan.ranks_per_node, plan.nodes) == (8, 4, 2)
    assert (plan.cpu_offload, plan.activation_checkpointing, plan.param_dtype, plan.reduce_dtype) == (
        True, True, "bfloat16", "float32")


def test_the_plan_is_frozen() -> None:
    plan = ShardPlan.from_fsdp(_fsdp(), world_size=2, ranks_per_node=2)
    with pytest.raises(AttributeError):
        plan.dp_shard = 1  # type: ignore[misc]


def test_a_group_that_does_not_divide_the_world_is_refused_with_the_value() -> None:
    with pytest.raises(ShardPlanError, match="hybrid_shard_group_size=3 does not divide world size 8"):
        ShardPlan.from_fsdp(_fsdp(sharding_strategy="HYBRID_SHARD", hybrid_shard_group_size=3), world_size=8,
                            ranks_per_node=4)
    with pytest.raises(ShardPlanError, match="hybrid_shard_group_size=16 does not divide world size 8"):
        ShardPlan.from_fsdp(_fsdp(sharding_strategy="HYBRID_SHARD", hybrid_shard_group_size=16), world_size=8,
                            ranks_per_node=8)


def test_an_ignored_setting_becomes_a_doctor_warning() -> None:
    plan = ShardPlan.from_fsdp(_fsdp(hybrid_shard_group_size=2), world_size=4, ranks_per_node=4)
    assert plan.ignored == ("hybrid_shard_group_size is ignored with sharding_strategy 'FULL_SHARD'",)
    d = diagnose(TrainingConfig(fsdp=_fsdp(hybrid_shard_group_size=2)), world_size=4, local_world_size=4, cuda=True)
    assert list(plan.ignored) == [w for w in d.warnings if "hybrid" in w]


def test_candidates_cover_every_strategy_once_and_drop_hybrid_equal_to_full_shard() -> None:
    one_node = [p.strategy for p in ShardPlan.candidates(_fsdp(), world_size=8, ranks_per_node=8)]
    assert one_node == ["DDP", "NO_SHARD", "SHARD_GRAD_OP", "FULL_SHARD"]
    two_nodes = [p.strategy for p in ShardPlan.candidates(_fsdp(), world_size=16, ranks_per_node=8)]
    assert two_nodes == ["DDP", "NO_SHARD", "SHARD_GRAD_OP", "FULL_SHARD", "HYBRID_SHARD"]
    # A configured override is the configured strategy's, not every candidate's.
    shardgrad = next(p for p in ShardPlan.candidates(_fsdp(reshard_after_forward=True), world_size=2,
                                                     ranks_per_node=2) if p.strategy == "SHARD_GRAD_OP")
    assert shardgrad.reshard_after_forward is False


def test_accelerate_export_reads_the_plan() -> None:
    hybrid = TrainingConfig.model_validate({"nproc": 4, "nnodes": 2, "fsdp": {
        "sharding_strategy": "HYBRID_SHARD", "hybrid_shard_group_size": 2}})
    doc, _ = accelerate_config(hybrid)
    assert doc["parallelism_config"] == {"parallelism_config_dp_replicate_size": 4,
                                         "parallelism_config_dp_shard_size": 2}
    bad = hybrid.model_copy(update={"fsdp": hybrid.fsdp.model_copy(update={"hybrid_shard_group_size": 3})})
    with pytest.raises(ShardPlanError, match="hybrid_shard_group_size=3"):
        accelerate_config(bad)


def test_only_the_shard_plan_reads_the_sharding_strategy_setting(repo_root: Path) -> None:
    found = subprocess.run(["grep", "-rln", r"fsdp\.sharding_strategy", "packages", "--include=*.py"],
                           capture_output=True, text=True, cwd=repo_root, check=False).stdout.split()
    assert found == ["packages/training/src/mlops_training/shard_plan.py"]
