"""Keys that moved or were replaced: the loader refuses them with their new place instead of a generic error.

A file, an ``MLOPS__…`` variable or a ``--set`` that still names an old key fails at load, naming where it was set
and where the value lives now, so an old profile or deployment manifest cannot silently lose its setting.
"""

from __future__ import annotations

MOVED: dict[str, str] = {
    "delivery.sequential.lm": "delivery.lm.sequential",
    "delivery.max_response_length_psi": "delivery.lm.max_response_length_psi",
    "delivery.max_truncated_increase": "delivery.lm.max_truncated_increase",
    "delivery.decode_rate_interval": "delivery.lm.decode_rate_interval",
    "delivery.sequential.error_margin": "delivery.tabular.sequential.error_margin",
    "delivery.sequential.slow_ms": "delivery.tabular.sequential.slow_ms",
    "delivery.sequential.slow_margin": "delivery.tabular.sequential.slow_margin",
    "delivery.sequential.score_edges": "delivery.tabular.sequential.score_edges",
    "delivery.sequential.score_margin": "delivery.tabular.sequential.score_margin",
    "delivery.sequential.max_skew_mismatch_rate": "delivery.tabular.max_skew_mismatch_rate",
    "delivery.max_prediction_psi": "delivery.tabular.max_prediction_psi",
    "delivery.canary_max_estimated_f1_drop": "delivery.tabular.canary_max_estimated_f1_drop",
    "delivery.canary_estimate_threshold": "delivery.tabular.canary_estimate_threshold",
    "delivery.latency_metric": "delivery.tabular.latency_metric",
    "serving.llm": "serving.lm",
    "serving.role": "serving.tabular.role",
    "serving.predictor_host": "serving.tabular.predictor_host",
    "serving.shadow": "serving.tabular.shadow",
    "serving.max_instances": "serving.tabular.max_instances",
    "serving.redis_outage": "serving.tabular.redis_outage",
    "serving.feature_retry_s": "serving.tabular.feature_retry_s",
    "serving.workers": "serving.tabular.workers",
    "serving.max_inflight": "serving.tabular.max_inflight",
    "serving.shed_retry_after_s": "serving.tabular.shed_retry_after_s",
    "evaluation.holdout_fraction": "evaluation.tabular.holdout_fraction",
    "evaluation.slice_columns": "evaluation.tabular.slice_columns",
    "evaluation.max_slice_regression": "evaluation.tabular.max_slice_regression",
    "evaluation.min_slice_rows": "evaluation.tabular.min_slice_rows",
    "evaluation.min_slice_positives": "evaluation.tabular.min_slice_positives",
    "evaluation.decision_threshold": "evaluation.tabular.decision_threshold",
    "evaluation.latency_batch_rows": "evaluation.tabular.latency_batch_rows",
    "evaluation.max_calibration_error": "evaluation.tabular.max_calibration_error",
    "evaluation.calibration_min_positives": "evaluation.tabular.calibration_min_positives",
    "evaluation.calibration_bins": "evaluation.tabular.calibration_bins",
    "evaluation.calibration_required": "evaluation.tabular.calibration_required",
    "evaluation.lm_windows": "evaluation.lm.windows",
    "evaluation.lm_seq_len": "evaluation.lm.seq_len",
    "evaluation.lm_corpus_max_bytes": "evaluation.lm.corpus_max_bytes",
    "evaluation.hf_min_improvement": "evaluation.lm.min_perplexity_reduction",
    "evaluation.hf_min_exact_match": "evaluation.lm.min_exact_match",
    "evaluation.hf_max_exact_match_drop": "evaluation.lm.max_exact_match_drop",
    "evaluation.hf_task_max_examples": "evaluation.lm.task_max_examples",
    "evaluation.hf_prompts": "evaluation.lm.prompts",
    "evaluation.hf_max_new_tokens": "evaluation.lm.max_new_tokens",
    "evaluation.hf_latency_requests": "evaluation.lm.generation_requests",
    "evaluation.hf_latency_warmup": "evaluation.lm.generation_warmup",
    "evaluation.hf_latency_max_noise": "evaluation.lm.generation_max_noise",
    "evaluation.hf_latency_max_rounds": "evaluation.lm.generation_max_rounds",
    "evaluation.hf_latency_wall_max_ratio": "evaluation.lm.generation_wall_max_ratio",
}
"""Old dotted path → new dotted path, for keys whose value carries over unchanged (a whole subsection moves with
everything under it)."""

REPLACED: dict[str, str] = {
    "data.max_amount": "replaced by the model's declared contract: set contract.expectations.ranges.<field>.max "
                       "(e.g. contract.expectations.ranges.amount.max in configs/models/<model>.yaml)",
}
"""Old dotted path → what replaced it, for keys whose value does not carry over as is."""


def moved_message(path: str, leaf: str, where: str) -> str | None:
    """Why ``path`` (set as ``leaf``, a key at or under it, in ``where``) is refused, or ``None`` if it never moved.

    ``leaf`` names the key as it was written: setting ``serving.llm.max_tokens`` reads "serving.llm.max_tokens has
    moved to serving.lm.max_tokens", not only the subsection's move.
    """
    if path in MOVED:
        new = MOVED[path] + leaf[len(path):]
        return f"{leaf} has moved to {new} (set in {where})"
    if path in REPLACED:
        return f"{leaf} is no longer a key: {REPLACED[path]} (set in {where})"
    return None
