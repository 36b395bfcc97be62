"""The LM's task check on hand-built answers: exact match is on the text, token accuracy position by position
against the reference and its end of sequence; the floor and the drop from the reference decide."""

from __future__ import annotations

import pytest

from mlops_evaluation import EvaluationError
from mlops_evaluation.lm_task import score_answers, task_verdict

EOS = 2


def test_exact_match_and_token_accuracy_by_hand() -> None:
    # reference ids [5, 6] + eos; answers: right and stopped; right then rambling; one token wrong; empty
    scores = score_answers([" AB", " AB C", " AX", ""], [[5, 6, EOS], [5, 6, 7], [5, 9, EOS], [EOS]],
                           [" AB"] * 4, [[5, 6]] * 4, EOS)
    assert scores.exact == [True, False, False, False]
    assert scores.token_accuracy == pytest.approx([1.0, 2 / 3, 2 / 3, 0.0])
    assert scores.exact_match == 0.25 and scores.mean_token_accuracy == pytest.approx((1 + 2 / 3 + 2 / 3) / 4)


def test_a_model_that_answers_nothing_fails_any_floor() -> None:
    nothing = score_answers([""] * 3, [[EOS]] * 3, [" 1", " 2", " 3"], [[4], [5], [6]], EOS)
    passed, reason, evidence = task_verdict(nothing, None, floor=0.01, max_drop=0.05, reference_name="base")
    assert not passed and "exact match 0/3 = 0.0% < floor 1%" in reason and "token accuracy 0.0%" in reason
    assert evidence["candidate"] == {"exact_match": 0.0, "token_accuracy": 0.0}
    with pytest.raises(EvaluationError, match="floor=0"):
        task_verdict(nothing, None, floor=0.0, max_drop=0.05, reference_name="base")


def test_floor_and_drop_from_the_reference() -> None:
    def rate(k: int, n: int = 20) -> object:
        return score_answers([" a"] * k + [" b"] * (n - k), [[4, EOS]] * k + [[5, EOS]] * (n - k), [" a"] * n,
                             [[4]] * n, EOS)

    ok, reason, _ = task_verdict(rate(19), rate(20), floor=0.9, max_drop=0.05, reference_name="champion v1")
    assert ok, reason  # 95 % vs 100 %: a drop of exactly the allowance
    ok, reason, _ = task_verdict(rate(18), rate(20), floor=0.9, max_drop=0.05, reference_name="champion v1")
    assert not ok and "beyond the allowed drop 5%" in reason  # 90 %: on the floor, but 10 points down
    ok, reason, _ = task_verdict(rate(17), rate(2), floor=0.9, max_drop=0.05, reference_name="champion v1")
    assert not ok and "< floor 90%" in reason  # better than the reference, under the floor
