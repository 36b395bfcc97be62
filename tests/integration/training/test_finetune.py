"""Fine-tuning a pretrained checkpoint (made here) with real torchrun workers: full and LoRA on FSDP2, bf16 compute,
activation checkpointing; DCP checkpoints resume exactly (same world size) and reshard 2 → 1; the exported
Hugging Face folder opens in plain ``transformers`` and decodes greedily exactly as the trained model does.

"The trained model" is rebuilt independently of the export: the run's last DCP checkpoint read with
``torch.distributed.checkpoint`` into a plain (peft-wrapped, unmerged for LoRA) model from the pretrained folder.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch

from mlops_config import PlatformConfig, load_config
from mlops_training import TrainResult, launch

pytestmark = [pytest.mark.integration, pytest.mark.slow]

STEPS = ("training.max_steps=8", "training.checkpoint.every_steps=4", "training.checkpoint.keep_last=4",
         "training.eval_every=0", "training.warmup_steps=2", "training.batch_size=16", "training.lr=0.01")
PROMPTS = ["Add 12 and 30.\nAnswer:", "Reverse the words: stone lamp\nAnswer:",
           "Write in capitals: green tiger\nAnswer:"]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory, repo_root: Path) -> Path:
    base = tmp_path_factory.mktemp("repo")
    shutil.copytree(repo_root / "configs", base / "configs")
    shutil.copytree(repo_root / "datasets", base / "datasets")
    sys.path.insert(0, str(repo_root / "tests"))
    try:
        from hf_checkpoint import make_checkpoint
    finally:
        sys.path.pop(0)
    make_checkpoint(base / "pretrained", "tiny", seed=3)
    return base


def config(root: Path, finetune: str, *sets: str) -> PlatformConfig:
    return load_config(model="llm-sft", config_dir=root / "configs", environ={},
                       overrides=["training.causal_lm.checkpoint=pretrained", f"training.causal_lm.finetune={finetune}",
                                  *STEPS, *sets]).config


@pytest.fixture(scope="module")
def full(root: Path) -> TrainResult:
    result = launch(config(root, "full"), root, run_name="full", track=False)
    assert result is not None and result.steps == 8
    return result


@pytest.fixture(scope="module")
def lora(root: Path) -> TrainResult:
    """The LoRA run, tracked: logged to MLflow under ``root`` and registered as version 1 (tracking only adds the
    run's record after training; the tests of its weights and checkpoints read them as an untracked run's)."""
    result = launch(config(root, "lora"), root, run_name="lora", track=True)
    assert result is not None and result.steps == 8
    return result


def _resume_from_step4(root: Path, source: str, name: str, finetune: str, *sets: str) -> TrainResult:
    """A new run whose only checkpoint is ``source``'s step 4 (as if it had stopped there), run to the end."""
    src = root / ".mlops/checkpoints" / source / "step_00000004"
    shutil.copytree(src, root / ".mlops/checkpoints" / name / src.name)
    result = launch(config(root, finetune, *sets), root, run_name=name, track=False)
    assert result is not None and result.resumed_from_step == 4 and result.steps == 8
    return result


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def test_full_finetune_trains_every_weight(root: Path, full: TrainResult) -> None:
    base, tuned = _weights(root / "pretrained"), _weights(full.export_dir)
    assert set(tuned) == set(base)
    assert all(not torch.equal(base[k], tuned[k]) for k in base if "norm" not in k)  # every matrix moved
    assert full.metrics["val_tokens"] > 0


def test_full_finetune_resumes_bit_identical(root: Path, full: TrainResult) -> None:
    resumed = _resume_from_step4(root, "full", "full-resumed", "full")
    assert resumed.weights_sha256 == full.weights_sha256


def test_resharding_two_ranks_to_one_continues_the_same_training(root: Path, full: TrainResult) -> None:
    one = _resume_from_step4(root, "full", "full-one-rank", "full", "training.nproc=1")
    manifest = json.loads((root / ".mlops/checkpoints/full-one-rank/step_00000008/manifest.json").read_text())
    assert manifest["world_size"] == 1
    a, b = _weights(full.export_dir), _weights(one.export_dir)
    # Same data, same objective (token-weighted over the global batch), only the reduction order differs.
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=0, atol=2e-3)
    assert one.metrics["val_loss"] == pytest.approx(full.metrics["val_loss"], abs=1e-2)


def _checkpoint_state(step_dir: Path, finetune: str, root: Path) -> dict[str, torch.Tensor]:
    """The model weights of a DCP checkpoint, read without any process group into a plain model's state dict."""
    model = _plain_model(root, finetune)
    import torch.distributed.checkpoint as dcp

    state = {"model": {k: v for k, v in model.state_dict().items() if k in _saved_keys(step_dir)}}
    dcp.load(state, checkpoint_id=str(step_dir))
    return state["model"]


def _saved_keys(step_dir: Path) -> set[str]:
    from torch.distributed.checkpoint import FileSystemReader

    meta = FileSystemReader(str(step_dir)).read_metadata()
    return {k.removeprefix("model.") for k in meta.state_dict_metadata if k.startswith("model.")}


def _plain_model(root: Path, finetune: str) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(root / "pretrained"))
    if finetune == "lora":
        from mlops_config import LoRAConfig
        from mlops_training.lora import apply_lora

        model = apply_lora(model, LoRAConfig())
    return model.eval()


def _greedy(model: torch.nn.Module, tokenizer, prompts: list[str]) -> list[list[int]]:
    out = []
    for p in prompts:
        ids = tokenizer(p, return_tensors="pt").input_ids
        with torch.no_grad():
            gen = model.generate(input_ids=ids, max_new_tokens=12, do_sample=False,
                                 pad_token_id=tokenizer.pad_token_id)
        out.append(gen[0, ids.shape[1]:].tolist())
    return out


@pytest.mark.parametrize("finetune", ["full", "lora"])
def test_exported_folder_opens_in_plain_transformers_and_decodes_as_the_trained_model(
        root: Path, finetune: str, request: pytest.FixtureRequest) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    result: TrainResult = request.getfixturevalue(finetune)
    folder = result.export_dir
    exported = AutoModelForCausalLM.from_pretrained(str(folder)).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    assert type(exported).__name__ == "LlamaForCausalLM"  # merged: no peft in the way
    assert tokenizer.get_vocab() == AutoTokenizer.from_pretrained(str(root / "pretrained")).get_vocab()
    assert tokenizer.chat_template and tokenizer.eos_token == "</s>"
    assert (folder / "generation_config.json").is_file()
    trained = _plain_model(root, finetune)
    state = _checkpoint_state(root / ".mlops/checkpoints" / finetune / "step_00000008", finetune, root)
    missing, unexpected = trained.load_state_dict(state, strict=False)
    assert not unexpected and all("rotary" in m for m in missing)
    assert _greedy(exported, tokenizer, PROMPTS) == _greedy(trained, tokenizer, PROMPTS)
    meta = json.loads((folder / "model.json").read_text())
    assert meta["kind"] == "hf_causal_lm" and meta["features"]["gate"]["quarantined_rows"] == 0
    from mlops_model import weights_hash

    assert meta["weights_sha256"] == weights_hash(_weights(folder)) == result.weights_sha256


def test_lora_trains_only_adapters(root: Path, lora: TrainResult) -> None:
    state = _checkpoint_state(root / ".mlops/checkpoints/lora/step_00000008", "lora", root)
    base = _weights(root / "pretrained")
    from mlops_training.lora import base_key, is_adapter

    adapters = [k for k in state if is_adapter(k)]
    assert len(adapters) == 2 * 4 * 2  # A and B × q/k/v/o × 2 layers
    assert any(state[k].abs().sum() > 0 for k in adapters if ".lora_B." in k)  # B left zero: nothing learned
    for k, v in state.items():
        if not is_adapter(k):
            assert torch.equal(v, base[base_key(k)]), k  # the frozen base is bit-for-bit the checkpoint's


def test_lora_resumes_bit_identical(root: Path, lora: TrainResult) -> None:
    resumed = _resume_from_step4(root, "lora", "lora-resumed", "lora")
    assert resumed.weights_sha256 == lora.weights_sha256


def test_lora_reshards_two_ranks_to_one(root: Path, lora: TrainResult) -> None:
    one = _resume_from_step4(root, "lora", "lora-one-rank", "lora", "training.nproc=1")
    a = _checkpoint_state(root / ".mlops/checkpoints/lora/step_00000008", "lora", root)
    b = _checkpoint_state(root / ".mlops/checkpoints/lora-one-rank/step_00000008", "lora", root)
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=0, atol=2e-3)
    assert one.metrics["val_loss"] == pytest.approx(lora.metrics["val_loss"], abs=1e-2)


def test_the_adapter_alone_applies_to_the_base_as_the_merged_export_decodes(root: Path, lora: TrainResult,
                                                                            tmp_path: Path) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mlops_config import LoRAConfig
    from mlops_training.hf_export import export_hf

    state = _checkpoint_state(root / ".mlops/checkpoints/lora/step_00000008", "lora", root)
    arch = json.loads((lora.export_dir / "model.json").read_text())["architecture"]
    folder = export_hf(tmp_path / "adapter", state, arch, root / "pretrained", {"lineage": {}}, lora=LoRAConfig(),
                       adapter_only=True)
    assert {"adapter_config.json", "adapter_model.safetensors", "tokenizer.json"} <= {p.name for p in folder.iterdir()}
    assert not (folder / "model.safetensors").exists()
    applied = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(str(root / "pretrained")), str(folder))
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    merged = AutoModelForCausalLM.from_pretrained(str(lora.export_dir))
    assert _greedy(applied.eval(), tokenizer, PROMPTS) == _greedy(merged.eval(), tokenizer, PROMPTS)


def test_a_tracked_run_registers_the_folder_with_the_fraud_models_lineage(root: Path, lora: TrainResult) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mlops_core import mlflow_client
    from mlops_training.pretrained import resolve_checkpoint

    result = lora  # the module's only tracked run
    assert result.run_id and result.model_version == "1"
    client = mlflow_client(config(root, "lora").tracking, root)
    tags = client.get_run(result.run_id).data.tags
    assert tags["mlops.weights_sha256"] == result.weights_sha256 and tags["mlops.model_kind"] == "hf_causal_lm"
    assert tags["mlops.data_hash"] == result.data_hash and tags["mlops.finetune"] == "lora"
    assert (tags["mlops.dataset"], tags["mlops.base_checkpoint"]) == ("datasets/instructions.jsonl", "pretrained")
    assert (tags["mlops.seed"], tags["mlops.world_size"]) == ("42", "2") and "mlops.git_commit" in tags
    version = client.get_model_version(result.model_name, "1")
    assert version.run_id == result.run_id and version.tags["mlops.weights_sha256"] == result.weights_sha256
    assert not client.get_registered_model(result.model_name).aliases  # the gates decide promotion
    # The registered version is itself a checkpoint a next fine-tune can name (models:/...), and opens unchanged.
    local = resolve_checkpoint(f"models:/{result.model_name}/1", root, tmp := root / ".mlops/fetched",
                               config(root, "lora").tracking)
    assert local.is_relative_to(tmp)
    model = AutoModelForCausalLM.from_pretrained(str(local)).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(local))
    exported = AutoModelForCausalLM.from_pretrained(str(result.export_dir)).eval()
    assert _greedy(model, tokenizer, PROMPTS[:1]) == _greedy(exported, tokenizer, PROMPTS[:1])
