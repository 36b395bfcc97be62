"""Drift of a language model's traffic: prompt length and token distribution against the training prompts.

The reference is the fine-tuning prompts, encoded as the server encodes a completion prompt (the caller
passes that encoder). The current window is the LM prediction log (``mlops_serving.lm_api``'s rows):

- ``prompt_tokens``: PSI over quantile bins of the reference lengths, with the KS test;
- ``prompt_token_ids``: PSI over the reference's ``top_k`` most frequent token ids plus one "other" bin, with
  the chi² test. It needs the prompts' text: the log has ``prompt_text`` only with ``serving.lm.log_text``;
  without it the column is left out and the report says so (nothing is guessed).

Both are key columns: above ``monitoring.psi_critical`` they are CRITICAL, which the monitor's policy turns into
a rollback, as for the fraud model's key features. The result is the same :class:`DriftReport`.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mlops_config import MonitoringConfig
from mlops_model import StatisticsError, statistics
from mlops_monitoring.drift import ColumnDrift, DriftReport
from mlops_monitoring.errors import MonitoringError
from mlops_monitoring.policy import column_severity, drift_level

Encode = Callable[[str], Sequence[int]]
OTHER = "other"


def lm_reference(prompts: Iterable[str], encode: Encode, *, top_k: int = 50) -> dict[str, Any]:
    """Prompt lengths and token-id counts (the ``top_k`` ids kept by name, the rest as ``other``) of ``prompts``."""
    encoded = [list(encode(p)) for p in prompts]
    if not encoded:
        raise MonitoringError("no reference prompts: expected the fine-tuning prompts the model was trained on")
    counts = Counter(int(t) for ids in encoded for t in ids)
    top = [tok for tok, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:top_k]]
    return {"prompt_tokens": [len(ids) for ids in encoded], "top_ids": top,
            "id_counts": [counts[t] for t in top] + [sum(counts.values()) - sum(counts[t] for t in top)]}


def read_prompts(path: Path) -> list[str]:
    """The ``prompt`` of every line of a JSONL instruction dataset (``training.causal_lm.dataset``).

    Raises:
        MonitoringError: the file is missing, a line is not a JSON object with a string ``prompt``, or none is.
    """
    if not path.is_file():
        raise MonitoringError(f"reference prompts {str(path)!r} do not exist; expected the JSONL dataset "
                              "training.causal_lm.dataset names")
    prompts = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            prompt = json.loads(line).get("prompt")
        except (json.JSONDecodeError, AttributeError):
            prompt = None
        if not isinstance(prompt, str):
            raise MonitoringError(f"{str(path)!r} line {n} is not a JSON object with a string 'prompt'")
        prompts.append(prompt)
    if not prompts:
        raise MonitoringError(f"{str(path)!r} holds no prompt: expected the fine-tuning prompts")
    return prompts


def tokenizer_encoder(folder: Path) -> Encode:
    """Token ids of a completion prompt as the LM server encodes it (``tokenizer(prompt)``, special tokens
    included), from a Hugging Face tokenizer folder."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))

    def encode(text: str) -> list[int]:
        return list(tokenizer(text)["input_ids"])

    return encode


def _id_counts(encoded: Iterable[Sequence[int]], top_ids: Sequence[int]) -> np.ndarray:
    position = {int(t): i for i, t in enumerate(top_ids)}
    out = np.zeros(len(top_ids) + 1, dtype=np.int64)
    for ids in encoded:
        for t in ids:
            out[position.get(int(t), len(top_ids))] += 1
    return out


def lm_drift(reference: Mapping[str, Any], log: pd.DataFrame, monitoring: MonitoringConfig, *,
             encode: Encode | None = None, bins: int = 10) -> DriftReport:
    """Drift of the logged prompts (one row per request) against ``reference`` (:func:`lm_reference`).

    Raises:
        MonitoringError: the log has no ``prompt_tokens`` column or no rows.
    """
    if "prompt_tokens" not in log.columns:
        raise MonitoringError(f"LM prediction log lacks 'prompt_tokens'; columns: {sorted(log.columns)}")
    current = log["prompt_tokens"].dropna().to_numpy(dtype=np.float64)
    ref_len = np.asarray(reference["prompt_tokens"], dtype=np.float64)
    if current.size == 0:
        raise MonitoringError("no logged LM requests in the window: nothing to compare")
    columns: dict[str, ColumnDrift] = {}
    notes: list[str] = []
    try:
        psi = statistics.psi(*statistics.quantile_bin_counts(ref_len, current, bins), floor=monitoring.psi_floor)
        d, p = statistics.ks(ref_len, current)
    except StatisticsError as exc:
        raise MonitoringError(f"prompt-length drift: {exc}") from None
    level = column_severity(psi, key=True, monitoring=monitoring)
    columns["prompt_tokens"] = ColumnDrift("ks", d, p, psi, d, psi >= monitoring.psi_warning, level.value,
                                           "numeric", int(ref_len.size), int(current.size))
    texts = log["prompt_text"].dropna() if "prompt_text" in log.columns else pd.Series(dtype=object)
    if encode is None or texts.empty:
        notes.append("token distribution not checked: the log has no prompt_text (serving.lm.log_text: false)"
                     if texts.empty else "token distribution not checked: no tokenizer given")
    else:
        ref_counts = np.asarray(reference["id_counts"], dtype=np.int64)
        cur_counts = _id_counts((encode(str(t)) for t in texts), reference["top_ids"])
        tpsi = statistics.psi(ref_counts, cur_counts, floor=monitoring.psi_floor)
        stat, pval, cramers_v = statistics.chi2(ref_counts, cur_counts)
        tlevel = column_severity(tpsi, key=True, monitoring=monitoring)
        columns["prompt_token_ids"] = ColumnDrift("chi2", stat, pval, tpsi, cramers_v, tpsi >= monitoring.psi_warning,
                                                  tlevel.value, "categorical", int(ref_counts.sum()),
                                                  int(cur_counts.sum()))
    overall, reasons = drift_level(columns, monitoring)
    return DriftReport(columns, overall.value, [*reasons, *notes], int(ref_len.size), int(current.size),
                       {"notes": notes, "top_ids": len(reference["top_ids"])})
