"""A per-version decision threshold: chosen at training, recorded in ``model.json``, read wherever a score
becomes a decision (the gates, the monitor, the canary's estimate).

A score at or above the threshold flags the transaction. A fixed 0.5 is right for no model: calibrated scores
are probabilities of fraud (a few percent here), so the F1-optimal threshold sits far below 0.5, and it moves
with every retraining. Training chooses it on the validation split, on the scores the export serves
(calibrated, if it is), by ``training.decision_threshold.criterion``:

- ``f1``: the cut that maximises F1 over every distinct validation score used as threshold (the points of
  scikit-learn's ``precision_recall_curve``); among equal F1, the highest (fewer flags). The threshold recorded is
  the midpoint between that score and the next lower distinct one: the same decisions on validation, and no row
  sits on the edge, where a score recomputed in another batch or on another CPU (a last-bit difference) would
  flip its decision;
- ``fixed``: ``training.decision_threshold.value``, recorded with the F1 it gives on validation.

``model.json`` gains ``decision_threshold: {"value", "criterion", "split", "rows", "positives", "f1",
"precision", "recall"}``.

Readers call :func:`resolve_threshold`: the recorded value, or a config override (named, with the recorded value
it disagrees with, in every reason that uses it). An export made before thresholds were recorded falls back to
:data:`LEGACY_THRESHOLD` (0.5, what every decision used then), and the reason says so.

A realized F1 (labelled traffic, scored at the version's threshold) is compared with :func:`reference_f1`: the
validation F1 recorded at that same threshold (``decision_threshold.f1``), never the trainer's ``val_f1``, which
is measured on raw scores at 0.5 and so answers another question.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from mlops_model.errors import ExportedModelError

CRITERIA = ("f1", "fixed")
LEGACY_THRESHOLD = 0.5
"""The threshold of an export that records none (made before per-version thresholds): what every gate, monitor
and canary used then."""
META_KEY = "decision_threshold"


def f1_optimal_threshold(labels: Any, scores: Any) -> tuple[float, dict[str, float]]:
    """A threshold ``t`` maximising F1 of ``score >= t`` over the distinct ``scores``, and the counts there.

    The best cut is a distinct score (ties in F1 go to the highest); ``t`` is the midpoint between it and the next
    lower distinct score (the cut itself when none is lower), so ``score >= t`` makes the same decisions on these
    scores while none of them lies at ``t``. Raises :class:`ExportedModelError` without positives (no F1 to
    maximise) or on mismatched lengths.
    """
    y = np.asarray(labels, dtype=np.int64).ravel()
    s = np.asarray(scores, dtype=np.float64).ravel()
    if len(y) != len(s) or not len(s) or not y.sum():
        raise ExportedModelError(f"an F1-optimal threshold needs scores and labels of one length with positives; "
                                 f"got {len(s)} scores, {len(y)} labels, {int(y.sum())} positive")
    if not np.all(np.isfinite(s)):
        raise ExportedModelError("an F1-optimal threshold needs finite scores; got NaN or infinity")
    order = np.argsort(-s, kind="stable")
    s_desc, y_desc = s[order], y[order]
    tp = np.cumsum(y_desc)
    flagged = np.arange(1, len(s) + 1)
    last = np.r_[np.flatnonzero(np.diff(s_desc) != 0), len(s) - 1]  # the last row of each distinct score
    tp, flagged, cut = tp[last], flagged[last], s_desc[last]
    f1 = 2 * tp / (flagged + y.sum())
    best = int(np.flatnonzero(f1 == f1.max())[0])  # descending thresholds: the first best is the highest
    t = float(cut[best]) if best + 1 == len(cut) else float((cut[best] + cut[best + 1]) / 2)
    n_tp, n_flag = int(tp[best]), int(flagged[best])
    return t, {"f1": float(f1[best]), "precision": n_tp / n_flag, "recall": n_tp / int(y.sum())}


def choose_threshold(labels: Any, scores: Any, criterion: str, value: float = LEGACY_THRESHOLD) -> dict[str, Any]:
    """The ``decision_threshold`` entry of ``model.json`` for validation ``labels`` and served ``scores``."""
    if criterion not in CRITERIA:
        raise ExportedModelError(f"decision threshold criterion {criterion!r}; expected one of {CRITERIA!r}")
    y = np.asarray(labels, dtype=np.int64).ravel()
    s = np.asarray(scores, dtype=np.float64).ravel()
    if criterion == "f1":
        t, figures = f1_optimal_threshold(y, s)
    else:
        if not 0 < value < 1:
            raise ExportedModelError(f"fixed decision threshold {value!r}; expected a value in (0, 1)")
        t = float(value)
        flags = s >= t
        tp, positives = int((flags & (y == 1)).sum()), int(y.sum())
        n_flag = int(flags.sum())
        figures = {"f1": 2 * tp / (n_flag + positives) if n_flag + positives else 0.0,
                   "precision": tp / n_flag if n_flag else 0.0, "recall": tp / positives if positives else 0.0}
    return {"value": t, "criterion": criterion, "split": "validation", "rows": len(y), "positives": int(y.sum()),
            **figures}


@dataclass(frozen=True)
class ThresholdChoice:
    """The threshold a reader decides at, where it came from, and a sentence saying so.

    ``source``: ``model`` (recorded in ``model.json``), ``override`` (a config key set), ``legacy`` (nothing
    recorded: :data:`LEGACY_THRESHOLD`). ``recorded`` is the model's own value (``None`` when it has none).
    """

    value: float
    source: str
    recorded: float | None
    note: str
    recorded_f1: float | None = None
    """The validation F1 ``model.json`` records at the recorded threshold (``decision_threshold.f1``); ``None``
    for an export that records none."""

    @property
    def disagrees(self) -> bool:
        """An override set to something other than the model's recorded threshold."""
        return self.source == "override" and self.recorded is not None and not math.isclose(self.value,
                                                                                           self.recorded)

    def as_dict(self) -> dict[str, Any]:
        return {"value": self.value, "source": self.source, "recorded": self.recorded, "note": self.note}


def recorded_threshold(meta: Mapping[str, Any] | None, *, source: str = "model.json") -> float | None:
    """``model.json``'s ``decision_threshold.value``, or ``None`` for an export that records none."""
    raw = (meta or {}).get(META_KEY)
    if raw is None:
        return None
    value: Any = raw.get("value") if isinstance(raw, Mapping) else raw
    try:
        t = float(value)
    except (TypeError, ValueError):
        raise ExportedModelError(f"{source}: decision_threshold {raw!r}; expected {{'value': a number in (0, 1)}}"
                                 ) from None
    if not 0 < t < 1:
        raise ExportedModelError(f"{source}: decision_threshold {t!r} is outside (0, 1)")
    return t


def recorded_f1(meta: Mapping[str, Any] | None, *, source: str = "model.json") -> float | None:
    """``model.json``'s ``decision_threshold.f1`` (validation F1 at the recorded threshold), or ``None`` for an
    export that records none (no threshold, or a bare number)."""
    raw = (meta or {}).get(META_KEY)
    if not isinstance(raw, Mapping) or raw.get("f1") is None:
        return None
    try:
        f1 = float(raw["f1"])
    except (TypeError, ValueError):
        raise ExportedModelError(f"{source}: decision_threshold.f1 {raw['f1']!r}; expected a number in [0, 1]"
                                 ) from None
    if not 0 <= f1 <= 1:
        raise ExportedModelError(f"{source}: decision_threshold.f1 {f1!r} is outside [0, 1]")
    return f1


def resolve_threshold(meta: Mapping[str, Any] | None, override: float | None, *, override_key: str,
                      model: str = "the model") -> ThresholdChoice:
    """The threshold to decide at for ``model`` (e.g. ``"candidate v3"``): ``override`` (config key
    ``override_key``) when set, else the recorded one, else :data:`LEGACY_THRESHOLD`; the note says which."""
    recorded = recorded_threshold(meta, source=f"{model}'s model.json")
    f1 = recorded_f1(meta, source=f"{model}'s model.json") if recorded is not None else None
    if override is not None:
        if recorded is None:
            note = f"{override_key}={override:g} (override; {model} records no threshold)"
        elif math.isclose(override, recorded):
            note = f"{override_key}={override:g} (override, equal to {model}'s recorded threshold)"
        else:
            note = (f"{override_key}={override:g} overrides {model}'s recorded threshold {recorded:.4g} "
                    "(they disagree)")
        return ThresholdChoice(float(override), "override", recorded, note, f1)
    if recorded is None:
        return ThresholdChoice(LEGACY_THRESHOLD, "legacy", None,
                               f"{model} records no decision_threshold (exported before per-version thresholds): "
                               f"the legacy {LEGACY_THRESHOLD:g}")
    return ThresholdChoice(recorded, "model", recorded, f"{model}'s recorded threshold {recorded:.4g}", f1)


@dataclass(frozen=True)
class ReferenceF1:
    """The F1 a realized F1 is compared with, the threshold it was measured at, and a sentence saying which.

    ``source``: ``model`` (``model.json``'s validation F1 at the recorded threshold), ``given`` (one figure given
    for every version), ``fallback`` (the export records none; the caller's named figure stands in), ``none``
    (nothing to compare with: the verdict is inconclusive).
    """

    value: float | None
    source: str
    threshold: float | None
    note: str

    def as_dict(self) -> dict[str, Any]:
        return {"value": self.value, "source": self.source, "threshold": self.threshold, "note": self.note}


def reference_f1(choice: ThresholdChoice, *, model: str = "the model", fallback: float | None = None,
                 fallback_what: str = "the trainer's val_f1 (raw scores at 0.5)") -> ReferenceF1:
    """The reference F1 for ``model``'s realized F1 at ``choice.value``: the validation F1 recorded at the
    recorded threshold, else (an export that records none) ``fallback``, named as ``fallback_what``; the note
    says which figure at which threshold, and names an override threshold that differs from the one the
    reference was measured at."""
    at_override = (f"; the realized F1 is scored at the override {choice.value:g}, not at that threshold"
                   if choice.disagrees else "")
    if choice.recorded_f1 is not None and choice.recorded is not None:
        return ReferenceF1(choice.recorded_f1, "model", choice.recorded,
                           f"{model}'s validation F1 {choice.recorded_f1:.4f} at its recorded threshold "
                           f"{choice.recorded:.4g} (model.json decision_threshold.f1){at_override}")
    missing = (f"{model} records no validation F1 at a decision threshold" if choice.recorded is None
               else f"{model}'s decision_threshold records no f1")
    if fallback is not None:
        return ReferenceF1(float(fallback), "fallback", None,
                           f"{missing} (exported before per-version thresholds): falling back to {fallback_what} "
                           f"{fallback:.4f}")
    return ReferenceF1(None, "none", None, f"{missing} (exported before per-version thresholds) and no fallback "
                                           "reference was given")
