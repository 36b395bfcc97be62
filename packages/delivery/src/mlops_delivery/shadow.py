"""Shadow analysis: how the candidate answered the live requests mirrored to it (``serving.tabular.shadow``).

Reads the shadow log (``mlops_serving.read_shadow_log``: one row per mirrored instance, the live score beside
the candidate's) and reports

- agreement: Pearson and Spearman correlation of the scores (``scipy.stats``), the mean absolute difference,
  and the decisions flipped at the serving threshold (flagged = score at or above it) in each direction;
- latency: p50 / p99 of the candidate's round trip against the live model step of the same requests, and the
  differences (candidate minus live), over the requests the candidate answered;
- errors: mirrored requests the candidate failed, by status (``timeout``, ``unreachable``, ``http_<code>``...).

Optional limits (largest flip rate, error rate, p99 difference) turn it into a check for the promotion flow
(candidate → shadow → canary): ``passed`` is ``False`` with a reason per limit exceeded.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mlops_delivery.errors import ShadowError

COLUMNS = ("request_id", "instance", "model_version", "live_version", "live_score", "score", "status", "latency_ms",
           "live_predict_ms")


@dataclass(frozen=True)
class ShadowLimits:
    """What a candidate may show in shadow and still go on to the canary (``None``: not checked)."""

    max_flip_rate: float | None = None
    max_error_rate: float | None = None
    max_p99_diff_ms: float | None = None
    min_requests: int = 1


@dataclass(frozen=True)
class ShadowAnalysis:
    """Agreement, latency and errors of the candidate on the mirrored requests."""

    model: str
    candidate_versions: tuple[str, ...]
    live_versions: tuple[str, ...]
    threshold: float
    requests: int
    """Mirrored requests in the window (answered or not)."""
    rows: int
    """Mirrored instances (a request may carry several)."""
    answered_rows: int
    errors: int
    """Mirrored requests the candidate failed."""
    error_rate: float
    errors_by_status: dict[str, int]
    pearson: float | None
    spearman: float | None
    mean_abs_diff: float | None
    flipped: int
    """Answered instances whose decision at ``threshold`` differs between the live model and the candidate."""
    flip_rate: float | None
    flipped_to_flag: int
    """... of which the candidate flags and the live model does not."""
    flipped_to_pass: int
    latency: dict[str, float | None]
    passed: bool | None = None
    reasons: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)
    version_thresholds: dict[str, float] = field(default_factory=dict)
    """Each version's own decision threshold a flip was judged at (``threshold_of``); empty: ``threshold``."""

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready form."""
        return asdict(self)


def summarize_shadow(frame: pd.DataFrame, *, model: str, threshold: float,
                     limits: ShadowLimits | None = None,
                     threshold_of: Callable[[str], float] | None = None) -> ShadowAnalysis:
    """The analysis of shadow-log rows (``mlops_serving.read_shadow_log``'s columns).

    A decision is ``score >= threshold``; with ``threshold_of`` each version decides at its own (the live
    model at ``threshold_of(live_version)``, the candidate at ``threshold_of(model_version)``: the thresholds
    recorded in their ``model.json``), so a flip is a decision that changes for a caller.
    """
    if not 0 < threshold < 1:
        raise ShadowError(f"threshold {threshold!r} must be a score strictly between 0 and 1")
    missing = [c for c in COLUMNS if c not in frame.columns]
    if frame.empty or missing:
        what = "no rows" if frame.empty else f"no column(s) {missing!r} (it has {list(frame.columns)!r})"
        raise ShadowError(f"the shadow log of {model!r} has {what}; expected the columns {list(COLUMNS)!r}")
    per_request = frame.groupby("request_id", sort=False).first()
    ok_requests = per_request[per_request["status"] == "ok"]
    status_counts = per_request.loc[per_request["status"] != "ok", "status"].value_counts()
    answered = frame[(frame["status"] == "ok") & frame["score"].notna()]
    live = answered["live_score"].to_numpy(dtype=np.float64)
    cand = answered["score"].to_numpy(dtype=np.float64)
    notes: list[str] = []
    pearson, spearman = _correlations(live, cand, notes)
    at: dict[str, float] = {}
    if threshold_of is not None:
        at = {v: float(threshold_of(v)) for v in {*map(str, answered["live_version"]),
                                                  *map(str, answered["model_version"])}}
        live_t = answered["live_version"].astype(str).map(at).to_numpy(dtype=np.float64)
        cand_t = answered["model_version"].astype(str).map(at).to_numpy(dtype=np.float64)
    else:
        live_t = cand_t = np.full(len(answered), threshold)
    live_flag, cand_flag = live >= live_t, cand >= cand_t
    to_flag = int(np.sum(cand_flag & ~live_flag))
    to_pass = int(np.sum(live_flag & ~cand_flag))
    n = len(answered)
    shadow_ms = ok_requests["latency_ms"].to_numpy(dtype=np.float64)
    live_ms = ok_requests["live_predict_ms"].to_numpy(dtype=np.float64)
    latency = {
        "shadow_p50_ms": _pct(shadow_ms, 50), "shadow_p99_ms": _pct(shadow_ms, 99),
        "live_p50_ms": _pct(live_ms, 50), "live_p99_ms": _pct(live_ms, 99),
    }
    latency["p50_diff_ms"] = _diff(latency["shadow_p50_ms"], latency["live_p50_ms"])
    latency["p99_diff_ms"] = _diff(latency["shadow_p99_ms"], latency["live_p99_ms"])
    errors = int(status_counts.sum())
    result = ShadowAnalysis(
        model=model,
        candidate_versions=tuple(sorted({str(v) for v in frame["model_version"]})),
        live_versions=tuple(sorted({str(v) for v in frame["live_version"]})),
        threshold=threshold, requests=len(per_request), rows=len(frame), answered_rows=n, errors=errors,
        error_rate=errors / len(per_request), errors_by_status={str(k): int(v) for k, v in status_counts.items()},
        pearson=pearson, spearman=spearman, mean_abs_diff=float(np.mean(np.abs(cand - live))) if n else None,
        flipped=to_flag + to_pass, flip_rate=(to_flag + to_pass) / n if n else None, flipped_to_flag=to_flag,
        flipped_to_pass=to_pass, latency=latency, notes=tuple(notes), version_thresholds=at,
    )
    return _check(result, limits) if limits is not None else result


def _correlations(live: np.ndarray, cand: np.ndarray, notes: list[str]) -> tuple[float | None, float | None]:
    from scipy import stats

    if len(live) < 2:
        notes.append(f"{len(live)} answered instance(s): too few for a correlation")
        return None, None
    if np.ptp(live) == 0 or np.ptp(cand) == 0:
        notes.append("the live or the candidate scores are constant: correlation undefined")
        return None, None
    return float(stats.pearsonr(live, cand).statistic), float(stats.spearmanr(live, cand).statistic)


def _pct(values: np.ndarray, q: float) -> float | None:
    return float(np.percentile(values, q)) if len(values) else None


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def _check(result: ShadowAnalysis, limits: ShadowLimits) -> ShadowAnalysis:
    reasons = []
    if result.requests < limits.min_requests:
        reasons.append(f"{result.requests} mirrored request(s); at least {limits.min_requests} needed")
    if limits.max_error_rate is not None and result.error_rate > limits.max_error_rate:
        reasons.append(f"candidate error rate {result.error_rate:.4f} > {limits.max_error_rate} "
                       f"({result.errors_by_status})")
    if limits.max_flip_rate is not None:
        if result.flip_rate is None:
            reasons.append("no answered instance: the flip rate is unknown")
        elif result.flip_rate > limits.max_flip_rate:
            at = (", ".join(f"v{v} {t:.4g}" for v, t in sorted(result.version_thresholds.items()))
                  or f"{result.threshold}")
            reasons.append(f"{result.flipped} of {result.answered_rows} decisions flipped at {at} "
                           f"(rate {result.flip_rate:.4f} > {limits.max_flip_rate})")
    diff = result.latency["p99_diff_ms"]
    if limits.max_p99_diff_ms is not None and (diff is None or diff > limits.max_p99_diff_ms):
        reasons.append(f"candidate p99 exceeds the live p99 by {diff} ms (limit {limits.max_p99_diff_ms} ms)")
    return ShadowAnalysis(**{**asdict(result), "passed": not reasons, "reasons": tuple(reasons)})


def analyze_shadow(log_uri: str | Path, model: str, *, threshold: float, since: datetime | None = None,
                   until: datetime | None = None, versions: Sequence[str | int] | None = None,
                   limits: ShadowLimits | None = None,
                   threshold_of: Callable[[str], float] | None = None) -> ShadowAnalysis:
    """Read the shadow log of ``model`` beside the prediction log at ``log_uri`` and analyse it.

    Raises:
        ShadowError: nothing was mirrored in the window (or the log lacks the shadow columns), or a bad argument.
    """
    from mlops_serving import PredictionLogError, read_shadow_log, shadow_log_uri

    if not 0 < threshold < 1:
        raise ShadowError(f"threshold {threshold!r} must be a score strictly between 0 and 1")
    if since is not None and until is not None and since > until:
        raise ShadowError(f"since {since.isoformat()} is after until {until.isoformat()}")
    try:
        frame = read_shadow_log(log_uri, model, since=since, until=until, versions=versions)
    except PredictionLogError as exc:
        raise ShadowError(f"cannot read the shadow log: {exc}") from None
    if frame.empty:
        window = f" between {since} and {until}" if since or until else ""
        only = f" of version(s) {list(versions)!r}" if versions else ""
        raise ShadowError(f"no shadow answers of {model!r}{only}{window} in {shadow_log_uri(log_uri)!r}: is "
                          "serving.tabular.shadow.fraction > 0 with serving.tabular.shadow.url set on the transformer?")
    return summarize_shadow(frame, model=model, threshold=threshold, limits=limits, threshold_of=threshold_of)


def analyze_shadow_until_enough(log_uri: str | Path, model: str, *, threshold: float, wait_s: float = 0.0,
                                interval_s: float = 30.0, limits: ShadowLimits | None = None,
                                threshold_of: Callable[[str], float] | None = None,
                                **window: Any) -> ShadowAnalysis:
    """:func:`analyze_shadow`, retried every ``interval_s`` for up to ``wait_s`` while fewer than
    ``limits.min_requests`` requests were mirrored (or none yet); the last answer (or error) stands."""
    import time

    deadline = time.monotonic() + wait_s
    need = limits.min_requests if limits is not None else 1
    while True:
        try:
            result = analyze_shadow(log_uri, model, threshold=threshold, limits=limits, threshold_of=threshold_of,
                                    **window)
            if result.requests >= need or time.monotonic() + interval_s > deadline:
                return result
        except ShadowError as exc:
            if "no shadow answers" not in str(exc) or time.monotonic() + interval_s > deadline:
                raise
        time.sleep(interval_s)
