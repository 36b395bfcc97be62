"""The instruction set's generated part: ``datasets/instructions.jsonl`` is the 240 hand-written examples, then
these, made here from a fixed seed (nothing downloaded).

The 240 examples taught a fine-tune to repeat them and nothing more: trained to zero loss, a model answered 41-53 %
of the held-out prompts (new combinations of the same 16 words) exactly. A model learns to *write in capitals* and
*reverse the words* of any combination only from many combinations, so this adds 1,500 of each (1-3 words to
capitalise, 2-4 to reverse, over the same 16 words), none repeating an existing prompt. Additions stay the 80
hand-written ones: two-digit sums of unseen pairs are not learnt from a few hundred examples.

    python datasets/make_instructions.py            # rewrite the generated part after the hand-written lines
    python datasets/make_instructions.py --check    # exit 1 if the file is not exactly that
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

FILE = Path(__file__).with_name("instructions.jsonl")
HAND_WRITTEN = 240
WORDS = ("apple", "basket", "candle", "cloud", "garden", "green", "lamp", "north", "orange", "paper", "quiet",
         "river", "silver", "stone", "tiger", "window")
PER_TASK = 1500
SEED = 28


def generated(existing: list[dict[str, str]]) -> list[dict[str, str]]:
    """``PER_TASK`` capitals then ``PER_TASK`` reversals, seeded, skipping any prompt already present."""
    rng = random.Random(SEED)
    seen = {e["prompt"] for e in existing}
    out: list[dict[str, str]] = []

    def add(prompt: str, completion: str) -> bool:
        if prompt in seen:
            return False
        seen.add(prompt)
        out.append({"prompt": prompt, "completion": completion})
        return True

    made = 0
    while made < PER_TASK:
        words = rng.sample(WORDS, rng.choice((1, 2, 2, 3)))
        made += add(f"Write in capitals: {' '.join(words)}\nAnswer:", " " + " ".join(w.upper() for w in words))
    made = 0
    while made < PER_TASK:
        words = rng.sample(WORDS, rng.choice((2, 3, 4)))
        made += add(f"Reverse the words: {' '.join(words)}\nAnswer:", " " + " ".join(reversed(words)))
    return out


def render() -> str:
    """The whole file: the hand-written lines unchanged, then :func:`generated`."""
    lines = FILE.read_text(encoding="utf-8").splitlines()[:HAND_WRITTEN]
    hand = [json.loads(line) for line in lines]
    return "\n".join([*lines, *(json.dumps(e) for e in generated(hand))]) + "\n"


if __name__ == "__main__":
    text = render()
    if "--check" in sys.argv[1:]:
        sys.exit(0 if FILE.read_text(encoding="utf-8") == text else 1)
    FILE.write_text(text, encoding="utf-8")
