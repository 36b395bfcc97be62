"""Instruction data for language models: the JSONL format, how an example becomes tokens, and its validation gate.

A dataset is JSONL, one object per line: ``{"prompt": str, "completion": str}``. An example is the token sequence
``[bos] + encode(prompt) + encode(completion) + [eos]``; only the completion and ``eos`` are learned (the prompt
tokens get label ``-100``). :func:`encode_example` is the one definition: the gate counts tokens with it and
training builds its batches with it, so "too long" means exactly what training would have to cut.

The gate (:func:`validate_instructions`) reads the raw bytes line by line and quarantines, with every reason
that applies:

- ``invalid_utf8``: the line is not UTF-8;
- ``not_json`` / ``not_an_object``: not a JSON object;
- ``missing:<field>``, ``wrong_type:<field>`` (not a string), ``empty:<field>`` (blank after stripping),
  ``unexpected_field:<name>``;
- ``too_long``: the encoded example exceeds ``max_tokens``;
- ``duplicate``: the same (prompt, completion) as an earlier accepted line (exact, after Unicode NFC).

Blank lines are records too (``blank_line``): accepted + quarantined = input lines, always. Outputs in
``out_dir``: ``accepted.jsonl`` (canonical JSON, input order), ``quarantine.jsonl`` (``line``, ``reasons``,
``raw`` text or ``raw_base64`` where it is not UTF-8) and ``report.json``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import unicodedata
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from mlops_features.errors import DataError

FIELDS = ("prompt", "completion")
IGNORE_INDEX = -100
"""Label of a token that is not learned (prompt, padding): what ``torch.nn.functional.cross_entropy`` skips."""


class Tokenizer(Protocol):
    """What the gate and training need of a tokenizer (a ``transformers`` tokenizer has it)."""

    bos_token_id: int | None
    eos_token_id: int | None

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...


def encode_example(tokenizer: Tokenizer, prompt: str, completion: str) -> tuple[list[int], int]:
    """Token ids of one example and how many leading tokens are prompt (not learned).

    Raises:
        DataError: the tokenizer has no end-of-sequence token (a completion could never end).
    """
    if tokenizer.eos_token_id is None:
        raise DataError("the tokenizer has no eos_token; a fine-tuned model could never learn to stop")
    head = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
    prompt_ids = head + tokenizer.encode(prompt, add_special_tokens=False)
    ids = prompt_ids + tokenizer.encode(completion, add_special_tokens=False) + [tokenizer.eos_token_id]
    return ids, len(prompt_ids)


@dataclass
class InstructionGateResult:
    """What the gate did with one JSONL file."""

    source: str
    input_rows: int
    accepted_rows: int
    quarantined_rows: int
    reasons: dict[str, int] = field(default_factory=dict)
    max_tokens: int = 0
    accepted_sha256: str = ""
    accepted_path: str = ""
    quarantine_path: str = ""
    report_path: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _check(line: bytes, tokenizer: Tokenizer, max_tokens: int) -> tuple[dict[str, str] | None, list[str]]:
    """The example of one line, or ``None`` and why not."""
    if not line.strip():
        return None, ["blank_line"]
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        return None, ["invalid_utf8"]
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        return None, ["not_json"]
    if not isinstance(doc, dict):
        return None, ["not_an_object"]
    reasons = [f"unexpected_field:{k}" for k in sorted(doc) if k not in FIELDS]
    for name in FIELDS:
        if name not in doc or doc[name] is None:
            reasons.append(f"missing:{name}")
        elif not isinstance(doc[name], str):
            reasons.append(f"wrong_type:{name}")
        elif not doc[name].strip():
            reasons.append(f"empty:{name}")
    if reasons:
        return None, reasons
    example = {name: unicodedata.normalize("NFC", doc[name]) for name in FIELDS}
    ids, _ = encode_example(tokenizer, example["prompt"], example["completion"])
    if len(ids) > max_tokens:
        return None, ["too_long"]
    return example, []


def validate_instructions(source: Path, out_dir: Path, tokenizer: Tokenizer, *,
                          max_tokens: int) -> InstructionGateResult:
    """Split ``source`` into accepted and quarantined examples under ``out_dir`` (overwritten); see the module doc.

    Raises:
        DataError: ``source`` cannot be read or ``max_tokens`` is below 2.
    """
    if max_tokens < 2:
        raise DataError(f"max_tokens={max_tokens!r}: an example needs at least 2 tokens (prompt start and eos)")
    try:
        raw = source.read_bytes()
    except OSError as exc:
        raise DataError(f"instruction dataset {str(source)!r} cannot be read: {exc}") from None
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # the newline that ends the last record is not a record
    accepted: list[str] = []
    quarantined: list[str] = []
    counts: dict[str, int] = {}
    seen: set[tuple[str, str]] = set()
    for number, line in enumerate(lines, start=1):
        example, reasons = _check(line.rstrip(b"\r"), tokenizer, max_tokens)
        if example is not None:
            key = (example["prompt"], example["completion"])
            if key in seen:
                reasons = ["duplicate"]
            else:
                seen.add(key)
                accepted.append(json.dumps(example, ensure_ascii=False, sort_keys=True))
                continue
        for reason in reasons:
            counts[reason] = counts.get(reason, 0) + 1
        record: dict[str, Any] = {"line": number, "reasons": reasons}
        try:
            record["raw"] = line.decode("utf-8")
        except UnicodeDecodeError:
            record["raw_base64"] = base64.b64encode(line).decode("ascii")
        quarantined.append(json.dumps(record, ensure_ascii=False, sort_keys=True))
    out_dir.mkdir(parents=True, exist_ok=True)
    body = "".join(a + "\n" for a in accepted)
    accepted_path, quarantine_path, report_path = (out_dir / "accepted.jsonl", out_dir / "quarantine.jsonl",
                                                   out_dir / "report.json")
    accepted_path.write_text(body, encoding="utf-8")
    quarantine_path.write_text("".join(q + "\n" for q in quarantined), encoding="utf-8")
    result = InstructionGateResult(
        source=str(source), input_rows=len(lines), accepted_rows=len(accepted), quarantined_rows=len(quarantined),
        reasons=dict(sorted(counts.items())), max_tokens=max_tokens,
        accepted_sha256=hashlib.sha256(body.encode("utf-8")).hexdigest(), accepted_path=str(accepted_path),
        quarantine_path=str(quarantine_path), report_path=str(report_path))
    assert result.accepted_rows + result.quarantined_rows == result.input_rows
    report_path.write_text(json.dumps(result.to_json(), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return result


def read_examples(path: Path) -> list[dict[str, str]]:
    """The examples of an ``accepted.jsonl`` the gate wrote."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
