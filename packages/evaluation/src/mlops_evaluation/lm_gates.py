"""The four gates for a Hugging Face causal LM (``kind: hf_causal_lm``), as pure functions over numbers.

- **perplexity** (the quality gate): token-weighted perplexity on the fixed held-out examples, against the
  reference, with a paired bootstrap CI (:func:`mlops_evaluation.bootstrap.paired_bootstrap_perplexity`);
- **reproducibility**: greedy decoding of fixed prompts gives the same token ids on a re-run on CPU;
- **latency**: time to first token (median) and decode rate (tokens/s, median), candidate and reference interleaved
  A B A′ (the orders of :mod:`mlops_evaluation.latency`), the A/A pair measuring the noise;
- **contract**: tokenizer vocabulary, special tokens, chat template and context length equal the reference's.

:mod:`mlops_evaluation.lm_evaluate` loads the models and gathers the inputs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mlops_config import EvaluationConfig
from mlops_evaluation.bootstrap import paired_bootstrap_perplexity
from mlops_evaluation.errors import EvaluationError
from mlops_evaluation.gates import GateResult
from mlops_evaluation.latency import percentiles


def perplexity_gate(cand_nll: Any, ref_nll: Any, tokens: Any, section: EvaluationConfig, *, reference: str,
                    seed: int = 0) -> GateResult:
    """Candidate perplexity must be lower than the reference's by ``hf_min_improvement`` (relative), point
    estimate and (with ``require_ci_above_threshold``) the bootstrap lower bound."""
    boot = paired_bootstrap_perplexity(cand_nll, ref_nll, tokens, samples=section.bootstrap_samples,
                                       confidence=section.confidence, seed=seed)
    n = float(np.sum(tokens))
    ppl_c, ppl_r = float(np.exp(np.sum(cand_nll) / n)), float(np.exp(np.sum(ref_nll) / n))
    need = section.hf_min_improvement
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


def reproducibility_gate(prompts: Sequence[str], first: Sequence[Sequence[int]], second: Sequence[Sequence[int]],
                         *, max_new_tokens: int, device: str = "cpu") -> GateResult:
    """Greedy decoding of ``prompts`` by two independent loads of the candidate must give identical ids."""
    a, b = [list(map(int, x)) for x in first], [list(map(int, x)) for x in second]
    differing = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
    evidence = {"prompts": list(prompts), "max_new_tokens": max_new_tokens, "device": device,
                "first_sha256": ids_digest(a), "second_sha256": ids_digest(b), "differing_prompts": differing,
                "completion_ids": a}
    if len(a) != len(prompts) or len(b) != len(prompts):
        return GateResult("reproducibility", False, f"expected {len(prompts)} decodings per run, got {len(a)} and "
                          f"{len(b)}", evidence)
    if differing:
        first_bad = differing[0]
        return GateResult("reproducibility", False,
                          f"greedy decoding differs between two loads on {device} for {len(differing)} of "
                          f"{len(prompts)} prompts (first: {prompts[first_bad]!r}: {a[first_bad][:8]}… vs "
                          f"{b[first_bad][:8]}…)", evidence)
    return GateResult("reproducibility", True,
                      f"greedy decoding of {len(prompts)} fixed prompts ({max_new_tokens} new tokens each) is "
                      f"identical on a re-run on {device} (ids sha256 {ids_digest(a)[:12]}…)", evidence)


@dataclass(frozen=True)
class GenerationTiming:
    """One timed generation: seconds to the first new token, and the whole call, on the clock the gate judges
    (CPU time of the generating process in the gates; see :func:`latency_gate`), and wall-clock when measured."""

    ttft_s: float
    total_s: float
    new_tokens: int
    wall_ttft_s: float | None = None
    wall_total_s: float | None = None

    @property
    def tokens_per_s(self) -> float:
        """Decode rate after the first token (the serving metric's definition)."""
        rest = self.total_s - self.ttft_s
        return (self.new_tokens - 1) / rest if self.new_tokens > 1 and rest > 0 else 0.0


def _series(timings: Sequence[GenerationTiming]) -> dict[str, Any]:
    out = {"ttft_ms": percentiles([t.ttft_s * 1000 for t in timings]),
           "tokens_per_s": percentiles([t.tokens_per_s for t in timings])}
    if all(t.wall_ttft_s is not None for t in timings):
        out["wall_ttft_ms"] = percentiles([(t.wall_ttft_s or 0.0) * 1000 for t in timings])
    return out


def _paired_median(num: Sequence[float], den: Sequence[float]) -> float:
    """Median over rounds of ``num[i] / den[i]`` (rounds where ``den`` is 0 left out; 1.0 when none is left)."""
    ratios = [n / d for n, d in zip(num, den, strict=True) if d > 0]
    return float(np.median(ratios)) if ratios else 1.0


def latency_gate(champion: Sequence[GenerationTiming], candidate: Sequence[GenerationTiming],
                 control: Sequence[GenerationTiming], *, tolerance: float, max_noise: float, reference: str,
                 warmup: int, clock: str = "wall") -> GateResult:
    """The TTFT may rise and the tokens/s may fall by at most ``tolerance`` plus the A/A noise of each.

    ``clock`` names what the timings measure: the gates time CPU seconds of the generating process on one torch
    thread (``"cpu"``): on a shared 2-core machine a 12 ms first token waited up to 300 ms for the CPU, so
    wall-clock compared the neighbours' load, not the models (a fine-tune of the same architecture measured
    +28 % paired and -49 % by medians in one run); CPU time is what a slower model costs. Wall-clock figures
    are reported beside it.

    The three series are interleaved round by round (reference A, candidate B, reference A′), and the figures are
    paired: the regression is the median over rounds of ``B_i / A_i`` and the A/A noise the median of
    ``A′_i / A_i``. Medians, not p99: a run of tens of generations has no p99 but its slowest one. Paired, not a
    ratio of the series' medians: on a loaded machine a generation's time follows the load of its moment, and
    the load drifts over a run; in one run the reference's own two series had TTFT medians of 83 and 185 ms
    (124 % apart) while within each round the three calls saw the same machine. Percentiles per series are
    reported. When either A/A noise exceeds ``max_noise`` the run cannot tell models apart and the gate fails
    as too noisy.
    """
    if not len(champion) == len(candidate) == len(control) or not candidate:
        raise EvaluationError(f"the latency series must be paired and non-empty, got {len(champion)}, "
                              f"{len(candidate)} and {len(control)} generations")
    a, b, a2 = _series(champion), _series(candidate), _series(control)
    ttft = [t.ttft_s for t in champion], [t.ttft_s for t in candidate], [t.ttft_s for t in control]
    rate = ([t.tokens_per_s for t in champion], [t.tokens_per_s for t in candidate],
            [t.tokens_per_s for t in control])
    ttft_reg = _paired_median(ttft[1], ttft[0]) - 1.0
    ttft_noise = abs(_paired_median(ttft[2], ttft[0]) - 1.0)
    tps_a, tps_b = a["tokens_per_s"]["p50"], b["tokens_per_s"]["p50"]
    tps_drop = 1.0 - _paired_median(rate[1], rate[0])
    tps_noise = abs(_paired_median(rate[2], rate[0]) - 1.0)
    allowed_ttft, allowed_tps = tolerance + ttft_noise, tolerance + tps_noise
    evidence = {"reference": reference, "champion": a, "candidate": b, "champion_control": a2,
                "ttft_p50_regression": ttft_reg, "ttft_aa_noise": ttft_noise, "tokens_per_s_drop": tps_drop,
                "tokens_per_s_aa_noise": tps_noise, "paired": "median over rounds of B/A and A'/A", "clock": clock,
                "tolerance": tolerance, "max_noise": max_noise, "requests": len(candidate), "warmup": warmup}
    if max(ttft_noise, tps_noise) > max_noise:
        return GateResult("latency", False,
                          f"too noisy to judge: the {reference}'s own two interleaved series differed by "
                          f"{ttft_noise:.0%} (TTFT, paired median) and {tps_noise:.0%} (tokens/s), limit "
                          f"{max_noise:.0%}; rerun on a quieter machine", evidence)
    ttft_ok, tps_ok = ttft_reg <= allowed_ttft, tps_drop <= allowed_tps
    reason = (f"{clock} time: TTFT p50 {b['ttft_ms']['p50']:.2f} ms vs {reference} {a['ttft_ms']['p50']:.2f} ms, "
              "paired "
              f"{ttft_reg:+.1%} {'≤' if ttft_ok else '>'} allowed {allowed_ttft:+.1%}; tokens/s p50 {tps_b:.1f} vs "
              f"{tps_a:.1f}: paired drop "
              f"{tps_drop:+.1%} {'≤' if tps_ok else '>'} allowed {allowed_tps:+.1%} (tolerance {tolerance:.0%} + A/A "
              f"noise); TTFT p99 {b['ttft_ms']['p99']:.2f} vs {a['ttft_ms']['p99']:.2f} ms (reported); "
              f"{len(candidate)} interleaved generations each, {warmup} warm-up dropped")
    return GateResult("latency", ttft_ok and tps_ok, reason, evidence)


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


def contract_gate(candidate: Mapping[str, Any], reference: Mapping[str, Any], *, reference_name: str,
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
