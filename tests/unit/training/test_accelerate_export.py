"""The exported Accelerate config is read by Accelerate's own classes into the same FSDP2 settings."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from accelerate.commands.config.config_args import ClusterConfig, load_config_from_file
from accelerate.utils import DistributedType

from mlops_config import TrainingConfig
from mlops_training import write_accelerate_config


def test_transformer_wrap_full_shard_bf16_round_trips(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    training = TrainingConfig.model_validate({
        "model": "causal_lm", "nproc": 4,
        "fsdp": {"mixed_precision": {"param_dtype": "bfloat16", "reduce_dtype": "float32"},
                 "cpu_offload": True, "activation_checkpointing": True},
    })
    path = tmp_path / "acc.yaml"
    write_accelerate_config(training, path)
    cfg = load_config_from_file(str(path))
    assert isinstance(cfg, ClusterConfig)
    assert cfg.distributed_type == DistributedType.FSDP
    assert cfg.mixed_precision == "bf16"
    assert cfg.num_processes == 4
    fsdp = cfg.fsdp_config
    assert fsdp["fsdp_version"] == 2
    assert fsdp["fsdp_reshard_after_forward"] is True
    assert fsdp["fsdp_transformer_layer_cls_to_wrap"] == "LlamaDecoderLayer"
    # What `accelerate launch --config_file` does: parse, merge the file, turn it into FSDP_* env vars...
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils import FullyShardedDataParallelPlugin
    from accelerate.utils.launch import prepare_multi_gpu_env

    args, _, _ = _validate_launch_command(launch_command_parser().parse_args(["--config_file", str(path), "t.py"]))
    for key, value in prepare_multi_gpu_env(args).items():
        if key.startswith(("FSDP_", "ACCELERATE_")):
            monkeypatch.setenv(key, value)
    # ...which the plugin the user's script builds reads back.
    plugin = FullyShardedDataParallelPlugin()
    assert plugin.fsdp_version == 2
    assert plugin.reshard_after_forward is True
    assert plugin.activation_checkpointing is True
    assert plugin.transformer_cls_names_to_wrap == ["LlamaDecoderLayer"]
    assert type(plugin.cpu_offload).__name__ == "CPUOffloadPolicy"
    assert os.environ["ACCELERATE_MIXED_PRECISION"] == "bf16"


def test_size_policy_shard_grad_op_and_hybrid(tmp_path: Path) -> None:
    sgo = TrainingConfig.model_validate({"fsdp": {"sharding_strategy": "SHARD_GRAD_OP",
                                                  "wrap_policy": {"kind": "size", "min_num_params": 1234}}})
    write_accelerate_config(sgo, tmp_path / "a.yaml")
    cfg = load_config_from_file(str(tmp_path / "a.yaml"))
    assert cfg.fsdp_config["fsdp_reshard_after_forward"] is False
    assert cfg.fsdp_config["fsdp_auto_wrap_policy"] == "SIZE_BASED_WRAP"
    assert cfg.fsdp_config["fsdp_min_num_params"] == 1234
    hybrid = TrainingConfig.model_validate({"nproc": 4, "nnodes": 2, "rdzv_endpoint": "head:29400",
                                            "fsdp": {"sharding_strategy": "HYBRID_SHARD"}})
    write_accelerate_config(hybrid, tmp_path / "h.yaml")
    cfg = load_config_from_file(str(tmp_path / "h.yaml"))
    assert cfg.parallelism_config == {"parallelism_config_dp_replicate_size": 2, "parallelism_config_dp_shard_size": 4}
    assert (cfg.main_process_ip, cfg.main_process_port, cfg.num_machines) == ("head", 29400, 2)
