"""The language model judged on its task: greedy answers to held-out instructions, scored against the reference.

Per held-out example (training's validation split: never trained on, see :func:`mlops_training.held_out`):

- **exact match**: the greedy answer, decoded as serving returns it (special tokens dropped, stopped at the end
  of sequence), equals the reference completion character for character;
- **token accuracy**: the share of the reference's tokens (its completion, then the end of sequence) that the
  greedy answer has at the same position. An answer that stops at once scores 0 on every example.

The gate (:func:`task_gate`) passes when the candidate's exact-match rate is at least the absolute floor
(``evaluation.lm.min_exact_match``, in the model's config) and not below the reference's by more than
``evaluation.lm.max_exact_match_drop``. The floor is strictly positive by schema, so a model that answers nothing
(0 %) fails whatever the reference does. :func:`mlops_evaluation.lm_evaluate.quality_on_task` joins it with the
perplexity comparison into the LM's ``quality`` gate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mlops_evaluation.errors import EvaluationError


@dataclass(frozen=True)
class TaskScores:
    """One model's answers to the held-out examples: exact match and token accuracy per example."""

    exact: list[bool]
    token_accuracy: list[float]
    answers: list[str]

    @property
    def exact_match(self) -> float:
        return float(np.mean(self.exact)) if self.exact else 0.0

    @property
    def mean_token_accuracy(self) -> float:
        return float(np.mean(self.token_accuracy)) if self.token_accuracy else 0.0


def score_answers(answers: Sequence[str], answer_ids: Sequence[Sequence[int]], references: Sequence[str],
                  reference_ids: Sequence[Sequence[int]], eos_id: int) -> TaskScores:
    """Exact match of each decoded answer with its reference text; token accuracy of its ids against the
    reference's ids followed by ``eos_id`` (position by position, over the reference's length)."""
    if not (len(answers) == len(answer_ids) == len(references) == len(reference_ids)) or not answers:
        raise EvaluationError(f"{len(answers)} answers, {len(answer_ids)} answer id lists, {len(references)} "
                              f"references, {len(reference_ids)} reference id lists: expected equal, non-zero counts")
    exact, accuracy = [], []
    for text, ids, ref, ref_ids in zip(answers, answer_ids, references, reference_ids, strict=True):
        want = [*map(int, ref_ids), int(eos_id)]
        got = [int(t) for t in ids]
        exact.append(text == ref)
        accuracy.append(sum(1 for i, t in enumerate(want) if i < len(got) and got[i] == t) / len(want))
    return TaskScores(exact, accuracy, [str(a) for a in answers])


def task_verdict(candidate: TaskScores, reference: TaskScores | None, *, floor: float, max_drop: float,
                 reference_name: str) -> tuple[bool, str, dict[str, Any]]:
    """Whether the candidate's exact match clears ``floor`` and is within ``max_drop`` of the reference's; the
    reason (exact match and token accuracy of both) and the evidence."""
    if not 0 < floor <= 1 or not 0 <= max_drop < 1:
        raise EvaluationError(f"floor={floor!r} must be in (0, 1] and max_drop={max_drop!r} in [0, 1)")
    em, acc = candidate.exact_match, candidate.mean_token_accuracy
    n = len(candidate.exact)
    floor_ok = em >= floor
    parts = [f"exact match {sum(candidate.exact)}/{n} = {em:.1%} {'≥' if floor_ok else '<'} floor {floor:.0%}, "
             f"token accuracy {acc:.1%}"]
    evidence: dict[str, Any] = {
        "metric": "exact_match", "examples": n, "floor": floor, "max_drop": max_drop,
        "candidate": {"exact_match": em, "token_accuracy": acc},
        "missed": [{"index": i, "answer": candidate.answers[i]} for i, ok in enumerate(candidate.exact) if not ok][:20],
        "reference": reference_name}
    drop_ok = True
    if reference is not None:
        if len(reference.exact) != n:
            raise EvaluationError(f"candidate scored on {n} examples, {reference_name} on {len(reference.exact)}")
        r_em, r_acc = reference.exact_match, reference.mean_token_accuracy
        drop_ok = em >= r_em - max_drop
        parts.append(f"{reference_name} {r_em:.1%} exact, {r_acc:.1%} token accuracy: change {em - r_em:+.1%} "
                     f"{'within' if drop_ok else 'beyond'} the allowed drop {max_drop:.0%}")
        evidence["reference_metrics"] = {"exact_match": r_em, "token_accuracy": r_acc}
    evidence["passed"] = floor_ok and drop_ok
    return floor_ok and drop_ok, "; ".join(parts), evidence
