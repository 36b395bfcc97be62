"""The instruction set as committed: its generated part is exactly what ``datasets/make_instructions.py`` makes
after the hand-written lines, and its held-out split (the documented hash, recomputed here) shares no prompt with
the training split and holds every task."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path


def _held(row: dict[str, str]) -> bool:
    digest = hashlib.sha256(f"{row['prompt']}\x00{row['completion']}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < 0.1


def test_the_generated_part_is_the_generators_output(repo_root: Path) -> None:
    check = subprocess.run([sys.executable, str(repo_root / "datasets" / "make_instructions.py"), "--check"],
                           capture_output=True, text=True, timeout=60, check=False)
    assert check.returncode == 0, "datasets/instructions.jsonl differs from datasets/make_instructions.py's output"


def test_held_out_prompts_are_never_training_prompts_and_cover_every_task(repo_root: Path) -> None:
    rows = [json.loads(line) for line in (repo_root / "datasets" / "instructions.jsonl").read_text().splitlines()]
    held = [r for r in rows if _held(r)]
    train = {r["prompt"] for r in rows if not _held(r)}
    assert held and not {r["prompt"] for r in held} & train
    assert {r["prompt"].split(" ")[0] for r in held} == {"Write", "Reverse", "Add"}
    for r in rows:  # each completion is what its instruction asks (a hand-written line too)
        p, c = r["prompt"].removesuffix("\nAnswer:"), r["completion"]
        if p.startswith("Write in capitals: "):
            assert c == " " + p.removeprefix("Write in capitals: ").upper(), r
        elif p.startswith("Reverse the words: "):
            assert c == " " + " ".join(reversed(p.removeprefix("Reverse the words: ").split())), r
        else:
            a, b = p.removeprefix("Add ").removesuffix(".").split(" and ")
            assert c == f" {int(a) + int(b)}", r
