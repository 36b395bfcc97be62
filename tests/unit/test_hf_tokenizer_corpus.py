"""The test tokenizer (tests/hf_checkpoint.py) is trained on the frozen corpus under tests/tokenizer_corpus, never on
the live README.md, docs/ or datasets/: a prose edit must not retrain every test LM.

The pinned digests are of the vocab and merges the tokenizer had when it was still trained on README.md, docs/*.md
and datasets/*.jsonl in place (5e25695, the clean-clone CI record's commit): the frozen copy reproduces them, so
every LM test sees the same tokens it was written against."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tests import hf_checkpoint

pytestmark = pytest.mark.unit

VOCAB_SHA256_16 = "ec4cb6ffd216d0f6"  # sha256 of json.dumps(vocab, sort_keys=True), first 16 hex digits
MERGES_SHA256_16 = "7ab92351f2157d70"


def _digest(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def test_the_tokenizer_reads_only_the_frozen_corpus_and_keeps_its_vocab(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    read: list[Path] = []
    real = Path.read_text

    def recording(self: Path, *args: object, **kwargs: object) -> str:
        read.append(self.resolve())
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", recording)
    hf_checkpoint.make_tokenizer(tmp_path)
    monkeypatch.undo()
    corpus, repo = hf_checkpoint.CORPUS.resolve(), hf_checkpoint.REPO_ROOT.resolve()
    in_repo = [p for p in read if p.is_relative_to(repo)]  # (imports read package metadata elsewhere)
    assert [p for p in in_repo if p.parent != corpus] == []  # no README.md, docs/*.md, datasets/*.jsonl
    assert len(in_repo) == len(list(corpus.glob("*.txt"))) == 11  # README.md, the 9 docs, instructions.jsonl
    model = json.loads((tmp_path / "tokenizer.json").read_text())["model"]
    assert (len(model["vocab"]), _digest(model["vocab"]), _digest(model["merges"])) == (
        512, VOCAB_SHA256_16, MERGES_SHA256_16)
