"""The gates for a Hugging Face causal LM (``kind: hf_causal_lm``), as pure functions over numbers.

- **perplexity** (the quality gate): token-weighted perplexity on the fixed held-out examples, against the
  reference, with a paired bootstrap CI (:func:`mlops_evaluation.bootstrap.paired_bootstrap_perplexity`);
- **reproducibility** is not here: it replays the candidate's recorded training like every family's
  (:func:`mlops_evaluation.check_trajectory`, through :func:`mlops_evaluation.runner.check_reproducibility`);
- **decode determinism** (an extra check, run with the reproducibility gate): greedy decoding of fixed prompts
  gives the same token ids on a second load on CPU, which shows inference is deterministic, not where the
  weights came from;
- **latency**: in :mod:`mlops_evaluation.lm_latency` (CPU time on centre and p90, a wall-clock backstop);
- **contract**: tokenizer vocabulary, special tokens, chat template and context length equal the reference's.

:mod:`mlops_evaluation.lm_evaluate` loads the models and gathers the inputs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from mlops_config import EvaluationConfig
from mlops_evaluation.bootstrap import paired_bootstrap_perplexity
from mlops_evaluation.gates import GateResult
from mlops_evaluation.lm_latency import GenerationTiming

__all__ = ["GenerationTiming", "contract_facts", "decode_determinism_gate", "hf_contract_gate", "ids_digest",
           "perplexity_gate"]


def perplexity_gate(cand_nll: Any, ref_nll: Any, tokens: Any, section: EvaluationConfig, *, reference: str,
                    seed: int = 0) -> GateResult:
    """Candidate perplexity must be lower than the reference's by ``lm.min_perplexity_reduction`` (relative), point
    estimate and (with ``require_ci_above_threshold``) the bootstrap lower bound."""
    boot = paired_bootstrap_perplexity(cand_nll, ref_nll, tokens, samples=section.bootstrap_samples,
                                       confidence=section.confidence, seed=seed)
    n = float(np.sum(tokens))
    ppl_c, ppl_r = float(np.exp(np.sum(cand_nll) / n)), float(np.exp(np.sum(ref_nll) / n))
    need = section.lm.min_perplexity_reduction
    point_ok = boot.estimate >= need
    ci_ok = boot.lower >= need or not section.require_ci_above_threshold
    ci = (f"{boot.confidence:.0%} paired-bootstrap CI [{boot.lower:+.4f}, {boot.upper:+.4f}]"
          + ("" if section.require_ci_above_threshold else " reported, not gated"))
    reason = (f"candidate perplexity {ppl_c:.4f} vs {reference} {ppl_r:.4f}: relative reduction "
              f"{boot.estimate:+.4f} {'≥' if point_ok else '<'} required {need:+.4f}; {ci}"
              + ("" if ci_ok else f" (lower bound < {need:+.4f})")
              + f"; over {len(np.asarray(tokens))} held-out examples, {int(n)} completion tokens")
    return GateResult("quality", point_ok and ci_ok, reason, {
        "metric": "perplexity", "unit": "token", "reference": reference, "mode": "relative", "min_improvement": need,
        "candidate": {"perplexity": ppl_c, "nll": float(np.sum(cand_nll) / n)},
        "reference_metrics": {"perplexity": ppl_r, "nll": float(np.sum(ref_nll) / n)},
        "bootstrap": boot.as_dict(), "require_ci_above_threshold": section.require_ci_above_threshold,
        "examples": len(np.asarray(tokens)), "tokens": int(n)})


def ids_digest(outputs: Sequence[Sequence[int]]) -> str:
    """SHA-256 of a list of token-id lists (what two decodings must share)."""
    return hashlib.sha256(json.dumps([list(map(int, o)) for o in outputs]).encode()).hexdigest()


DECODE = "decode_determinism"
"""The name of the greedy-decoding check in the report: it is not the reproducibility gate."""


def decode_determinism_gate(prompts: Sequence[str], first: Sequence[Sequence[int]],
                            second: Sequence[Sequence[int]], *, max_new_tokens: int, device: str = "cpu"
                            ) -> GateResult:
    """Greedy decoding of ``prompts`` by two independent loads of the candidate must give identical ids."""
    a, b = [list(map(int, x)) for x in first], [list(map(int, x)) for x in second]
    differing = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
    evidence = {"prompts": list(prompts), "max_new_tokens": max_new_tokens, "device": device,
                "first_sha256": ids_digest(a), "second_sha256": ids_digest(b), "differing_prompts": differing,
                "completion_ids": a}
    if len(a) != len(prompts) or len(b) != len(prompts):
        return GateResult(DECODE, False, f"expected {len(prompts)} decodings per run, got {len(a)} and "
                          f"{len(b)}", evidence)
    if differing:
        first_bad = differing[0]
        return GateResult(DECODE, False,
                          f"greedy decoding differs between two loads on {device} for {len(differing)} of "
                          f"{len(prompts)} prompts (first: {prompts[first_bad]!r}: {a[first_bad][:8]}… vs "
                          f"{b[first_bad][:8]}…)", evidence)
    return GateResult(DECODE, True,
                      f"greedy decoding of {len(prompts)} fixed prompts ({max_new_tokens} new tokens each) is "
                      f"identical on a re-run on {device} (ids sha256 {ids_digest(a)[:12]}…)", evidence)


def contract_facts(tokenizer: Any, config: Any) -> dict[str, Any]:
    """What a served LM promises its clients: vocabulary (size and hash), special tokens, chat template, context."""
    vocab = tokenizer.get_vocab()
    return {
        "vocab_size": len(vocab),
        "vocab_sha256": hashlib.sha256(json.dumps(sorted(vocab.items())).encode()).hexdigest(),
        "special_tokens": {k: str(v) for k, v in sorted(tokenizer.special_tokens_map.items())},
        "special_token_ids": {k: getattr(tokenizer, f"{k}_token_id", None) for k in ("bos", "eos", "pad", "unk")},
        "chat_template": tokenizer.chat_template,
        "context_length": int(getattr(config, "max_position_embeddings", 0) or 0),
        "model_vocab_size": int(getattr(config, "vocab_size", 0) or 0),
    }


def hf_contract_gate(candidate: Mapping[str, Any], reference: Mapping[str, Any], *, reference_name: str,
                  seq_len: int | None = None) -> GateResult:
    """The candidate's tokenizer and context equal the reference's; it can chat, stop and pad; it fits training's
    sequence length and its embedding covers the vocabulary."""
    problems: list[str] = []
    for key, label in (("vocab_sha256", "tokenizer vocabulary"), ("special_tokens", "special tokens"),
                       ("special_token_ids", "special token ids"), ("chat_template", "chat template"),
                       ("context_length", "context length")):
        if candidate.get(key) != reference.get(key):
            shown = (str(candidate.get(key))[:60], str(reference.get(key))[:60])
            problems.append(f"{label} {shown[0]!r} != {reference_name}'s {shown[1]!r}")
    ids = candidate.get("special_token_ids") or {}
    for need in ("eos", "pad"):
        if ids.get(need) is None:
            problems.append(f"no {need}_token (serving needs one to {'stop' if need == 'eos' else 'pad'})")
    if not candidate.get("chat_template"):
        problems.append("no chat template (/chat/completions needs one)")
    if candidate.get("model_vocab_size", 0) < candidate.get("vocab_size", 0):
        problems.append(f"embedding rows {candidate.get('model_vocab_size')} < tokenizer vocabulary "
                        f"{candidate.get('vocab_size')}")
    if seq_len is not None and candidate.get("context_length", 0) < seq_len:
        problems.append(f"context length {candidate.get('context_length')} < training seq_len {seq_len}")
    evidence = {"candidate": {k: v for k, v in candidate.items() if k != "chat_template"},
                "reference": {k: v for k, v in reference.items() if k != "chat_template"},
                "chat_template_equal": candidate.get("chat_template") == reference.get("chat_template"),
                "reference_name": reference_name}
    if problems:
        return GateResult("contract", False, "; ".join(problems), evidence)
    return GateResult("contract", True,
                      f"vocabulary ({candidate['vocab_size']} tokens, sha256 {str(candidate['vocab_sha256'])[:12]}…), "
                      f"special tokens, chat template and context length {candidate['context_length']} equal "
                      f"{reference_name}'s", evidence)
