"""Prometheus counters of the retraining triggers' outcomes, read from their ledger.

Every trigger (``mlops monitor run``, ``mlops monitor performance``, ``mlops data ingest``) and every
``mlops retrain request`` appends its outcome to one JSON-lines ledger. The ledger only grows, so counting it
gives true counters (monotonic, reset only when the ledger is) for a short-lived job: the CronJob writes the file
for node-exporter's textfile collector, as the drift metrics are written, instead of a process that keeps counting.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from mlops_delivery.errors import DeliveryError

METRIC = "mlops_retrain_triggers"
"""Exposed as ``mlops_retrain_triggers_total{model, reason, outcome}``."""

OUTCOMES = ("opened", "updated", "rate-limited", "up_to_date", "disabled", "failed")
"""Every outcome a trigger can have; each is exposed (0 until it happens) for every model and reason seen, so a
``rate()`` or ``increase()`` over a first failure sees the step from 0."""


def count_outcomes(ledger: Path) -> Counter[tuple[str, str, str]]:
    """``(model, reason, outcome) -> count`` over the ledger (an absent ledger: nothing yet)."""
    counts: Counter[tuple[str, str, str]] = Counter()
    if not ledger.is_file():
        return counts
    for n, line in enumerate(ledger.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            key = (str(row["model"]), str(row["reason"]), str(row["status"]))
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise DeliveryError(f"retrain ledger {str(ledger)!r} line {n} is not an outcome record ({exc}): "
                                f"{line[:80]!r}; expected the JSON `mlops retrain request` appends") from None
        counts[key] += 1
    return counts


def retrain_metrics_text(ledger: Path) -> str:
    """The ledger's outcomes as Prometheus text: ``mlops_retrain_triggers_total{model, reason, outcome}``.

    Written by hand rather than through a client registry: a registry adds ``_created`` samples stamped with the
    time of this write, which for counters rebuilt from a ledger would claim a reset on every run.
    """
    counts = count_outcomes(ledger)
    pairs = sorted({(m, r) for m, r, _ in counts})
    rows = {(m, r, o): counts.get((m, r, o), 0) for m, r in pairs for o in OUTCOMES}
    rows.update(counts)  # a status this version does not know still counts, under its own name
    lines = [f"# HELP {METRIC}_total Retraining trigger outcomes, counted from the retrain ledger",
             f"# TYPE {METRIC}_total counter"]
    lines += [f'{METRIC}_total{{model="{_esc(m)}",reason="{_esc(r)}",outcome="{_esc(o)}"}} {n}'
              for (m, r, o), n in sorted(rows.items())]
    return "\n".join(lines) + "\n"


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
