"""The local canary serves both versions from one process: its one /metrics must be split by version."""

from __future__ import annotations

import numpy as np

from mlops_config import DeliveryConfig
from mlops_delivery.canary import variant_evidence

TEXT = """\
# TYPE mlops_serving_requests counter
mlops_serving_requests_total{model="fraud",version="1",variant="stable",protocol="v1"} 300.0
mlops_serving_requests_total{model="fraud",version="2",variant="canary",protocol="v1"} 100.0
# TYPE mlops_serving_errors counter
mlops_serving_errors_total{model="fraud",version="",type="NotReady",status="503"} 7.0
mlops_serving_errors_total{model="fraud",version="2",type="Internal",status="500"} 4.0
# TYPE mlops_serving_request_seconds histogram
mlops_serving_request_seconds_bucket{model="fraud",version="1",variant="stable",le="0.005"} 300.0
mlops_serving_request_seconds_bucket{model="fraud",version="1",variant="stable",le="0.1"} 300.0
mlops_serving_request_seconds_bucket{model="fraud",version="1",variant="stable",le="+Inf"} 300.0
mlops_serving_request_seconds_bucket{model="fraud",version="2",variant="canary",le="0.005"} 0.0
mlops_serving_request_seconds_bucket{model="fraud",version="2",variant="canary",le="0.05"} 100.0
mlops_serving_request_seconds_bucket{model="fraud",version="2",variant="canary",le="0.1"} 100.0
mlops_serving_request_seconds_bucket{model="fraud",version="2",variant="canary",le="+Inf"} 100.0
"""


def test_versions_in_one_exposition_are_kept_apart() -> None:
    cfg = DeliveryConfig()
    stable = variant_evidence(cfg, TEXT, np.zeros(300), 1, source="mem", model="fraud")
    canary = variant_evidence(cfg, TEXT, np.zeros(100), 2, source="mem", model="fraud")
    assert (stable.requests, stable.errors) == (300.0, 0.0)  # not-ready 503s carry no version: not the stable's
    assert (canary.requests, canary.errors) == (104.0, 4.0)
    assert canary.error_rate == 4.0 / 104.0
    # stable: every observation ≤ 5 ms; canary: all in (5 ms, 50 ms] → p99 by linear interpolation inside it
    assert stable.p99_s <= 0.005
    assert abs(canary.p99_s - (0.005 + 0.99 * (0.05 - 0.005))) < 1e-12


def _evidence(p99_s: float, version: int):
    from mlops_delivery.canary import VariantEvidence

    return VariantEvidence(version=version, requests=1000, errors=0, error_rate=0.0, p99_s=p99_s,
                           logged_predictions=1000)


def test_p99_needs_ratio_and_slack_to_fail() -> None:
    from mlops_delivery.canary import decide

    cfg = DeliveryConfig(max_p99_ratio=1.2, p99_slack_ms=2.0)
    # 5.00 → 6.15 ms is x1.23 but 1.15 ms: inside one 2.5 ms histogram bucket, so not a regression
    decision, reasons = decide(cfg, _evidence(0.005, 1), _evidence(0.00615, 2), psi=0.01)
    assert decision == "promote", reasons
    # limit = 5 × 1.2 + 2 = 8 ms: 8.1 ms fails, 7.9 ms passes
    assert decide(cfg, _evidence(0.005, 1), _evidence(0.0081, 2), psi=0.01)[0] == "rollback"
    assert decide(cfg, _evidence(0.005, 1), _evidence(0.0079, 2), psi=0.01)[0] == "promote"
