"""The loop's labels step (the demo and the rehearsal): the truth about what was served arrives a week later.

Every prediction the loop served (the canary's normal traffic and the drifted day) gets its label from the
generator's label column (the contract's ``label``, joined on its ``record_id``), stamped one simulated week after
the prediction, and goes through the labels gate the way ``mlops data labels ingest`` takes it: a landed batch
under ``data.labels_landing_uri`` (the labels CronJob), else the batch file. The gate runs at the simulated time (a
week on), since a label stamped in the future is quarantined. Then :func:`mlops_monitoring.performance_report`
joins labels to the log: realized and CBPE-estimated F1 per served version, what the report's performance section
shows for the champion and the rolled-back version.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pandas as pd

from mlops_config import ContractConfig

WEEK = timedelta(days=7)


def land_week_late_labels(log_uri: str, model: str, truth: pd.DataFrame, dest: Path, *,
                          contract: ContractConfig) -> tuple[Path, pd.Timestamp]:
    """Write one label batch for every logged prediction whose record ``truth`` knows (the ``contract``'s
    ``record_id`` and ``label`` columns), each stamped a week after its prediction; returns the batch and the
    simulated arrival time. The batch holds the label batch format's columns (``mlops_features.label_schema``: the
    ``record_id``, ``label``, ``label_time``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mlops_features import label_schema
    from mlops_serving import read_prediction_log

    rid, label = contract.record_id, contract.label
    served = read_prediction_log(log_uri, model, columns=[rid, "ts"])
    known = truth[[rid, label]].drop_duplicates(rid)
    rows = served.drop_duplicates(rid).merge(known, on=rid, how="inner")
    if rows.empty:
        from mlops_pipeline.errors import PipelineError

        raise PipelineError(f"none of the {len(served)} predictions in {log_uri!r} has a known label")
    label_time = pd.to_datetime(rows["ts"], utc=True) + WEEK
    batch = pd.DataFrame({rid: rows[rid].astype(str), "label": rows[label].astype("int64"), "label_time": label_time})
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / f"labels-{label_time.min():%Y%m%dT%H%M%S}.parquet"
    pq.write_table(pa.Table.from_pandas(batch, schema=label_schema(rid), preserve_index=False), path)
    return path, label_time.max() + timedelta(minutes=1)


def labels_a_week_later(log_uri: str, model: str, truth: pd.DataFrame, work: Path, *,
                        landing_uri: str | None = None, contract: ContractConfig) -> dict[str, Any]:
    """Land the week-late labels and gate them as ``mlops data labels ingest`` does; returns the gate's figures."""
    from mlops_monitoring import ingest_label_batches, ingest_landed_labels

    if landing_uri:  # the labels CronJob: whatever landed and was not gated yet
        path, arrived = land_week_late_labels(log_uri, model, truth, Path(landing_uri.removeprefix("file://")),
                                              contract=contract)
        summary, _ = ingest_landed_labels(landing_uri, log_uri, model, record_id=contract.record_id,
                                          now=arrived.to_pydatetime())
    else:
        path, arrived = land_week_late_labels(log_uri, model, truth, work, contract=contract)
        summary = ingest_label_batches([path], log_uri, model, record_id=contract.record_id,
                                       now=arrived.to_pydatetime())
    return {"batch": str(path), "arrived": arrived.isoformat(), "input_rows": summary.input_rows,
            "accepted_rows": summary.accepted_rows, "quarantined_rows": summary.quarantined_rows}


def version_figures(windows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per served version (and traffic, where windows name one): realized and estimated F1 of its latest window."""
    out: dict[str, dict[str, Any]] = {}
    for w in windows:
        key = f"v{w['version']}" + (f" {w['traffic']}" if w.get("traffic") else "")
        out[key] = {"version": w["version"], "realized_f1": w["realized"]["f1"], "estimated_f1": w["estimated"]["f1"],
                    "labelled": w["n_labelled"], "predictions": w["n_predictions"]}
    return out


TRAINER_VAL_F1 = "the candidate's training val_f1 (raw scores at 0.5)"
"""What the labels steps fall back to for a version whose ``model.json`` records no validation F1 at a threshold."""


def performance_of(log_uri: str, model: str, monitoring: Any, fallback_f1: float | None,
                   threshold_of: Callable[[str], Any] | None = None, *, contract: ContractConfig,
                   fallback_what: str = TRAINER_VAL_F1) -> dict[str, Any]:
    """``mlops monitor performance``'s report of ``log_uri`` (as a dict), the monitoring section's settings, each
    version at ``threshold_of(version).value`` (:func:`mlops_serving.version_thresholds`) when given, its realized
    F1 against its own validation F1 at that threshold (:func:`mlops_model.reference_f1`); a version that records
    none falls back to ``fallback_f1`` (``fallback_what``), and its verdict's reason says so. Labels join the log on
    the ``contract``'s ``record_id``."""
    from mlops_model import LEGACY_THRESHOLD, reference_f1, resolve_threshold
    from mlops_monitoring import performance_report

    m = monitoring
    of = threshold_of or (lambda v: resolve_threshold(None, m.decision_threshold,
                                                      override_key="monitoring.decision_threshold", model=f"v{v}"))
    return performance_report(log_uri, model, m.decision_threshold or LEGACY_THRESHOLD, record_id=contract.record_id,
                              window=m.performance_window,
                              max_drop=m.max_f1_drop, min_labelled=m.performance_min_labelled,
                              bins=m.calibration_bins, interval=m.estimate_interval,
                              threshold_of=lambda v: of(v).value,
                              reference_of=lambda v: reference_f1(of(v), model=f"v{v}", fallback=fallback_f1,
                                                                  fallback_what=fallback_what)).to_dict()


def version_references(verdicts: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per version: the reference F1 its realized F1 was compared with, and the sentence naming it."""
    return {v: {"reference_f1": d.get("reference_f1"), "reference": d.get("reference")} for v, d in verdicts.items()}


def summarize_labels(outputs: dict[str, Any]) -> str:
    """The step's one line: the gate's counts, then realized vs estimated F1 per version."""
    def f1(x: Any) -> str:
        return "-" if x is None else f"{x:.3f}"

    per = "; ".join(f"{key}: F1 {f1(x['realized_f1'])} realized / {f1(x['estimated_f1'])} estimated"
                    for key, x in outputs["versions"].items())
    return (f"{outputs['labels']['accepted_rows']} labels a week late ({outputs['labels']['quarantined_rows']} "
            f"quarantined); {per}")
