"""``evaluation``: the gates a candidate must pass."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from mlops_config._base import Section


class LMEvaluationConfig(Section):
    """The language-model family's gate settings (``evaluation.lm``): read by the byte-level LM's suite
    (``windows``, ``seq_len``, ``corpus_max_bytes``) and the Hugging Face causal LM's (the rest), never by the
    tabular suite. Beside them, both read the section's shared keys (``bootstrap_samples``, ``confidence``,
    ``require_ci_above_threshold``, ``latency_tolerance``, the reproducibility keys, ``required_gates``).

    The Hugging Face suite's keys that would read as a shared key's twin carry a name of their own
    (``min_perplexity_reduction``, ``generation_*``): the byte-level LM's quality and latency gates read the
    section's ``min_improvement`` and ``latency_*`` (absolute or relative per ``improvement_mode``; forward passes
    timed), the Hugging Face suite these (always relative; whole generations timed), so an ``evaluation.lm``
    key named ``min_improvement`` or ``latency_requests`` would look as if it applied to both LM kinds.
    """

    windows: int = Field(default=32, ge=1)
    """Byte-level LM: held-out corpus windows scored for perplexity (non-overlapping, from the start)."""

    seq_len: int = Field(default=128, ge=8)
    """Byte-level LM: bytes per scored window."""

    corpus_max_bytes: int = Field(default=2_000_000, ge=4096)
    """Byte-level LM: corpus size whose held-out tail is scored; keep equal to
    ``training.causal_lm.corpus_max_bytes`` so the windows are text the model never trained on."""

    min_perplexity_reduction: float = Field(default=0.0, ge=0, lt=1)
    """Hugging Face LM: required relative perplexity reduction against the reference (the champion, or
    the pretrained checkpoint the candidate was fine-tuned from when there is none), point estimate and, with
    ``require_ci_above_threshold``, the paired-bootstrap lower bound."""

    min_exact_match: float = Field(default=0.5, gt=0, le=1)
    """Hugging Face LM: the floor of the quality gate's task check, the share of held-out instructions
    (training's validation split) whose greedy answer equals the reference exactly. Strictly positive, so a model
    that answers nothing fails whatever its reference; set per model (``configs/models/llm-sft.yaml``)."""

    max_exact_match_drop: float = Field(default=0.05, ge=0, lt=1)
    """Hugging Face LM: how far the candidate's exact-match rate may fall below the reference's (the
    champion, or the base checkpoint for a first version) and still pass the quality gate."""

    task_max_examples: int = Field(default=120, ge=10)
    """Hugging Face LM: held-out examples the task check answers at most (evenly spaced over the split,
    in file order, so every task of the set is in it); each costs one greedy generation per model."""

    prompts: tuple[str, ...] = Field(default=(
        "Add 12 and 30.\nAnswer:", "Reverse the words: stone lamp\nAnswer:", "Write in capitals: green tiger\nAnswer:",
    ), min_length=1)
    """Hugging Face LM: fixed prompts decoded greedily by the decode-determinism check (run with the
    reproducibility gate) and the latency gate."""

    max_new_tokens: int = Field(default=16, ge=2, le=512)
    """Hugging Face LM: tokens generated per prompt (exactly this many in the latency gate)."""

    generation_requests: int = Field(default=24, ge=3)
    """Hugging Face LM: timed generations per model in the interleaved latency run."""

    generation_warmup: int = Field(default=3, ge=0)
    """Hugging Face LM: generations per model discarded before timing."""

    generation_max_noise: float = Field(default=1.0, gt=0)
    """Hugging Face LM: largest A/A spread (the reference against its own interleaved control series:
    paired median and p90 of TTFT and of decode time per token) the generation latency gate trusts; beyond it the
    gate cannot pass, and fails only on a regression above the tolerance plus that spread."""

    generation_max_rounds: int = Field(default=10, ge=1)
    """Hugging Face LM: rounds of ``generation_requests`` generations the latency gate measures at most
    while it cannot tell (a CI straddles the tolerance or the wall-clock bound); still undecided, it fails as
    inconclusive. A checkpoint against itself at load 5.6 on the 2-core machine decided in 1–7 rounds (p90's CI
    is the slow one to narrow), once not within 8; a round of the test checkpoint takes 1–2 s."""

    generation_wall_max_ratio: float | None = Field(default=1.5, gt=1)
    """Hugging Face LM: the wall-clock backstop of the latency gate, which judges CPU time: the candidate
    fails when the lower end of the CI of its paired wall-clock ratio (median over rounds of candidate / reference,
    whole generations) is above this (time spent waiting inside ``generate``: locks, I/O, sleeps). Wide, as the
    neighbours' load is in wall-clock; ``null`` reports the ratio without a bound."""


class TabularEvaluationConfig(Section):
    """The tabular family's gate settings (``evaluation.tabular``): read by the tabular suite only (its holdout,
    slices, decision threshold, calibration gate and rows per timed request), beside the section's shared keys."""

    holdout_fraction: float = Field(default=0.2, gt=0, lt=1)
    """Share of the labelled data (the latest by event time) kept as the fixed holdout."""

    slice_columns: tuple[str, ...] = ("category", "channel")
    """Columns whose values define the slices checked for regressions."""

    max_slice_regression: float = Field(default=0.05, ge=0)
    """Largest F1 drop allowed on any slice (absolute)."""

    min_slice_rows: int = Field(default=200, ge=1)
    """Slices with fewer holdout rows are reported but not gated."""

    min_slice_positives: int = Field(default=30, ge=0)
    """Slices with fewer holdout frauds are reported but not gated: F1 on a handful of positives is noise (as
    ``calibration_min_positives``). On the demo's holdout, ``channel=contactless`` holds 1,005 rows but 12 frauds:
    v2 against v1, each at its own threshold, moves its F1 by -0.071 with a 95 % bootstrap interval of
    [-0.261, +0.107]. ``0``: every slice with ``min_slice_rows`` rows is gated."""

    decision_threshold: float | None = Field(default=None, gt=0, lt=1)
    """Override of the threshold (score at or above it: flagged) the quality gate judges candidate and champion
    at. ``null``: each at its own threshold recorded in ``model.json`` (``training.decision_threshold``; 0.5 for
    an export that records none, reported as such). A value set here that disagrees with a model's recorded
    threshold is named in the gate's reason."""

    latency_batch_rows: int = Field(default=1, ge=1)
    """Rows per timed request in the latency run (1: one transaction per call, as serving sees it)."""

    max_calibration_error: float = Field(default=0.05, gt=0, lt=1)
    """Calibration gate: largest holdout ECE of the served (calibrated) scores. It passes when the bootstrap
    interval ends at or below it, fails when it begins above it, and is inconclusive (does not pass) between."""

    calibration_min_positives: int = Field(default=30, ge=1)
    """Calibration gate: fewer frauds than this in the holdout and it is inconclusive (ECE of a handful of
    positives is noise)."""

    calibration_bins: int = Field(default=10, ge=2, le=100)
    """Calibration gate: equal-width score bins of the ECE (as ``monitoring.calibration_bins`` for windows)."""

    calibration_required: bool = True
    """Calibration gate: an export without a recorded calibrator (``training.calibration: none``) fails: the
    per-version threshold and the performance estimate read its scores as probabilities. Off: it passes
    unchecked, reported as not calibrated (the estimate is then not to be trusted)."""


class EvaluationConfig(Section):
    """Keys every family's suite reads; each family's own are in ``tabular`` and ``lm``."""

    min_improvement: float = Field(default=0.02, ge=0)
    """Required gain of the candidate over the champion: F1 (tabular) or perplexity reduction (byte-level LM; the
    Hugging Face LM's is ``lm.min_perplexity_reduction``)."""

    improvement_mode: Literal["absolute", "relative"] = "absolute"
    """``absolute``: the metric's difference; ``relative``: the difference divided by the champion's value."""

    bootstrap_samples: int = Field(default=1000, ge=100)
    """Paired bootstrap resamples for the confidence interval of the quality gate's difference."""

    confidence: float = Field(default=0.95, gt=0.5, lt=1)
    """Two-sided confidence level of the bootstrap interval."""

    require_ci_above_threshold: bool = True
    """Require the interval's lower bound (not just the point estimate) to clear ``min_improvement``."""

    latency_tolerance: float = Field(default=0.10, ge=0)
    """Allowed regression of the candidate over the champion in CPU time of the timing thread, at the centre
    (median per-request ratio) and in the tail (p95): the gate passes when both paired-bootstrap CIs end at or
    below it, fails when either begins above it, and measures another round otherwise (the CIs hold the noise;
    nothing is added for it)."""

    latency_requests: int = Field(default=400, ge=20)
    """Timed requests per model in one round of the interleaved latency run."""

    latency_max_rounds: int = Field(default=5, ge=1)
    """Rounds of ``latency_requests`` the latency gate measures at most while it cannot tell; still undecided
    after the last, it fails as "inconclusive: could not tell within N rounds"."""

    latency_repeats: int = Field(default=5, ge=1)
    """Back-to-back calls per timed request; the sample is their median, so one scheduler hiccup on a shared
    machine does not become the p99 (1: every call is a sample)."""

    latency_max_noise: float = Field(default=0.25, gt=0)
    """Largest A/A spread (the champion against its own interleaved control series, centre or p95) the latency
    gate trusts; a noisier run is inconclusive ("too noisy to judge") and measures another round."""

    latency_warmup: int = Field(default=50, ge=0)
    """Requests per model discarded before timing."""

    latency_wall_max_ratio: float | None = Field(default=1.5, gt=1)
    """The wall-clock backstop of the tabular and byte-level LM latency gates, which judge CPU time: the candidate
    fails when the CI lower end of its paired wall-clock ratio (median over requests of candidate / champion) is
    above this, and passes only with the upper end at or below it. CPU time does not see a call that waits (a lock,
    I/O, a sleep, work on another thread); wide, as the neighbours' load is in wall-clock (as
    ``lm.generation_wall_max_ratio`` for the Hugging Face LM). ``null`` reports the ratio without a bound."""

    repro_steps: int = Field(default=20, ge=1)
    """Optimizer steps of the short re-run for the reproducibility gate."""

    reproducibility: Literal["trajectory", "determinism_only"] = "trajectory"
    """``trajectory``: the reproducibility gate must re-derive the candidate's own weights (its recorded hash at
    ``repro_steps``, or its final weights for a run no longer than that); a candidate without that record is "not
    verifiable" and fails. ``determinism_only`` (opt-out, for runs trained before trajectories were recorded):
    such a candidate is re-run twice and only the pipeline's determinism is checked, and the reason says so."""

    repro_gpu_rtol: float = Field(default=1e-3, ge=0)
    """Relative tolerance on weights for the reproducibility gate on GPU (bit-identical on CPU): a trajectory
    replay's weights sketch must match the recorded one within rtol x each tensor's norm."""

    required_gates: tuple[str, ...] = ("quality", "reproducibility", "latency", "contract")
    """Gates that must pass before a candidate can move to ``staging``."""

    lm: LMEvaluationConfig = LMEvaluationConfig()
    """The language-model family's gate settings (``evaluation.lm.*``); the tabular suite does not read them."""

    tabular: TabularEvaluationConfig = TabularEvaluationConfig()
    """The tabular family's gate settings (``evaluation.tabular.*``); the language-model suites do not read them."""
