"""The instruction-data gate: each bad kind of line is quarantined with its reason, accepted + quarantined = input.

Token counts come from a hand-built tokenizer (one token per UTF-8 byte), so every expected length is arithmetic.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlops_features import DataError, encode_example, read_examples, validate_instructions


class ByteTokenizer:
    """One token per UTF-8 byte (ids 3..258); bos 1, eos 2."""

    bos_token_id = 1
    eos_token_id = 2

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [b + 3 for b in text.encode("utf-8")]


def _run(tmp_path: Path, lines: list[bytes], max_tokens: int = 40):
    src = tmp_path / "in.jsonl"
    src.write_bytes(b"\n".join(lines) + b"\n")
    result = validate_instructions(src, tmp_path / "out", ByteTokenizer(), max_tokens=max_tokens)
    quarantined = [json.loads(x) for x in (tmp_path / "out" / "quarantine.jsonl").read_text().splitlines()]
    return result, read_examples(tmp_path / "out" / "accepted.jsonl"), quarantined


def _line(**doc: object) -> bytes:
    return json.dumps(doc).encode()


@pytest.mark.parametrize(("line", "reasons"), [
    (b'{"prompt": "a", "completion": "\xff\xfe"}', ["invalid_utf8"]),
    (b'{"prompt": "a", "completion": ', ["not_json"]),
    (b'["a", "b"]', ["not_an_object"]),
    (_line(prompt="a"), ["missing:completion"]),
    (_line(completion="b"), ["missing:prompt"]),
    (_line(prompt=None, completion="b"), ["missing:prompt"]),
    (_line(prompt=3, completion="b"), ["wrong_type:prompt"]),
    (_line(prompt="a", completion=["b"]), ["wrong_type:completion"]),
    (_line(prompt="  ", completion="b"), ["empty:prompt"]),
    (_line(prompt="a", completion="\n"), ["empty:completion"]),
    (_line(prompt="a", completion="b", answer="c"), ["unexpected_field:answer"]),
    (_line(prompt=7, completion=""), ["wrong_type:prompt", "empty:completion"]),
    (b"   ", ["blank_line"]),
])
def test_each_bad_line_is_quarantined_with_its_reasons(tmp_path: Path, line: bytes, reasons: list[str]) -> None:
    good = _line(prompt="Add 1 and 2.", completion=" 3")
    result, accepted, quarantined = _run(tmp_path, [good, line])
    assert accepted == [{"prompt": "Add 1 and 2.", "completion": " 3"}]
    assert [q["line"] for q in quarantined] == [2]
    assert quarantined[0]["reasons"] == reasons
    assert (result.input_rows, result.accepted_rows, result.quarantined_rows) == (2, 1, 1)
    if reasons == ["invalid_utf8"]:  # the raw bytes survive for inspection
        import base64

        assert base64.b64decode(quarantined[0]["raw_base64"]) == line


def test_too_long_counts_bos_prompt_completion_and_eos(tmp_path: Path) -> None:
    # bos + 10 + 8 + eos = 20 bytes-as-tokens: accepted at max 20, quarantined at max 19.
    line = _line(prompt="p" * 10, completion="c" * 8)
    assert validate_instructions(_write(tmp_path / "a", line), tmp_path / "a", ByteTokenizer(),
                                 max_tokens=20).accepted_rows == 1
    result = validate_instructions(_write(tmp_path / "b", line), tmp_path / "b", ByteTokenizer(), max_tokens=19)
    assert result.quarantined_rows == 1 and result.reasons == {"too_long": 1}
    # Multi-byte text is counted in tokens, not characters: "é" is two bytes here.
    wide = _line(prompt="é" * 9, completion="c")  # 1 + 18 + 1 + 1 = 21 tokens for 10 characters
    assert validate_instructions(_write(tmp_path / "c", wide), tmp_path / "c", ByteTokenizer(),
                                 max_tokens=20).reasons == {"too_long": 1}


def _write(folder: Path, *lines: bytes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "in.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def test_duplicates_after_the_first_are_quarantined_including_unicode_forms(tmp_path: Path) -> None:
    composed, decomposed = "caf\u00e9", "cafe\u0301"  # the same text in NFC and NFD
    lines = [_line(prompt=composed, completion="x"), _line(prompt="b", completion="y"),
             _line(prompt=decomposed, completion="x"), _line(prompt="b", completion="y"),
             _line(prompt="b", completion="z")]
    result, accepted, quarantined = _run(tmp_path, lines)
    assert [q["line"] for q in quarantined] == [3, 4]
    assert all(q["reasons"] == ["duplicate"] for q in quarantined)
    assert [a["completion"] for a in accepted] == ["x", "y", "z"]
    assert result.reasons == {"duplicate": 2}


def test_accepted_plus_quarantined_is_the_input_on_a_mixed_file(tmp_path: Path) -> None:
    lines = [_line(prompt=f"q{i}", completion=f"a{i}") for i in range(7)]
    lines += [b"", b"{", _line(prompt="q0", completion="a0"), b"\xc3\x28", _line(prompt="x" * 50, completion="y")]
    result, accepted, quarantined = _run(tmp_path, lines)
    assert result.input_rows == 12 == len(accepted) + len(quarantined)
    assert len(accepted) == 7
    assert result.reasons == {"blank_line": 1, "duplicate": 1, "invalid_utf8": 1, "not_json": 1, "too_long": 1}
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    import hashlib

    assert report["accepted_sha256"] == hashlib.sha256((tmp_path / "out" / "accepted.jsonl").read_bytes()).hexdigest()


def test_the_committed_dataset_passes_whole(repo_root: Path, tmp_path: Path) -> None:
    result = validate_instructions(repo_root / "datasets" / "instructions.jsonl", tmp_path, ByteTokenizer(),
                                   max_tokens=128)
    assert result.quarantined_rows == 0 and result.accepted_rows == result.input_rows >= 200


def test_encode_example_marks_the_prompt_tokens() -> None:
    ids, prompt_len = encode_example(ByteTokenizer(), "ab", "c")
    assert ids == [1, ord("a") + 3, ord("b") + 3, ord("c") + 3, 2]
    assert prompt_len == 3


def test_bad_arguments_name_the_value(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="max_tokens=1"):
        validate_instructions(tmp_path / "x.jsonl", tmp_path, ByteTokenizer(), max_tokens=1)
    with pytest.raises(DataError, match=r"missing\.jsonl"):
        validate_instructions(tmp_path / "missing.jsonl", tmp_path, ByteTokenizer(), max_tokens=10)
