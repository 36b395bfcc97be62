"""A fast path for ``mlops_features.encode`` on request rows, checked against it before use.

``mlops_features.encode`` is the one encoding (training and serving). It works on a DataFrame, which costs
milliseconds per call: more than the whole rest of a request. :class:`RecordEncoder` computes the same
numbers from a list of dicts with numpy for the encoder format it knows (version 1: numeric with optional
signed log1p, derived ``log_ratio``, one-hot categoricals with one slot for anything else). It is only used
after :func:`compile_encoder` found it equal to ``mlops_features.encode`` on probe rows (missing values,
unknown categories, negatives, large values); for any other encoder version, or any mismatch, the reference
encoder is used as it is. The parity is also pinned by a test on real training rows.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

SUPPORTED_VERSION = 1
RecordsEncode = Callable[[Sequence[Mapping[str, Any]]], np.ndarray]


class RecordEncoder:
    """Encodes a list of row dicts exactly like ``mlops_features.encode`` does a DataFrame (version 1)."""

    def __init__(self, spec: Mapping[str, Any]) -> None:
        if spec.get("version") != SUPPORTED_VERSION:
            raise ValueError(f"encoder version {spec.get('version')!r} is not {SUPPORTED_VERSION}")
        self.input_dim = int(spec["input_dim"])
        self._numeric = [(n["name"], bool(n.get("log")), float(n["mean"]), float(n["std"])) for n in spec["numeric"]]
        self._derived = [(d["op"], list(d["args"]), float(d["mean"]), float(d["std"])) for d in spec["derived"]]
        if any(op != "log_ratio" for op, *_ in self._derived):
            raise ValueError(f"unknown derived op in {[d[0] for d in self._derived]!r}")
        self._categorical = [(c["name"], {v: i for i, v in enumerate(c["vocab"])}) for c in spec["categorical"]]

    def __call__(self, records: Sequence[Mapping[str, Any]]) -> np.ndarray:
        n = len(records)
        out = np.zeros((n, self.input_dim), dtype=np.float32)
        col = 0
        for name, use_log, mean, std in self._numeric:
            v = self._column(records, name)
            if use_log:
                v = np.sign(v) * np.log1p(np.abs(v))
            out[:, col] = _scale(v, mean, std)
            col += 1
        for _, args, mean, std in self._derived:
            a, b = (self._column(records, x) for x in args)
            with np.errstate(divide="ignore", invalid="ignore"):
                v = np.log((np.abs(a) + 1.0) / (np.abs(b) + 1.0))
            out[:, col] = _scale(v, mean, std)
            col += 1
        rows = np.arange(n)
        for name, index in self._categorical:
            other = len(index)
            slots = [other if (x := r.get(name)) is None or _is_nan(x) else index.get(str(x), other) for r in records]
            out[rows, col + np.asarray(slots, dtype=np.int64)] = 1.0
            col += other + 1
        return out

    @staticmethod
    def _column(records: Sequence[Mapping[str, Any]], name: str) -> np.ndarray:
        return np.array([r.get(name) for r in records], dtype=np.float64)


def _scale(values: np.ndarray, mean: float, std: float) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        scaled = (values - mean) / std
    return np.where(np.isfinite(scaled), scaled, 0.0)


def _is_nan(x: Any) -> bool:
    return isinstance(x, float) and x != x


def probe_rows(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Rows that exercise every branch of the spec: typical, missing, unknown, negative and large values."""
    numeric = [n["name"] for n in spec.get("numeric", [])]
    categorical = [(c["name"], list(c["vocab"])) for c in spec.get("categorical", [])]
    rows: list[dict[str, Any]] = []
    for k, scale in enumerate((0.0, 1.0, -3.5, 12345.678, None, 0.25)):
        row: dict[str, Any] = {}
        for j, name in enumerate(numeric):
            row[name] = None if scale is None else scale * (j + 1)
        for name, vocab in categorical:
            choices = [*vocab, "__never_seen__", None]
            row[name] = choices[k % len(choices)]
        rows.append(row)
    return rows


def compile_encoder(spec: Mapping[str, Any], reference: Callable[[Any, dict[str, Any]], np.ndarray]) -> RecordsEncode:
    """The fastest encoder for ``spec`` that equals ``reference`` (``mlops_features.encode``) on probe rows."""
    import pandas as pd

    def slow(records: Sequence[Mapping[str, Any]]) -> np.ndarray:
        return reference(pd.DataFrame.from_records(list(records)), dict(spec))

    try:
        fast = RecordEncoder(spec)
    except (ValueError, KeyError, TypeError) as exc:
        log.info("encoder fast path not used (%s); using the reference encoder", exc)
        return slow
    probes = probe_rows(spec)
    try:
        want = slow(probes)
        got = fast(probes)
    except Exception as exc:  # the reference refusing a probe is not a reason to fail the load
        log.warning("encoder parity probe failed (%s); using the reference encoder", exc)
        return slow
    if want.shape != got.shape or not np.allclose(want, got, rtol=1e-6, atol=1e-6):
        log.warning("encoder fast path differs from mlops_features.encode; using the reference encoder")
        return slow
    return fast
