"""Where a pretrained checkpoint comes from: a local folder in place, a URL copied by fsspec, bad folders refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlops_training.errors import TrainingError
from mlops_training.pretrained import resolve_checkpoint


def _folder(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text('{"model_type": "llama"}')
    (path / "model.safetensors").write_bytes(b"x")
    (path / "tokenizer.json").write_text("{}")
    return path


def test_a_relative_path_resolves_against_the_root_in_place(tmp_path: Path) -> None:
    _folder(tmp_path / "ckpt" / "base")
    assert resolve_checkpoint("ckpt/base", tmp_path, tmp_path / "cache") == tmp_path / "ckpt" / "base"
    assert not (tmp_path / "cache").exists()


def test_a_url_is_copied_once_into_the_cache(tmp_path: Path) -> None:
    src = _folder(tmp_path / "remote" / "base")
    local = resolve_checkpoint(f"file://{src}", tmp_path, tmp_path / "cache")
    assert local.parent == tmp_path / "cache"
    assert sorted(p.name for p in local.iterdir()) == [".complete", "config.json", "model.safetensors",
                                                       "tokenizer.json"]
    (src / "config.json").unlink()  # a second resolve reuses the complete copy, it does not fetch again
    assert resolve_checkpoint(f"file://{src}", tmp_path, tmp_path / "cache") == local


def test_a_folder_without_config_or_safetensors_is_refused_by_name(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(TrainingError, match=r"'empty'.*no config\.json"):
        resolve_checkpoint("empty", tmp_path, tmp_path / "cache")
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "config.json").write_text("{}")
    (bare / "pytorch_model.bin").write_bytes(b"x")
    with pytest.raises(TrainingError, match=r"no \*\.safetensors.*never pickle"):
        resolve_checkpoint("bare", tmp_path, tmp_path / "cache")


def _llama(folder: Path, context: int = 64) -> Path:
    from transformers import LlamaConfig

    folder.mkdir(parents=True)
    LlamaConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                num_key_value_heads=2, vocab_size=40, max_position_embeddings=context).save_pretrained(str(folder))
    (folder / "model.safetensors").write_bytes(b"x")  # never read by the check
    return folder


def _training(*sets: str):
    from mlops_config import load_config

    loaded = load_config(model="llm-sft", overrides=["training.causal_lm.checkpoint=ckpt", *sets], environ={})
    return loaded.config.training


def test_the_launch_check_names_context_wrap_class_and_ddp_before_any_worker(tmp_path: Path) -> None:
    from mlops_training.pretrained import check_pretrained

    _llama(tmp_path / "ckpt", context=64)
    assert check_pretrained(_training("training.causal_lm.seq_len=64"), tmp_path) == []
    [too_long] = check_pretrained(_training("training.causal_lm.seq_len=65"), tmp_path)
    assert "seq_len=65 exceeds the checkpoint's context (max_position_embeddings=64" in too_long
    [wrap] = check_pretrained(_training("training.fsdp.wrap_policy.transformer_layer_cls=[GPT2Block]"), tmp_path)
    assert "['GPT2Block'] matches no layer" in wrap and "LlamaDecoderLayer" in wrap
    [ddp] = check_pretrained(_training("training.fsdp.parallelism=ddp", "training.causal_lm.seq_len=32"), tmp_path)
    assert "parallelism='ddp'" in ddp
    [missing] = check_pretrained(_training("training.causal_lm.checkpoint=elsewhere"), tmp_path)
    assert "'elsewhere'" in missing and "no config.json" in missing
