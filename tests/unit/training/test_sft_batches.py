"""Fine-tuning batches: right padding, labels -100 on prompt and padding, loss on completion tokens only.

The tokenizer is a real one trained here (tests/hf_checkpoint.py); expected labels and losses are built by hand
from its token ids and ``torch``'s own cross-entropy over the hand-picked positions.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from mlops_training.sft import encode_padded, held_out, token_loss_sum


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory, repo_root: Path):
    sys.path.insert(0, str(repo_root / "tests"))
    try:
        from hf_checkpoint import make_tokenizer
    finally:
        sys.path.pop(0)
    from transformers import AutoTokenizer

    folder = tmp_path_factory.mktemp("tok")
    make_tokenizer(folder)
    return AutoTokenizer.from_pretrained(str(folder))


def test_labels_cover_the_completion_and_eos_only(tokenizer) -> None:
    prompt, completion = "Add 1 and 2.\nAnswer:", " 3"
    p = tokenizer.encode(prompt, add_special_tokens=False)
    c = tokenizer.encode(completion, add_special_tokens=False)
    seq = [tokenizer.bos_token_id, *p, *c, tokenizer.eos_token_id]
    ids, labels = encode_padded(tokenizer, [{"prompt": prompt, "completion": completion}], 40)
    assert ids[0, : len(seq)].tolist() == seq
    assert (ids[0, len(seq):] == tokenizer.pad_token_id).all()
    # Position t predicts token t+1; learned targets are the completion's tokens and eos, nothing else.
    expected = np.full(40, -100)
    first = 1 + len(p)  # index of the first completion token in seq
    for t in range(first - 1, len(seq) - 1):
        expected[t] = seq[t + 1]
    assert labels[0].tolist() == expected.tolist()
    assert [x for x in labels[0] if x != -100] == [*c, tokenizer.eos_token_id]


def test_loss_is_the_sum_over_completion_positions_only(tokenizer) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2)).eval()
    examples = [{"prompt": "Write in capitals: lamp\nAnswer:", "completion": " LAMP"},
                {"prompt": "Add 4 and 5.\nAnswer:", "completion": " 9"}]
    ids, labels = encode_padded(tokenizer, examples, 32)
    x, y = torch.from_numpy(ids), torch.from_numpy(labels)
    with torch.no_grad():
        got = float(token_loss_sum(model, x, y))
        logp = torch.log_softmax(model(input_ids=x).logits.float(), dim=-1)
    by_hand = -sum(float(logp[i, t, y[i, t]]) for i in range(2) for t in range(32) if y[i, t] != -100)
    assert got == pytest.approx(by_hand, rel=1e-5)
    # Changing a padded position's token (right padding: nothing real attends to it) changes nothing.
    x2 = x.clone()
    x2[0, -1] = 7
    with torch.no_grad():
        assert float(token_loss_sum(model, x2, y)) == pytest.approx(got, rel=1e-6)


def test_the_validation_split_depends_on_the_text_not_the_position() -> None:
    examples = [{"prompt": f"q{i}", "completion": f"a{i}"} for i in range(400)]
    first = [held_out(e, 0.1) for e in examples]
    assert 20 <= sum(first) <= 60  # about 10 %
    assert [held_out(e, 0.1) for e in reversed(examples)] == list(reversed(first))
