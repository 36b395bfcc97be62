"""LM traffic drift on hand-built prediction-log rows and a hand-made encoder (one token per word)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from mlops_config import MonitoringConfig
from mlops_monitoring.errors import MonitoringError
from mlops_monitoring.lm_drift import lm_drift, lm_reference

MON = MonitoringConfig()
VOCAB = {w: i for i, w in enumerate(["add", "reverse", "capitals", "the", "words", "of", "and", "to", "please", "me"])}


def encode(text: str) -> list[int]:
    return [VOCAB.get(w, 99) for w in text.split()]


TRAIN = ["add the words", "reverse the words please", "capitals of words", "add and add to the words"] * 25


def test_traffic_like_training_is_ok() -> None:
    ref = lm_reference(TRAIN, encode, top_k=3)
    assert ref["top_ids"] == [VOCAB["words"], VOCAB["add"], VOCAB["the"]]  # 100, 75, 75: ties by id
    assert ref["id_counts"] == [100, 75, 75, 150]
    log = pd.DataFrame({"prompt_tokens": [len(encode(p)) for p in TRAIN], "prompt_text": TRAIN})
    report = lm_drift(ref, log, MON, encode=encode)
    assert report.level == "OK"
    assert report.columns["prompt_tokens"].psi == 0.0 and report.columns["prompt_token_ids"].psi == pytest.approx(0.0)


def test_longer_prompts_of_another_task_are_critical() -> None:
    ref = lm_reference(TRAIN, encode, top_k=3)
    drifted = ["please tell me a long story about the sea and the words of old"] * 50
    log = pd.DataFrame({"prompt_tokens": [len(encode(p)) for p in drifted], "prompt_text": drifted})
    report = lm_drift(ref, log, MON, encode=encode)
    assert report.level == "CRITICAL"
    assert report.columns["prompt_tokens"].statistic == pytest.approx(1.0)  # KS: no overlap at all
    # Token shares by hand: reference (100, 75, 75, 150)/400; current: words 1, add 0, the 2, other 11 of 14.
    ref_s, cur_s = np.array([100, 75, 75, 150]) / 400, np.array([1, 0, 2, 11]) / 14
    cur_s[cur_s == 0] = MON.psi_floor
    expected = float(np.sum((cur_s - ref_s) * np.log(cur_s / ref_s)))
    assert report.columns["prompt_token_ids"].psi == pytest.approx(expected)
    assert any(r.startswith("CRITICAL: prompt_tokens") for r in report.reasons)


def test_without_prompt_text_only_lengths_are_checked_and_said_so() -> None:
    ref = lm_reference(TRAIN, encode)
    report = lm_drift(ref, pd.DataFrame({"prompt_tokens": [3] * 10}), MON, encode=encode)
    assert set(report.columns) == {"prompt_tokens"}
    assert "token distribution not checked: the log has no prompt_text (serving.lm.log_text: false)" in report.reasons
    with pytest.raises(MonitoringError, match="lacks 'prompt_tokens'"):
        lm_drift(ref, pd.DataFrame({"x": [1]}), MON)
    with pytest.raises(MonitoringError, match="no reference prompts"):
        lm_reference([], encode)
