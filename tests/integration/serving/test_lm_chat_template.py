"""A tokenizer without a chat template: the export writes the fallback one into the folder, and the server applies
the same to a bare folder; both give the prompt ``role: content`` lines then ``assistant:`` (written out by hand
below, tokenized by plain ``AutoTokenizer``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration]

REPO = Path(__file__).resolve().parents[3]
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Add 2 and 3."}]
BY_HAND = "system: Be brief.\nuser: Add 2 and 3.\nassistant:"


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Path:
    sys.path.insert(0, str(REPO / "tests"))
    try:
        from hf_checkpoint import make_checkpoint
    finally:
        sys.path.pop(0)
    folder = make_checkpoint(tmp_path_factory.mktemp("bare") / "ckpt")
    (folder / "chat_template.jinja").unlink()
    from transformers import AutoTokenizer

    assert AutoTokenizer.from_pretrained(str(folder)).chat_template is None
    return folder


def test_the_server_applies_the_fallback_template_to_a_bare_folder(bare: Path) -> None:
    from transformers import AutoTokenizer

    from mlops_serving.lm import CausalLM

    model = CausalLM("llm-sft", bare, "1")
    assert model.load()
    expected = AutoTokenizer.from_pretrained(str(bare))(BY_HAND, add_special_tokens=False)["input_ids"]
    assert model.encode_chat(MESSAGES) == list(expected)


def test_the_export_writes_a_chat_template_when_the_checkpoint_has_none(bare: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoTokenizer

    from mlops_training.hf_export import export_hf

    state = load_file(str(bare / "model.safetensors"))
    arch = AutoConfig.from_pretrained(str(bare)).to_dict()
    out = export_hf(tmp_path / "export", state, arch, bare, {}, lora=None)
    tok = AutoTokenizer.from_pretrained(str(out))
    assert tok.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False) == BY_HAND
