"""A pretrained checkpoint made here, never downloaded: a LLaMA-architecture model written with ``save_pretrained``
and a byte-level BPE tokenizer trained with the ``tokenizers`` library on this repository's own text (a frozen copy
under ``tests/tokenizer_corpus``, so editing the docs does not change it).

``make_checkpoint(folder, shape)`` writes a complete Hugging Face folder (config.json, model.safetensors,
generation_config.json, tokenizer.json + tokenizer_config.json with a chat template) that
``AutoModelForCausalLM`` / ``AutoTokenizer.from_pretrained`` open unchanged.
"""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
SPECIAL = {"bos": "<s>", "eos": "</s>", "pad": "<pad>", "unk": "<unk>"}
CHAT_TEMPLATE = (
    "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<s>assistant:{% endif %}"
)

# name -> LlamaConfig keyword arguments
SHAPES: dict[str, dict[str, int]] = {
    # Fine-tuning tests: a few seconds a run on 2 CPU processes.
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=256),
    # The LM latency test: "tiny" with twice the layers, a candidate that costs more per token.
    "tiny-deep": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=256),
    # The load-memory test: 63 M parameters (252 MB in fp32), so one of two shards (126 MB) stands well apart
    # from the whole model above the interpreter's own few hundred MB.
    "load": dict(hidden_size=768, intermediate_size=2048, num_hidden_layers=8, num_attention_heads=12,
                 num_key_value_heads=12, max_position_embeddings=512),
    # The fine-tune benchmark (benchmarks/llm_finetune.py): 3.4 M parameters, a step in well under a second.
    "small": dict(hidden_size=256, intermediate_size=768, num_hidden_layers=4, num_attention_heads=8,
                  num_key_value_heads=4, max_position_embeddings=256),
}


CORPUS = Path(__file__).resolve().parent / "tokenizer_corpus"
"""What the tokenizer is trained on: a frozen copy of README.md, docs/*.md and datasets/instructions.jsonl as they
were at 5e25695 (the files, in the order the tokenizer was first trained on them). It used to read those files in
place, so any prose edit retrained every test LM (other merges, other greedy answers); a copy kept here changes
only when someone means it to. Never edit it to follow the docs."""


def training_text() -> list[str]:
    """The frozen corpus (:data:`CORPUS`), one text a file, in file-name order."""
    files = sorted(CORPUS.glob("*.txt"))
    if not files:
        raise FileNotFoundError(f"{CORPUS}: no *.txt files; the test tokenizer is trained on them")
    return [f.read_text(encoding="utf-8") for f in files]


def make_tokenizer(folder: Path, vocab_size: int = 512) -> None:
    """Train a byte-level BPE on :func:`training_text` and save it as a ``transformers`` tokenizer folder."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=SPECIAL["unk"]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL.values()),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(training_text(), trainer=trainer)
    # Begin every encoded text with <s>, as a LLaMA tokenizer does: fine-tuning learns `<s> prompt completion </s>`
    # (mlops_features.encode_example), and serving encodes a completion prompt with the tokenizer's own special
    # tokens, so without this the served model saw every prompt without the <s> it was trained on.
    bos = tok.token_to_id(SPECIAL["bos"])
    tok.post_processor = processors.TemplateProcessing(single=f"{SPECIAL['bos']} $A", pair=f"{SPECIAL['bos']} $A $B",
                                                       special_tokens=[(SPECIAL["bos"], bos)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=SPECIAL["bos"], eos_token=SPECIAL["eos"],
                                   pad_token=SPECIAL["pad"], unk_token=SPECIAL["unk"], model_max_length=256)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(folder))


def make_checkpoint(folder: Path, shape: str = "tiny", *, seed: int = 0, vocab_size: int = 512) -> Path:
    """Write a random-weight LLaMA checkpoint of ``shape`` with its tokenizer into ``folder``; returns it."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    folder.mkdir(parents=True, exist_ok=True)
    make_tokenizer(folder, vocab_size)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))
    config = LlamaConfig(**SHAPES[shape], vocab_size=len(tok), bos_token_id=tok.bos_token_id,
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, tie_word_embeddings=False,
                         rms_norm_eps=1e-5)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                                               pad_token_id=tok.pad_token_id, do_sample=False)
    model.save_pretrained(str(folder))
    return folder


if __name__ == "__main__":  # the DVC stage `llm-base` (datasets/dvc.yaml): python tests/hf_checkpoint.py FOLDER
    import sys

    make_checkpoint(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "tiny")
